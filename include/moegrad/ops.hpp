// moegrad/ops.hpp: the C++ API of the moegrad operators. Semantics and errors: docs/ops/*.md.
//
// Each operator has an argument struct, a Plan* function (phase one: every shape/dtype/attribute rule, the
// workspace size) and a one-call form that plans, allocates the workspace and runs. Optional tensors are
// std::nullopt when absent. Nothing is written on any error.
#pragma once

#include <cstdint>
#include <optional>

#include "moegrad/export.hpp"
#include "moegrad/plan.hpp"
#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"

namespace moegrad {

// Backward of MoeFinalizeRoutingV2 (token-major pairs i = r*K + k). See docs/ops/finalize_routing_v2_grad.md.
struct FinalizeRoutingV2GradArgs {
  TensorView grad_y;                      // (R, H) float
  TensorView expanded_row_idx;            // (R*K) INT32
  std::optional<TensorView> expanded_x;   // (rows, H) or (E, C, H); required with scales
  std::optional<TensorView> scales;       // (R, K)
  std::optional<TensorView> expert_idx;   // (R, K) INT32; required with bias
  std::optional<TensorView> bias;         // (E, H)
  int64_t drop_pad_mode = 0;              // 0 dropless, 1 drop/pad
  int64_t active_num = 0;                 // mode 0: rows of expandedX when 0 < activeNum < R*K
  int64_t expert_num = 0;                 // mode 1: E
  int64_t expert_capacity = 0;            // mode 1: C
  TensorView grad_expanded_x;             // output, the shape of expandedX
  std::optional<TensorView> grad_scales;  // output (R, K); required with scales
};
MOEGRAD_API Status PlanFinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& args, Plan* plan);
MOEGRAD_API Status FinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& args);

// Backward of MoeTokenPermuteWithRoutingMap. See docs/ops/token_permute_with_routing_map_grad.md.
struct TokenPermuteWithRoutingMapGradArgs {
  TensorView permuted_token_output_grad;                 // (N, H) float
  std::optional<TensorView> permuted_probs_output_grad;  // (N) float
  TensorView sorted_indices;                             // (N) INT32
  std::optional<TensorView> routing_map;                 // (T, E) INT8 or BOOL
  int64_t num_experts = 0;                               // E > 0
  int64_t tokens_num = 0;                                // T > 0
  bool drop_and_pad = false;
  TensorView tokens_grad;                                // output (T, H)
  std::optional<TensorView> probs_grad;                  // output (T, E); required with probs grads
};
MOEGRAD_API Status PlanTokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& args, Plan* plan);
MOEGRAD_API Status TokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& args);

// Forward "combine". See docs/ops/finalize_routing_v2.md.
struct FinalizeRoutingV2Args {
  TensorView expanded_x;                // (R*K, H) modes 0, 2; (E, C, H) modes 1, 3
  TensorView expanded_row_idx;          // (R*K) INT32
  std::optional<TensorView> x1;         // (R, H)
  std::optional<TensorView> x2;         // (R, H)
  std::optional<TensorView> bias;       // (E, H); requires expert_idx
  std::optional<TensorView> scales;     // (R, K)
  std::optional<TensorView> expert_idx; // (R, K) INT32
  int64_t drop_pad_mode = 0;            // 0..3
  TensorView out;                       // output (R, H)
};
MOEGRAD_API Status PlanFinalizeRoutingV2(const FinalizeRoutingV2Args& args, Plan* plan);
MOEGRAD_API Status FinalizeRoutingV2(const FinalizeRoutingV2Args& args);

// Forward "dispatch". See docs/ops/token_permute_with_routing_map.md.
struct TokenPermuteWithRoutingMapArgs {
  TensorView tokens;                          // (T, H) float
  TensorView routing_map;                     // (T, E) INT8 or BOOL
  std::optional<TensorView> probs;            // (T, E) float
  int64_t num_out_tokens = 0;                 // in [0, T*E]
  bool drop_and_pad = false;
  TensorView permute_tokens;                  // output (N, H)
  std::optional<TensorView> permute_probs;    // output (N); required with probs
  TensorView sorted_indices;                  // output (N) INT32
};
MOEGRAD_API Status PlanTokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& args, Plan* plan);
MOEGRAD_API Status TokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& args);

}  // namespace moegrad
