// Kernels of MoeTokenPermuteWithRoutingMapGrad. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/token_permute_with_routing_map_grad.h"
#include "src/core/int_math.h"
#include "src/backend/cpu/kernels/kernel_types.h"

namespace moegrad::kernels {

// The problem plus the CPU backend's block split and the index structures it built in the workspace.
struct TokenPermuteWithRoutingMapGradTask : backend::TokenPermuteWithRoutingMapGradProblem {
  // Drop-and-pad (built by the CPU backend): the rows p with sortedIndices[p] == t are
  // slots[offsets[t] .. offsets[t + 1]), ascending.
  const int64_t* offsets = nullptr;
  const int64_t* slots = nullptr;
  int64_t most_slots = 0;  // the most rows any one token gathers

  // Dropless with probs grads: token rows are cut into blocks of `block_rows`; cursors[b * E + e] is where
  // block b's first routed entry of expert e reads permutedProbsOutputGrad (the CPU backend turns the
  // counts of CountRoutedPerBlock into these starts). The kernel advances them.
  int64_t block_rows = 1;
  int64_t* cursors = nullptr;
};

inline int64_t NumBlocks(const TokenPermuteWithRoutingMapGradTask& p) {
  return internal::CeilDiv(p.tokens, p.block_rows);
}

// counts[b * E + e] = routed entries of expert e in token block b. Reads only the routing map.
void CountRoutedPerBlock(const TokenPermuteWithRoutingMapGradTask& p, int64_t* counts);

// Writes every row of tokensGrad and, with probs grads, every probsGrad entry.
void RunTokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradTask& t);

}  // namespace moegrad::kernels
