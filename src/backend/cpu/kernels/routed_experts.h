// The routed experts of each token, read from a dropless routing map: the index pass that the routing-map
// combine (with probs) and its gradient (with probs) both make before their kernels.
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/kernel_types.h"

namespace moegrad::kernels {

// Token t's routed experts (routing_map row t non-zero), ascending, in experts[t*K + k] for k < K; with probs
// (probs.data not null, of weight_dtype) also probs[t][e] widened to fp32 in weights[t*K + k]. A row's entries
// past K are counted, not written. Stops at the first token whose row does not hold exactly K routed entries:
// *bad_token is that token (else -1) and *bad_count its entries.
struct RoutedExpertsTask {
  int64_t tokens = 0;   // T
  int64_t experts = 0;  // E
  int64_t topk = 0;     // K
  RowView routing_map;  // (T, E), one byte per entry
  RowView probs;        // (T, E); data null: no weights
  DType weight_dtype = DType::kFloat32;
  int64_t* out_experts = nullptr;  // T*K
  float* weights = nullptr;        // T*K; only with probs
  int64_t* bad_token = nullptr;
  int64_t* bad_count = nullptr;
};
void RunRoutedExperts(const RoutedExpertsTask& t);

}  // namespace moegrad::kernels
