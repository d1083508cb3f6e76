// MoeFinalizeRoutingV2: every rule of docs/ops/finalize_routing_v2.md, and the plan.
#pragma once

#include <cstdint>
#include <memory>

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

namespace moegrad::ops {

// Null pointers are absent tensors.
struct FinalizeRoutingV2Params {
  const TensorView* expanded_x = nullptr;
  const TensorView* expanded_row_idx = nullptr;
  const TensorView* x1 = nullptr;
  const TensorView* x2 = nullptr;
  const TensorView* bias = nullptr;
  const TensorView* scales = nullptr;
  const TensorView* expert_idx = nullptr;
  int64_t drop_pad_mode = 0;
  const TensorView* out = nullptr;
};

Status PlanFinalizeRoutingV2(const FinalizeRoutingV2Params& p, std::unique_ptr<internal::PlanBase>* plan);

}  // namespace moegrad::ops
