// The problem builders of the four operators: each config names one call (shape, dtype, mode, optional
// inputs, index data, layouts); the factory builds random inputs, the C++ API call and the reference call.
#pragma once

#include <cstdint>
#include <memory>

#include "tools/moegrad/common/problem.h"

namespace moegrad::tool {

// MoeFinalizeRoutingV2Grad. Minimum bytes: read gradY (R*H), expandedRowIdx (R*K int32), with scales the
// expandedX rows some pair reads (kept*H), scales (R*K), with bias expertIdx (R*K int32) and bias (E*H);
// write gradExpandedX (all rows*H) and, with scales, gradScales (R*K).
struct FinalizeGradConfig {
  Shape shape;                   // R = tokens; C = capacity in mode 1
  DType dtype = DType::kFloat32;
  int64_t mode = 0;              // dropPadMode 0 (dropless) or 1 (drop/pad)
  int64_t active_num = 0;        // mode 0: rows of expandedX when 0 < activeNum < R*K
  bool scales = true;
  bool bias = false;
  bool expanded_x_without_scales = false;   // given but not read
  bool grad_scales_without_scales = false;  // given but must stay untouched
  IndexData index = IndexData::kRouted;
  LayoutPolicy layout = LayoutPolicy::kContiguous;
  uint64_t seed = 1;
};
std::unique_ptr<Problem> MakeFinalizeGradProblem(const FinalizeGradConfig& c);

// MoeTokenPermuteWithRoutingMapGrad. N = T*K (dropless) or E*C (drop-and-pad). Minimum bytes: read the
// permutedTokenOutputGrad rows some index names (distinct*H), sortedIndices (N int32), with probs
// permutedProbsOutputGrad (N) and, dropless, routingMap (T*E bytes); write tokensGrad (T*H) and, with
// probs, probsGrad (T*E).
struct PermuteGradConfig {
  Shape shape;                   // tokens T, hidden H, experts E, topk K (dropless), capacity C (drop-and-pad)
  DType dtype = DType::kFloat32;
  bool drop_and_pad = false;
  bool probs = true;
  bool routing_map = false;      // also pass the map where it is optional (shape-checked, unused)
  bool probs_grad_without_probs = false;  // given but must stay untouched
  DType map_dtype = DType::kInt8;  // INT8 or BOOL
  IndexData index = IndexData::kRouted;
  LayoutPolicy layout = LayoutPolicy::kContiguous;
  uint64_t seed = 1;
};
std::unique_ptr<Problem> MakePermuteGradProblem(const PermuteGradConfig& c);

// MoeFinalizeRoutingV2 (forward combine). Minimum bytes: read the expandedX rows some pair names
// (distinct*H), expandedRowIdx (R*K int32), x1 and x2 (R*H each, when given), scales (R*K), with bias
// expertIdx (R*K int32) and bias (E*H); write out (R*H).
struct FinalizeConfig {
  Shape shape;                   // R = tokens; C = capacity in modes 1 and 3
  DType dtype = DType::kFloat32;
  int64_t mode = 2;              // dropPadMode 0..3: 0/2 dropless, 1/3 drop-pad; 0/1 expert-major pairs
  bool x1 = false, x2 = false;
  bool scales = true;
  bool bias = false;
  bool expert_idx_without_bias = false;  // given, shape-checked, unused
  IndexData index = IndexData::kRouted;
  LayoutPolicy layout = LayoutPolicy::kContiguous;
  uint64_t seed = 1;
};
std::unique_ptr<Problem> MakeFinalizeProblem(const FinalizeConfig& c);

// MoeTokenPermuteWithRoutingMap (forward dispatch). N = T*K (dropless) or E*C (drop-and-pad). Minimum
// bytes: read the token rows some output row copies (distinct*H), routingMap (T*E bytes), with probs the N
// selected probabilities; write permuteTokens (N*H), sortedIndices (N int32) and, with probs, permuteProbs (N).
struct PermuteConfig {
  Shape shape;                   // tokens T, hidden H, experts E, topk K (dropless), capacity C <= T (drop-and-pad)
  DType dtype = DType::kFloat32;
  bool drop_and_pad = false;
  bool probs = true;
  bool permute_probs_without_probs = false;  // given but must stay untouched
  DType map_dtype = DType::kInt8;  // INT8 or BOOL
  IndexData index = IndexData::kRouted;  // kRandom: INT8 entries any non-zero value; drop-and-pad any count
  LayoutPolicy layout = LayoutPolicy::kContiguous;
  uint64_t seed = 1;
};
std::unique_ptr<Problem> MakePermuteProblem(const PermuteConfig& c);

}  // namespace moegrad::tool
