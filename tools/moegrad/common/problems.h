// The problem builders of the operators: each config names one call (shape, dtypes, mode, optional
// inputs, index data, layouts) of the operator whose arguments are Config::Args; MakeProblem builds random
// inputs, the C++ API call and the reference call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "tools/moegrad/common/problem.h"

namespace moegrad::tool {

// What every operator's config has. Each element counts in MinBytes at its own dtype's size.
struct ProblemConfig {
  Shape shape;
  DType dtype = DType::kFloat32;        // the token group's: every float tensor but the routing weights
  std::optional<DType> weight_dtype;    // the weight group's: scales, probs and their gradients (unset: dtype)
  IndexData index = IndexData::kRouted;
  LayoutPolicy layout = LayoutPolicy::kContiguous;
  SpecialValues specials = SpecialValues::kNone;  // mixed into every float input
  InputValues values = InputValues::kNormal;      // the magnitudes of every float input's ordinary values
  uint64_t seed = 1;
  DType weights() const { return weight_dtype.value_or(dtype); }
};

// MoeFinalizeRoutingV2Grad: R = shape.tokens; C = shape.capacity in mode 1. Weights: scales, gradScales.
// Minimum bytes: read gradY (R*H), expandedRowIdx (R*K int32), with scales the expandedX rows some pair reads
// (kept*H), scales (R*K), with bias expertIdx (R*K int32) and bias (E*H); write gradExpandedX (all rows*H)
// and, with scales, gradScales (R*K).
struct FinalizeRoutingV2GradConfig : ProblemConfig {
  using Args = FinalizeRoutingV2GradArgs;
  int64_t mode = 0;              // dropPadMode 0 (dropless) or 1 (drop/pad)
  int64_t active_num = 0;        // mode 0: rows of expandedX when 0 < activeNum < R*K
  bool scales = true;
  bool bias = false;
  bool expanded_x_without_scales = false;   // given but not read
  int64_t bias_experts = 0;  // > 0: expertIdx uniform in [0, bias_experts), apart from the routing (RedrawExperts)
  bool grad_scales_without_scales = false;  // given but must stay untouched
  bool drop_pad() const { return mode == 1; }
};
std::unique_ptr<Problem> MakeProblem(const FinalizeRoutingV2GradConfig& c);

// MoeTokenPermuteWithRoutingMapGrad: tokens T, hidden H, experts E, topk K (dropless), capacity C
// (drop-and-pad); N = T*K (dropless) or E*C (drop-and-pad). Weights: permutedProbsOutputGrad, probsGrad.
// Minimum bytes: read the permutedTokenOutputGrad rows some index names (distinct*H), sortedIndices (N int32),
// with probs permutedProbsOutputGrad (N) and, dropless, routingMap (T*E bytes); write tokensGrad (T*H) and,
// with probs, probsGrad (T*E).
struct TokenPermuteWithRoutingMapGradConfig : ProblemConfig {
  using Args = TokenPermuteWithRoutingMapGradArgs;
  bool drop_and_pad = false;
  bool probs = true;
  bool routing_map = false;      // also pass the map where it is optional (shape-checked, unused)
  bool probs_grad_without_probs = false;  // given but must stay untouched
  DType map_dtype = DType::kInt8;  // INT8 or BOOL
  bool drop_pad() const { return drop_and_pad; }
};
std::unique_ptr<Problem> MakeProblem(const TokenPermuteWithRoutingMapGradConfig& c);

// MoeFinalizeRoutingV2 (forward combine): R = shape.tokens; C = shape.capacity in modes 1 and 3. Weights:
// scales. Minimum bytes: read the expandedX rows some pair names (distinct*H), expandedRowIdx (R*K int32), x1
// and x2 (R*H each, when given), scales (R*K), with bias expertIdx (R*K int32) and bias (E*H); write out (R*H).
struct FinalizeRoutingV2Config : ProblemConfig {
  using Args = FinalizeRoutingV2Args;
  int64_t mode = 2;              // dropPadMode 0..3: 0/2 dropless, 1/3 drop-pad; 0/1 expert-major pairs
  bool x1 = false, x2 = false;
  bool scales = true;
  bool bias = false;
  bool expert_idx_without_bias = false;  // given, shape-checked, unused
  int64_t bias_experts = 0;  // > 0: expertIdx uniform in [0, bias_experts), apart from the routing (RedrawExperts)
  bool drop_pad() const { return mode == 1 || mode == 3; }
};
std::unique_ptr<Problem> MakeProblem(const FinalizeRoutingV2Config& c);

// MoeTokenPermuteWithRoutingMap (forward dispatch): tokens T, hidden H, experts E, topk K (dropless),
// capacity C <= T (drop-and-pad); N = T*K (dropless) or E*C (drop-and-pad). Random index data: INT8 map
// entries any non-zero value, drop-and-pad maps any count per row. Weights: probs, permuteProbs. Minimum
// bytes: read the token rows some output row copies (distinct*H), routingMap (T*E bytes), with probs the N
// selected probabilities; write permuteTokens (N*H), sortedIndices (N int32) and, with probs, permuteProbs (N).
struct TokenPermuteWithRoutingMapConfig : ProblemConfig {
  using Args = TokenPermuteWithRoutingMapArgs;
  bool drop_and_pad = false;
  bool probs = true;
  bool permute_probs_without_probs = false;  // given but must stay untouched
  DType map_dtype = DType::kInt8;  // INT8 or BOOL
  bool drop_pad() const { return drop_and_pad; }
};
std::unique_ptr<Problem> MakeProblem(const TokenPermuteWithRoutingMapConfig& c);

// MoeInitRoutingV2 (the V2 dispatch): N = shape.tokens, K = shape.topk pairs per token, E = shape.experts;
// C = shape.capacity in mode 1. Routed index data: K distinct experts per token (a top-k routing); random: ids
// with repeats and empty experts, in mode 0 with flag 0 also ids past E. No weights. Minimum bytes: read the x
// rows some output row copies (distinct*H) and expertIdx (N*K int32); write expandedX (A*H, or E*C*H),
// expandedRowIdx (N*K int32) and the written count output (E int32).
struct InitRoutingV2Config : ProblemConfig {
  using Args = InitRoutingV2Args;
  int64_t mode = 0;               // dropPadMode 0 (dropless) or 1 (drop/pad)
  int64_t active_num = 0;         // mode 0: rows of expandedX when 0 < activeNum < N*K
  int64_t flag = 0;               // expertTokensCountOrCumsumFlag: 0 none, 1 cumsum, 2 count (mode 0)
  bool before_capacity = false;   // expertTokensBeforeCapacityFlag (mode 1)
  bool unused_counts = false;     // also pass the count outputs the call does not write; they must stay untouched
  bool drop_pad() const { return mode == 1; }
};
std::unique_ptr<Problem> MakeProblem(const InitRoutingV2Config& c);
// MoeInitRoutingV2Grad: N = shape.tokens, K = shape.topk, E = shape.experts; C = shape.capacity in mode 1.
// gradExpandedX is (A, H), A = min(activeNum, N*K) when activeNum > 0, else N*K, in mode 0 and (E, C, H) in mode 1.
// No routing weights (weight_dtype is ignored). Minimum bytes: read the gradExpandedX rows some pair reads
// (distinct*H), expandedRowIdx (N*K int32); write out (N*H).
struct InitRoutingV2GradConfig : ProblemConfig {
  using Args = InitRoutingV2GradArgs;
  int64_t mode = 0;        // dropPadMode 0 (dropless) or 1 (drop/pad)
  int64_t active_num = 0;  // mode 0: rows of gradExpandedX when 0 < activeNum < N*K
  bool drop_pad() const { return mode == 1; }
};
std::unique_ptr<Problem> MakeProblem(const InitRoutingV2GradConfig& c);

// MoeTokenUnpermuteWithRoutingMap (the routing-map combine): tokens T, hidden H, experts E, topk K (dropless),
// capacity C (pad); N = T*K (dropless) or E*C (pad). Routed index data: the permute's sortedIndices of a
// top-k routing; random: any valid values (repeats, unreferenced rows and tokens), dropless maps still K per
// row. Weights: probs, permuteProbs. Minimum bytes: read the permutedTokens rows some contribution names
// (distinct*H), sortedIndices (N int32), with probs the N weights and, dropless, routingMap (T*E bytes); write
// unpermutedTokens (T*H), outIndex and permuteTokenId (N int32 each) and, with probs, permuteProbs (N).
struct TokenUnpermuteWithRoutingMapConfig : ProblemConfig {
  using Args = TokenUnpermuteWithRoutingMapArgs;
  bool padded_mode = false;
  bool probs = true;
  bool restore_shape = false;  // also pass restoreShape with probs (always passed without)
  bool routing_map = false;    // also pass the map where it is optional (shape-checked, unused)
  bool permute_probs_without_probs = false;  // given but must stay untouched
  DType map_dtype = DType::kInt8;  // INT8 or BOOL
  bool drop_pad() const { return padded_mode; }
};
std::unique_ptr<Problem> MakeProblem(const TokenUnpermuteWithRoutingMapConfig& c);

// MoeTokenUnpermuteWithRoutingMapGrad: tokens T, hidden H, experts E, topk K (dropless), capacity C
// (drop-and-pad); N = T*K (dropless) or E*C (drop-and-pad). Routed index data: outIndex and permuteTokenId as
// MoeTokenUnpermuteWithRoutingMap writes them from the permute's sortedIndices of a random top-k map; random:
// any valid values (duplicate rows, rows no pair reaches, tokens twice under one expert). Weights: probs,
// probsGrad. Minimum bytes: read the unpermutedTokensGrad rows some pair names (distinct*H), outIndex (N int32),
// in drop-and-pad mode permuteTokenId (N int32), with probs the permutedTokens rows some pair names
// (distinct*H), probs (T*E) and, dropless, routingMap (T*E bytes); write permutedTokensGrad (N*H) and, with
// probs, probsGrad (T*E).
struct TokenUnpermuteWithRoutingMapGradConfig : ProblemConfig {
  using Args = TokenUnpermuteWithRoutingMapGradArgs;
  bool drop_and_pad = false;
  bool probs = true;
  bool extras = false;                    // without probs: also pass routingMap and permutedTokens (unused)
  bool probs_grad_without_probs = false;  // given but must stay untouched
  bool mindspeed = false;                 // dropless: permuteTokenId = outIndex (sortedIndices as both)
  bool restore_shape = false;             // pass restoreShape (T, H)
  DType map_dtype = DType::kInt8;         // INT8 or BOOL
  bool drop_pad() const { return drop_and_pad; }
};
std::unique_ptr<Problem> MakeProblem(const TokenUnpermuteWithRoutingMapGradConfig& c);

}  // namespace moegrad::tool
