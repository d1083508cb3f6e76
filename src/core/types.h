// The types every internal layer shares: element types, devices, streams and the status of a call. They mirror
// the public API's (include/moegrad/*.hpp) value for value, so the entry layer converts by a cast, but they
// depend on nothing public: a backend or a kernel sees only these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace moegrad::core {

// Values are those of aclDataType (and of moegrad::DType).
enum class DType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUInt8 = 4,
  kInt16 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kInt64 = 9,
  kUInt64 = 10,
  kFloat64 = 11,
  kBool = 12,
  kBFloat16 = 27,
};

// Size in bytes of one element; 0 for a value that is not a DType.
constexpr size_t ElementSize(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kInt64: case DType::kUInt64: case DType::kFloat64: return 8;
  }
  return 0;
}

// "FLOAT32", "BFLOAT16", ... (the names messages use); "UNKNOWN" for a value that is not a DType.
const char* DTypeName(DType t);

// Where a tensor's bytes live (moegrad::Device). Execution goes to the backend of the call's device.
enum class Device : int32_t {
  kHost = 0,
};

// The queue phase two is submitted to (an aclrtStream); null is the default stream. The host backend runs
// every call to completion before returning, so it needs none.
using Stream = void*;

// Values are the aclnn status codes (and moegrad::StatusCode).
enum class StatusCode : int32_t {
  kOk = 0,
  kNullptr = 161001,       // ACLNN_ERR_PARAM_NULLPTR
  kInvalid = 161002,       // ACLNN_ERR_PARAM_INVALID
  kRuntimeError = 361001,  // ACLNN_ERR_RUNTIME_ERROR
  kInner = 561000,         // ACLNN_ERR_INNER
  kUnsupported = 561003,   // ACLNN_ERR_INNER_FIND_KERNEL_ERROR: no backend runs this call
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace moegrad::core
