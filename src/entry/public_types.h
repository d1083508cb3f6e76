// The entry layer's one crossing between the public types (include/moegrad/) and the core's (src/core/types.h):
// the two share their values, which the static_asserts below hold.
#pragma once

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/types.h"

namespace moegrad::entry {

static_assert(static_cast<int>(StatusCode::kUnsupported) == static_cast<int>(core::StatusCode::kUnsupported) &&
                  static_cast<int>(StatusCode::kInvalid) == static_cast<int>(core::StatusCode::kInvalid) &&
                  static_cast<int>(StatusCode::kNullptr) == static_cast<int>(core::StatusCode::kNullptr) &&
                  static_cast<int>(StatusCode::kRuntimeError) == static_cast<int>(core::StatusCode::kRuntimeError) &&
                  static_cast<int>(StatusCode::kInner) == static_cast<int>(core::StatusCode::kInner),
              "public and core status codes differ");
static_assert(static_cast<int>(DType::kBFloat16) == static_cast<int>(core::DType::kBFloat16) &&
                  static_cast<int>(DType::kFloat16) == static_cast<int>(core::DType::kFloat16) &&
                  static_cast<int>(DType::kBool) == static_cast<int>(core::DType::kBool),
              "public and core dtypes differ");
static_assert(static_cast<int>(Device::kHost) == static_cast<int>(core::Device::kHost), "devices differ");

inline Status ToPublic(const core::Status& s) {
  return s.ok() ? Status() : Status(static_cast<StatusCode>(s.code()), s.message());
}

}  // namespace moegrad::entry
