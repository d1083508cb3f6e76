// Kernels of MoeTokenUnpermuteWithRoutingMapGrad. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/kernel_types.h"
#include "src/backend/token_unpermute_with_routing_map_grad.h"

namespace moegrad::kernels {

// The problem plus the index structures the CPU backend built in the workspace.
struct TokenUnpermuteWithRoutingMapGradTask : backend::TokenUnpermuteWithRoutingMapGradProblem {
  // The pairs i with outIndex[i] == r are row_pairs[row_offsets[r] .. row_offsets[r + 1]), ascending.
  const int64_t* row_offsets = nullptr;
  const int64_t* row_pairs = nullptr;
  // With probs: the dot product d_i of every pair (written by the row pass, read by the probs pass).
  float* dots = nullptr;
  // Dropless with probs: the expert of pair i.
  const int64_t* pair_experts = nullptr;
  // Drop-and-pad with probs: the pairs i with permuteTokenId[i] == t are token_pairs[token_offsets[t] ..
  // token_offsets[t + 1]), ascending; the kernel reorders each token's list by (expert, i).
  const int64_t* token_offsets = nullptr;
  int64_t* token_pairs = nullptr;
  int64_t most_token_pairs = 0;  // the most pairs any one token has
};

// Writes every row of permutedTokensGrad and, with probs, every probsGrad entry.
void RunTokenUnpermuteWithRoutingMapGrad(const TokenUnpermuteWithRoutingMapGradTask& t);

}  // namespace moegrad::kernels
