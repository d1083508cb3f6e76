// Kernels of MoeFinalizeRoutingV2. Inputs are validated and indices checked by the operator layer.
#pragma once

#include <cstdint>

#include "moegrad/tensor.hpp"
#include "src/kernels/kernel_types.h"

namespace moegrad::kernels {

struct FinalizeProblem {
  DType dtype = DType::kFloat32;
  int64_t tokens = 0;         // R
  int64_t topk = 0;           // K
  int64_t hidden = 0;         // H
  int64_t rows = 0;           // rows of expandedX (R*K, or E*C in drop/pad modes)
  bool expert_major = false;  // pair (r, k) at p = k*R + r (modes 0, 1), else p = r*K + k
  RowView expanded_x;         // rows of expandedX
  FlatView row_idx;           // (R*K) int32; -1 marks a dropped pair
  RowView x1;                 // (R, H); data null when absent
  RowView x2;                 // (R, H); data null when absent
  FlatView scales;            // (R, K); data null when absent (s = 1)
  FlatView expert_idx;        // (R, K) int32; data null without bias
  RowView bias;               // (E, H); data null when absent
  RowView out;                // (R, H)
};

// Writes every element of out:
//   out[r] = rne( x1[r] + x2[r] + t_0 + ... + t_{K-1} ),  t_k = s_rk * (x_rk + b_rk)
// an fp32 left fold over the present terms in that order (see docs/ops/finalize_routing_v2.md).
void FinalizeRoutingV2(const FinalizeProblem& p);

}  // namespace moegrad::kernels
