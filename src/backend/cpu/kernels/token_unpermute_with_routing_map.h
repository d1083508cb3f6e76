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

// Dropless with probs, before the kernel: token t's routed experts (routingMap row t non-zero), ascending, and
// their probs widened to fp32, in experts[t*K + k] and weights[t*K + k]. Stops at the first token whose row
// does not hold exactly K routed entries: *bad_token is that token (else -1) and *bad_count its entries.
struct RoutedWeightsTask {
  const backend::TokenUnpermuteWithRoutingMapProblem* problem = nullptr;
  float* weights = nullptr;
  int64_t* experts = nullptr;
  int64_t* bad_token = nullptr;
  int64_t* bad_count = nullptr;
};
void RunRoutedWeights(const RoutedWeightsTask& t);

// Writes every row of unpermutedTokens, every element of outIndex and permuteTokenId and, with probs, of
// permuteProbs.
void RunTokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapTask& t);

}  // namespace moegrad::kernels
