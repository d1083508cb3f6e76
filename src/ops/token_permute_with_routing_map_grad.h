// MoeTokenPermuteWithRoutingMapGrad: every rule of docs/ops/token_permute_with_routing_map_grad.md, and the plan.
#pragma once

#include <cstdint>
#include <memory>

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

namespace moegrad::ops {

// Null pointers are absent tensors.
struct TokenPermuteWithRoutingMapGradParams {
  const TensorView* permuted_token_output_grad = nullptr;
  const TensorView* permuted_probs_output_grad = nullptr;
  const TensorView* sorted_indices = nullptr;
  const TensorView* routing_map = nullptr;
  int64_t num_experts = 0;
  int64_t tokens_num = 0;
  bool drop_and_pad = false;
  const TensorView* tokens_grad = nullptr;
  const TensorView* probs_grad = nullptr;
};

Status PlanTokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradParams& p,
                                          std::unique_ptr<internal::PlanBase>* plan);

}  // namespace moegrad::ops
