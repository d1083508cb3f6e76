// Kernels of MoeFinalizeRoutingV2Grad. Inputs are validated and indices checked by the operator layer.
#pragma once

#include <cstdint>

#include "moegrad/tensor.hpp"
#include "src/kernels/kernel_types.h"

namespace moegrad::kernels {

struct FinalizeGradProblem {
  DType dtype = DType::kFloat32;
  int64_t tokens = 0;  // R
  int64_t topk = 0;    // K
  int64_t hidden = 0;  // H
  int64_t rows = 0;    // rows of gradExpandedX (E*C in drop/pad mode)
  RowView grad_y;      // (R, H)
  FlatView row_idx;    // (R*K) int32
  FlatView scales;     // (R, K); data null without scales
  FlatView expert_idx; // (R, K) int32; data null without bias
  RowView expanded_x;  // rows of expandedX; data null without scales
  RowView bias;        // (E, H); data null without bias
  RowView grad_expanded_x;
  FlatView grad_scales;  // data null without scales
  // Inverse of row_idx (built by the operator layer): the pairs writing row v are
  // pairs[offsets[v] .. offsets[v + 1]), ascending.
  const int64_t* offsets = nullptr;
  const int64_t* pairs = nullptr;
};

// Writes every row of gradExpandedX and, with scales, every gradScales entry.
void FinalizeRoutingV2Grad(const FinalizeGradProblem& p);

}  // namespace moegrad::kernels
