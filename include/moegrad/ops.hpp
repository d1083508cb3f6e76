// moegrad/ops.hpp: the C++ API of the moegrad operators. Semantics and errors: docs/ops/*.md.
//
// Each operator has an argument struct, a Plan* function (phase one: every shape/dtype/attribute rule, the
// workspace size), a one-call form that plans, allocates the workspace and runs, and an output query
// (Infer*Outputs: the outputs a call would write, before they exist). Optional tensors are std::nullopt when
// absent. Nothing is written on any error.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "moegrad/export.hpp"
#include "moegrad/plan.hpp"
#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"

namespace moegrad {

// One output of a call as the output query reports it: the tensor a caller allocates for it.
struct OutputSpec {
  const char* name = "";  // as OpInfo<Args>::kTensors and messages name it, e.g. "gradScalesOut"
  bool written = false;   // false: this call leaves the output alone (e.g. gradScalesOut without scales);
                          // the fields below are then unset
  DType dtype = DType::kFloat32;
  int rank = 0;
  int64_t sizes[TensorView::kMaxRank] = {};
};

// Infer<Op>Outputs(args, &outputs), the output query of each operator: phase one without the outputs. It is
// Plan<Op>'s own code: every rule on the inputs and attributes is checked as there (the same status and message,
// in the same order), and when they hold `outputs` receives every output of OpInfo<Args>::kTensors in that
// order: whether the call writes it and, if so, the shape and dtype it needs (any strides will do). The output
// fields of `args` are ignored, given or not, and never touched. Not checked (nothing to check yet): the
// outputs' overlaps and the backend (devices, workspace size), which Plan<Op> with the outputs then checks. The
// reported shapes' element and byte counts fit in int64 (else INVALID, as for a view of that shape).
// MoeFinalizeRoutingV2 reads R and H from out; its query finds them from the inputs (see there).

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
MOEGRAD_API Status InferFinalizeRoutingV2GradOutputs(const FinalizeRoutingV2GradArgs& args,
                                                     std::vector<OutputSpec>* outputs);

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
MOEGRAD_API Status InferTokenPermuteWithRoutingMapGradOutputs(const TokenPermuteWithRoutingMapGradArgs& args,
                                                              std::vector<OutputSpec>* outputs);

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
// out (R, H) without out: H from expandedX (which must then be 2-D, or 3-D in modes 1, 3), R the rows of the
// first of scales, x1, x2, expertIdx given, or without any of them expandedRowIdx's elements (K = 1).
MOEGRAD_API Status InferFinalizeRoutingV2Outputs(const FinalizeRoutingV2Args& args,
                                                 std::vector<OutputSpec>* outputs);

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
MOEGRAD_API Status InferTokenPermuteWithRoutingMapOutputs(const TokenPermuteWithRoutingMapArgs& args,
                                                          std::vector<OutputSpec>* outputs);

// The V2 "dispatch" (token-major pairs p = n*K + k). See docs/ops/init_routing_v2.md.
struct InitRoutingV2Args {
  TensorView x;                                             // (N, H) float
  TensorView expert_idx;                                    // (N, K) INT32
  int64_t active_num = 0;                                   // mode 0: rows of expandedX when 0 < activeNum < N*K
  int64_t expert_capacity = 0;                              // mode 1: C > 0
  int64_t expert_num = 0;                                   // E: mode 1 and the counts
  int64_t drop_pad_mode = 0;                                // 0 dropless, 1 drop/pad
  int64_t expert_tokens_count_or_cumsum_flag = 0;           // mode 0: 0 none, 1 cumsum, 2 count
  bool expert_tokens_before_capacity_flag = false;          // mode 1: write the counts before capacity
  TensorView expanded_x;                                    // output (A, H) in mode 0, (E, C, H) in mode 1
  TensorView expanded_row_idx;                              // output (N*K) INT32
  std::optional<TensorView> expert_tokens_count_or_cumsum;  // output (E) INT32: mode 0, flag 1 or 2
  std::optional<TensorView> expert_tokens_before_capacity;  // output (E) INT32: mode 1 with its flag
};
MOEGRAD_API Status PlanInitRoutingV2(const InitRoutingV2Args& args, Plan* plan);
MOEGRAD_API Status InitRoutingV2(const InitRoutingV2Args& args);
MOEGRAD_API Status InferInitRoutingV2Outputs(const InitRoutingV2Args& args, std::vector<OutputSpec>* outputs);

// Backward of MoeInitRoutingV2 (token-major pairs i = n*K + k). See docs/ops/init_routing_v2_grad.md.
struct InitRoutingV2GradArgs {
  TensorView grad_expanded_x;   // (rows, H) in mode 0; (E, C, H) in mode 1; float
  TensorView expanded_row_idx;  // (L) INT32, L = N*topK
  int64_t top_k = 0;            // K > 0
  int64_t drop_pad_mode = 0;    // 0 dropless, 1 drop/pad
  int64_t active_num = 0;       // mode 0: rows of gradExpandedX when 0 < activeNum < L
  TensorView out;               // output (N, H)
};
MOEGRAD_API Status PlanInitRoutingV2Grad(const InitRoutingV2GradArgs& args, Plan* plan);
MOEGRAD_API Status InitRoutingV2Grad(const InitRoutingV2GradArgs& args);
MOEGRAD_API Status InferInitRoutingV2GradOutputs(const InitRoutingV2GradArgs& args, std::vector<OutputSpec>* outputs);

// The routing-map "combine" (the inverse of MoeTokenPermuteWithRoutingMap's dispatch). See
// docs/ops/token_unpermute_with_routing_map.md.
struct TokenUnpermuteWithRoutingMapArgs {
  TensorView permuted_tokens;                         // (N, H) float
  TensorView sorted_indices;                          // (N) INT32
  std::optional<TensorView> routing_map;              // (T, E) INT8 or BOOL; required with probs (dropless)
  std::optional<TensorView> probs;                    // (T, E) float, the weight group
  bool padded_mode = false;
  std::optional<std::vector<int64_t>> restore_shape;  // (T, H); required without probs
  TensorView unpermuted_tokens;                       // output (T, H)
  TensorView out_index;                               // output (N) INT32
  TensorView permute_token_id;                        // output (N) INT32
  std::optional<TensorView> permute_probs;            // output (N); required with probs
};
MOEGRAD_API Status PlanTokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapArgs& args, Plan* plan);
MOEGRAD_API Status TokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapArgs& args);
// unpermutedTokens (T, H) without it: restoreShape when given, else T the rows of probs and H the columns of
// permutedTokens.
MOEGRAD_API Status InferTokenUnpermuteWithRoutingMapOutputs(const TokenUnpermuteWithRoutingMapArgs& args,
                                                            std::vector<OutputSpec>* outputs);

// Backward of MoeTokenUnpermuteWithRoutingMap (pairs i = 0..N-1 of outIndex). See
// docs/ops/token_unpermute_with_routing_map_grad.md.
struct TokenUnpermuteWithRoutingMapGradArgs {
  TensorView unpermuted_tokens_grad;                  // (T, H) float
  TensorView out_index;                               // (N) INT32
  TensorView permute_token_id;                        // (N) INT32; read in drop-and-pad mode only
  std::optional<TensorView> routing_map;              // (T, E) INT8 or BOOL; required with probs
  std::optional<TensorView> permuted_tokens;          // (N, H) float; required with probs
  std::optional<TensorView> probs;                    // (T, E) float
  bool drop_and_pad = false;
  std::optional<std::vector<int64_t>> restore_shape;  // (T, H) when given
  TensorView permuted_tokens_grad;                    // output (N, H)
  std::optional<TensorView> probs_grad;               // output (T, E); required with probs
};
MOEGRAD_API Status PlanTokenUnpermuteWithRoutingMapGrad(const TokenUnpermuteWithRoutingMapGradArgs& args,
                                                        Plan* plan);
MOEGRAD_API Status TokenUnpermuteWithRoutingMapGrad(const TokenUnpermuteWithRoutingMapGradArgs& args);
MOEGRAD_API Status InferTokenUnpermuteWithRoutingMapGradOutputs(const TokenUnpermuteWithRoutingMapGradArgs& args,
                                                                std::vector<OutputSpec>* outputs);

}  // namespace moegrad
