// Kernels of MoeFinalizeRoutingV2. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/finalize_routing_v2.h"
#include "src/backend/cpu/kernels/kernel_types.h"

namespace moegrad::kernels {

using FinalizeRoutingV2Task = backend::FinalizeRoutingV2Problem;

// Writes every element of out:
//   out[r] = rne( x1[r] + x2[r] + t_0 + ... + t_{K-1} ),  t_k = s_rk * (x_rk + b_rk)
// an fp32 left fold over the present terms in that order (see docs/ops/finalize_routing_v2.md).
void RunFinalizeRoutingV2(const FinalizeRoutingV2Task& t);

}  // namespace moegrad::kernels
