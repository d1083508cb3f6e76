// Kernels of MoeTokenUnpermuteWithRoutingMap. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/kernel_types.h"
#include "src/backend/token_unpermute_with_routing_map.h"

namespace moegrad::kernels {

// The problem plus the index structures the CPU backend built in the workspace.
struct TokenUnpermuteWithRoutingMapTask : backend::TokenUnpermuteWithRoutingMapProblem {
  // Pad mode (built by the CPU backend): the contributions q with sortedIndices[q] == t are
  // slots[offsets[t] .. offsets[t + 1]), ascending.
  const int64_t* offsets = nullptr;
  const int64_t* slots = nullptr;
  int64_t most_slots = 0;  // the most contributions any one token sums
  // With probs: w(q) widened to fp32, and the expert of contribution q (both modes), one per contribution.
  const float* weights = nullptr;
  const int64_t* experts = nullptr;
};

// Writes every row of unpermutedTokens, every element of outIndex and permuteTokenId and, with probs, of
// permuteProbs.
void RunTokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapTask& t);

}  // namespace moegrad::kernels
