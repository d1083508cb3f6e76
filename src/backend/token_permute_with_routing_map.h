// MoeTokenPermuteWithRoutingMap as the operator layer hands it to a backend: every rule has passed; what is left
// is index data (the routing map's row counts, checked by the backend in phase two) and execution.
// See docs/ops/token_permute_with_routing_map.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct TokenPermuteWithRoutingMapProblem {
  static constexpr const char* kName = "MoeTokenPermuteWithRoutingMap";

  size_t element_bytes = 4;         // of tokens: rows are copied bit for bit
  size_t weight_element_bytes = 4;  // of probs and permuteProbs (one dtype), copied bit for bit
  int64_t tokens = 0;        // T
  int64_t experts = 0;       // E
  int64_t hidden = 0;        // H
  int64_t out_rows = 0;      // N = numOutTokens
  int64_t topk = 0;          // K (dropless)
  int64_t capacity = 0;      // C (drop-and-pad)
  bool drop_and_pad = false;

  core::RowView src_tokens;      // (T, H)
  const uint8_t* map = nullptr;  // (T, E) INT8 / BOOL bytes; non-zero = routed
  int64_t map_row_stride = 0;
  int64_t map_col_stride = 0;
  const char* probs = nullptr;   // (T, E); null when absent
  int64_t probs_row_stride = 0;
  int64_t probs_col_stride = 0;
  core::RowView dst_tokens;      // (N, H)
  core::FlatView dst_probs;      // (N); data null when absent
  core::FlatView sorted_indices; // (N) int32
};

}  // namespace moegrad::backend
