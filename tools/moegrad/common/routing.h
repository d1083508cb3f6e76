// Routing data as a real MoE layer produces it: a random top-k choice of distinct experts per token, and
// the index tensors the forward routing operators derive from it. The benchmarks and the self-test feed
// these to the gradient operators so that they see the index patterns of training.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace moegrad::tool {

struct Routing {
  int64_t tokens = 0;
  int64_t experts = 0;
  int64_t topk = 0;
  std::vector<int32_t> expert;  // (T*K), token-major: expert[t*K + k] is token t's k-th choice (distinct)
};

// K distinct experts per token, uniformly at random, in random order (as a top-k by score returns them).
// Needs K <= E.
Routing RandomRouting(int64_t tokens, int64_t experts, int64_t topk, std::mt19937_64& rng);

// (T, E) 0/1 routing map.
std::vector<uint8_t> RoutingMap(const Routing& r);

// expandedRowIdx as MoeInitRoutingV2 produces it for token-major pairs i = t*K + k: pairs sorted by
// expert, stably. Dropless: the pair's row in that order. Drop-and-pad (capacity > 0): e*C + its position
// among expert e's pairs, or -1 past the capacity.
std::vector<int32_t> InitRoutingRowIdx(const Routing& r, int64_t capacity);

// sortedIndices as MoeTokenPermuteWithRoutingMap produces it from a (T, E) routing map.
// Dropless (capacity == 0): length T*K; slot t*K + k -> the row of token t's k-th routed expert (ascending
// expert id) in the expert-major permuted output. Drop-and-pad: length E*C; row e*C + c -> the c-th token of
// expert e, the routed tokens first in ascending id, then the others.
std::vector<int32_t> PermuteSortedIndices(const std::vector<uint8_t>& map, int64_t tokens, int64_t experts,
                                          int64_t capacity);

}  // namespace moegrad::tool
