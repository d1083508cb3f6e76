// Kernels of MoeFinalizeRoutingV2Grad. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/finalize_routing_v2_grad.h"
#include "src/backend/cpu/kernels/kernel_types.h"

namespace moegrad::kernels {

// The problem plus the index structure the CPU backend built for it in the workspace.
struct FinalizeRoutingV2GradTask : backend::FinalizeRoutingV2GradProblem {
  // Inverse of row_idx (built by the CPU backend): the pairs writing row v are
  // pairs[offsets[v] .. offsets[v + 1]), ascending.
  const int64_t* offsets = nullptr;
  const int64_t* pairs = nullptr;

  // Set instead of offsets/pairs when no row of gradExpandedX is written by more than one pair (always so for
  // the indices a forward pass produces): writer[v] is the pair writing row v, or -1 for the zero_rows rows
  // no pair writes; token_cost[r] is the cost (in half rows moved) of tokens [0, r), for the thread split.
  bool one_writer = false;
  const int64_t* writer = nullptr;
  const int64_t* token_cost = nullptr;
  int64_t heaviest_token_cost = 0;  // the largest token_cost[r + 1] - token_cost[r]
  int64_t zero_rows = 0;
};

// Writes every row of gradExpandedX and, with scales, every gradScales entry.
void RunFinalizeRoutingV2Grad(const FinalizeRoutingV2GradTask& t);

}  // namespace moegrad::kernels
