// MoeFinalizeRoutingV2Grad: every rule of docs/ops/finalize_routing_v2_grad.md, and the plan.
#pragma once

#include <cstdint>
#include <memory>

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

namespace moegrad::ops {

// Null pointers are absent tensors.
struct FinalizeRoutingV2GradParams {
  const TensorView* grad_y = nullptr;
  const TensorView* expanded_row_idx = nullptr;
  const TensorView* expanded_x = nullptr;
  const TensorView* scales = nullptr;
  const TensorView* expert_idx = nullptr;
  const TensorView* bias = nullptr;
  int64_t drop_pad_mode = 0;
  int64_t active_num = 0;
  int64_t expert_num = 0;
  int64_t expert_capacity = 0;
  const TensorView* grad_expanded_x = nullptr;
  const TensorView* grad_scales = nullptr;
};

Status PlanFinalizeRoutingV2Grad(const FinalizeRoutingV2GradParams& p, std::unique_ptr<internal::PlanBase>* plan);

}  // namespace moegrad::ops
