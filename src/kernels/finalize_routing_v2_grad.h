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

  // Set instead of offsets/pairs when no row of gradExpandedX is written by more than one pair (always so for
  // the indices a forward pass produces): writer[v] is the pair writing row v, or -1 for the zero_rows rows
  // no pair writes; token_cost[r] is the cost (in half rows moved) of tokens [0, r), for the thread split.
  bool one_writer = false;
  const int64_t* writer = nullptr;
  const int64_t* token_cost = nullptr;
  int64_t zero_rows = 0;
};

// Writes every row of gradExpandedX and, with scales, every gradScales entry.
void FinalizeRoutingV2Grad(const FinalizeGradProblem& p);

}  // namespace moegrad::kernels
