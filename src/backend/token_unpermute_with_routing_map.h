// MoeTokenUnpermuteWithRoutingMap as the operator layer hands it to a backend: every rule has passed; what is
// left is index data (checked by the backend in phase two) and execution.
// See docs/ops/token_unpermute_with_routing_map.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct TokenUnpermuteWithRoutingMapProblem {
  static constexpr const char* kName = "MoeTokenUnpermuteWithRoutingMap";

  core::DType dtype = core::DType::kFloat32;         // the token group: permutedTokens, unpermutedTokens
  core::DType weight_dtype = core::DType::kFloat32;  // the weight group: probs, permuteProbs
  bool padded_mode = false;
  int64_t tokens = 0;    // T
  int64_t experts = 0;   // E (0 when neither probs nor routingMap is given)
  int64_t hidden = 0;    // H
  int64_t rows = 0;      // N
  int64_t topk = 0;      // K = N / T (dropless)
  int64_t capacity = 0;  // C = N / E (pad, E known)
  core::RowView permuted;         // (N, H)
  core::FlatView sorted_indices;  // (N) int32
  core::RowView routing_map;      // (T, E) one byte per entry; read in dropless mode with probs
  core::RowView probs;            // (T, E); data null without probs
  core::RowView unpermuted;       // output (T, H)
  core::FlatView out_index;       // output (N) int32
  core::FlatView permute_token_id;  // output (N) int32
  core::FlatView permute_probs;   // output (N); data null without probs
};

}  // namespace moegrad::backend
