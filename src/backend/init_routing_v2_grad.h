// MoeInitRoutingV2Grad as the operator layer hands it to a backend: every rule has passed; what is left is index
// data (checked by the backend in phase two) and execution. See docs/ops/init_routing_v2_grad.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct InitRoutingV2GradProblem {
  static constexpr const char* kName = "MoeInitRoutingV2Grad";

  core::DType dtype = core::DType::kFloat32;  // the token group: gradExpandedX, out
  int64_t mode = 0;    // dropPadMode: 0 dropless, 1 drop/pad
  int64_t tokens = 0;  // N = L / K
  int64_t topk = 0;    // K
  int64_t hidden = 0;  // H
  // Rows of gradExpandedX: min(activeNum, L) or L in mode 0, E*C in mode 1. A valid expandedRowIdx value v is a
  // term when 0 <= v < rows, else skipped (v >= activeNum in mode 0, -1 in mode 1).
  int64_t rows = 0;
  core::RowView grad_expanded_x;  // (rows, H) or (E, C, H)
  core::FlatView row_idx;         // (L) int32
  core::RowView out;              // output (N, H)
};

}  // namespace moegrad::backend
