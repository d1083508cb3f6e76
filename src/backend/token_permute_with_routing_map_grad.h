// MoeTokenPermuteWithRoutingMapGrad as the operator layer hands it to a backend: every rule has passed; what is
// left is index data (checked by the backend in phase two) and execution.
// See docs/ops/token_permute_with_routing_map_grad.md.
#pragma once

#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct TokenPermuteWithRoutingMapGradProblem {
  static constexpr const char* kName = "MoeTokenPermuteWithRoutingMapGrad";

  core::DType dtype = core::DType::kFloat32;         // the token group: permutedTokenOutputGrad, tokensGrad
  core::DType weight_dtype = core::DType::kFloat32;  // the weight group: permutedProbsOutputGrad, probsGrad
  bool drop_and_pad = false;
  int64_t tokens = 0;    // T
  int64_t experts = 0;   // E
  int64_t hidden = 0;    // H
  int64_t rows = 0;      // N, rows of permutedTokenOutputGrad
  int64_t topk = 0;      // K = N / T (dropless)
  int64_t capacity = 0;  // C = N / E (drop-and-pad)
  core::RowView grad;            // (N, H)
  core::FlatView probs_grad_in;  // (N); data null without probs grads
  core::FlatView sorted_indices; // (N) int32
  core::RowView routing_map;     // (T, E) one byte per entry; read in dropless mode with probs grads
  core::RowView tokens_grad;     // output (T, H)
  core::RowView probs_grad;      // output (T, E); data null without probs grads
};

}  // namespace moegrad::backend
