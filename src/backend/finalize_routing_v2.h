// MoeFinalizeRoutingV2 as the operator layer hands it to a backend: every rule has passed; what is left is
// index data (checked by the backend in phase two) and execution. See docs/ops/finalize_routing_v2.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct FinalizeRoutingV2Problem {
  static constexpr const char* kName = "MoeFinalizeRoutingV2";

  core::DType dtype = core::DType::kFloat32;         // the token group: expandedX, x1, x2, bias, out
  core::DType weight_dtype = core::DType::kFloat32;  // the weight group: scales
  int64_t mode = 0;           // dropPadMode 0..3
  int64_t tokens = 0;         // R
  int64_t topk = 0;           // K
  int64_t hidden = 0;         // H
  int64_t rows = 0;           // rows of expandedX (R*K, or E*C in drop/pad modes)
  int64_t bias_rows = 0;      // rows of bias, the range of expertIdx (with bias)
  bool has_bias = false;      // bias given (its data may be null when it is empty)
  bool expert_major = false;  // pair (r, k) at p = k*R + r (modes 0, 1), else p = r*K + k
  core::RowView expanded_x;   // rows of expandedX
  core::FlatView row_idx;     // (R*K) int32; -1 marks a dropped pair
  core::RowView x1;           // (R, H); data null when absent
  core::RowView x2;           // (R, H); data null when absent
  core::FlatView scales;      // (R, K); data null when absent (s = 1)
  core::FlatView expert_idx;  // (R, K) int32; data null without bias
  core::RowView bias;         // (E, H); data null when absent
  core::RowView out;          // (R, H)
};

}  // namespace moegrad::backend
