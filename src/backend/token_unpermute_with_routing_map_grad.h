// MoeTokenUnpermuteWithRoutingMapGrad as the operator layer hands it to a backend: every rule has passed; what
// is left is index data (checked by the backend in phase two) and execution.
// See docs/ops/token_unpermute_with_routing_map_grad.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct TokenUnpermuteWithRoutingMapGradProblem {
  static constexpr const char* kName = "MoeTokenUnpermuteWithRoutingMapGrad";

  core::DType dtype = core::DType::kFloat32;         // the token group: unpermutedTokensGrad, permutedTokens, ...
  core::DType weight_dtype = core::DType::kFloat32;  // the weight group: probs, probsGrad
  bool drop_and_pad = false;
  int64_t tokens = 0;    // T
  int64_t experts = 0;   // E (known with probs or a routing map), else 0
  int64_t hidden = 0;    // H
  int64_t rows = 0;      // N, pairs and rows of permutedTokensGrad
  int64_t topk = 0;      // K = N / T (dropless)
  int64_t capacity = 0;  // C = N / E (drop-and-pad, E known)
  core::RowView grad;              // unpermutedTokensGrad (T, H)
  core::FlatView out_index;        // (N) int32: the row of pair i
  core::FlatView permute_token_id; // (N) int32: the token of pair i (drop-and-pad)
  core::RowView routing_map;       // (T, E) one byte per entry; read in dropless mode with probs
  core::RowView permuted_tokens;   // (N, H); data null without probs
  core::FlatView probs;            // (T, E) read flat, t * E + e; data null without probs
  core::RowView permuted_tokens_grad;  // output (N, H)
  core::RowView probs_grad;            // output (T, E); data null without probs
};

}  // namespace moegrad::backend
