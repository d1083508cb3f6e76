// MoeFinalizeRoutingV2Grad as the operator layer hands it to a backend: every rule has passed; what is left is
// index data (checked by the backend in phase two) and execution. See docs/ops/finalize_routing_v2_grad.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct FinalizeRoutingV2GradProblem {
  static constexpr const char* kName = "MoeFinalizeRoutingV2Grad";

  core::DType dtype = core::DType::kFloat32;         // the token group: gradY, expandedX, bias, gradExpandedX
  core::DType weight_dtype = core::DType::kFloat32;  // the weight group: scales, gradScales
  int64_t mode = 0;       // dropPadMode: 0 dropless, 1 drop/pad
  int64_t tokens = 0;     // R
  int64_t topk = 0;       // K
  int64_t hidden = 0;     // H
  int64_t rows = 0;       // rows of gradExpandedX (E*C in drop/pad mode)
  int64_t bias_rows = 0;  // rows of bias, the range of expertIdx (with bias)
  bool has_bias = false;  // bias given (its data may be null when it is empty)
  core::RowView grad_y;      // (R, H)
  core::FlatView row_idx;    // (R*K) int32
  core::FlatView scales;     // (R, K); data null without scales
  core::FlatView expert_idx; // (R, K) int32; data null without bias
  core::RowView expanded_x;  // rows of expandedX; data null without scales
  core::RowView bias;        // (E, H); data null without bias
  core::RowView grad_expanded_x;
  core::FlatView grad_scales;  // data null without scales
};

}  // namespace moegrad::backend
