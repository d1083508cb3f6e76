// MoeTokenPermuteWithRoutingMap: every rule of docs/ops/token_permute_with_routing_map.md, and the plan.
#pragma once

#include <cstdint>
#include <memory>

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

namespace moegrad::ops {

// Null pointers are absent tensors.
struct TokenPermuteWithRoutingMapParams {
  const TensorView* tokens = nullptr;
  const TensorView* routing_map = nullptr;
  const TensorView* probs = nullptr;
  int64_t num_out_tokens = 0;
  bool drop_and_pad = false;
  const TensorView* permute_tokens = nullptr;
  const TensorView* permute_probs = nullptr;
  const TensorView* sorted_indices = nullptr;
};

Status PlanTokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapParams& p,
                                      std::unique_ptr<internal::PlanBase>* plan);

}  // namespace moegrad::ops
