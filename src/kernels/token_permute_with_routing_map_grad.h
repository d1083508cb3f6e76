// Kernels of MoeTokenPermuteWithRoutingMapGrad. Inputs are validated and indices checked by the operator layer.
#pragma once

#include <cstdint>

#include "moegrad/tensor.hpp"
#include "src/core/int_math.h"
#include "src/kernels/kernel_types.h"

namespace moegrad::kernels {

struct PermuteGradProblem {
  DType dtype = DType::kFloat32;
  bool drop_and_pad = false;
  int64_t tokens = 0;    // T
  int64_t experts = 0;   // E
  int64_t hidden = 0;    // H
  int64_t rows = 0;      // N, rows of permutedTokenOutputGrad
  int64_t topk = 0;      // K = N / T (dropless)
  int64_t capacity = 0;  // C = N / E (drop-and-pad)
  RowView grad;          // (N, H)
  FlatView probs_grad_in;  // (N); data null without probs grads
  FlatView sorted_indices; // (N) int32
  RowView routing_map;   // (T, E) one byte per entry; read in dropless mode with probs grads
  RowView tokens_grad;   // output (T, H)
  RowView probs_grad;    // output (T, E); data null without probs grads

  // Drop-and-pad (built by the operator layer): the rows p with sortedIndices[p] == t are
  // slots[offsets[t] .. offsets[t + 1]), ascending.
  const int64_t* offsets = nullptr;
  const int64_t* slots = nullptr;

  // Dropless with probs grads: token rows are cut into blocks of `block_rows`; cursors[b * E + e] is where
  // block b's first routed entry of expert e reads permutedProbsOutputGrad (the operator layer turns the
  // counts of CountRoutedPerBlock into these starts). The kernel advances them.
  int64_t block_rows = 1;
  int64_t* cursors = nullptr;
};

inline int64_t NumBlocks(const PermuteGradProblem& p) { return internal::CeilDiv(p.tokens, p.block_rows); }

// counts[b * E + e] = routed entries of expert e in token block b. Reads only the routing map.
void CountRoutedPerBlock(const PermuteGradProblem& p, int64_t* counts);

// Writes every row of tokensGrad and, with probs grads, every probsGrad entry.
void TokenPermuteWithRoutingMapGrad(const PermuteGradProblem& p);

}  // namespace moegrad::kernels
