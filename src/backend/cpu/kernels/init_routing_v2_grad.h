// Kernels of MoeInitRoutingV2Grad. Inputs are validated and indices checked by the CPU backend.
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/kernel_types.h"
#include "src/backend/init_routing_v2_grad.h"

namespace moegrad::kernels {

// The problem plus the terms the CPU backend listed in the workspace: token n sums the rows
// terms[offsets[n] .. offsets[n + 1]) of gradExpandedX, in that order (ascending k).
struct InitRoutingV2GradTask : backend::InitRoutingV2GradProblem {
  const int64_t* offsets = nullptr;
  const int64_t* terms = nullptr;
};

// Writes every row of out.
void RunInitRoutingV2Grad(const InitRoutingV2GradTask& t);

}  // namespace moegrad::kernels
