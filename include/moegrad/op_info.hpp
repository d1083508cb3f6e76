// moegrad/op_info.hpp: one description per operator. OpInfo<XxxArgs> gives the operator's CANN name, its name
// on the command line, its tensors in aclnn parameter order (the names messages print, input or output,
// required or optional) and its attributes in aclnn order. The library's generic checks and its aclnn entry
// points are driven by it; so can a caller's own bindings, loggers or fuzzers be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <type_traits>
#include <vector>

#include "moegrad/ops.hpp"

namespace moegrad {

enum class ArgRole : int32_t { kInput, kOutput };

// The dtype group of a float tensor (docs/design.md, "Mixed precision"): the routing weights (scales,
// probabilities and their gradients) and the tokens (every other float tensor) each have one dtype, the two
// independent. Index tensors belong to neither.
enum class DTypeGroup : int32_t { kNone, kTokens, kWeights };

// One tensor argument of `Args`: exactly one of `required` / `optional` is set.
template <typename Args>
struct TensorArg {
  const char* name;  // as messages print it, e.g. "gradY", "gradScalesOut"
  ArgRole role;
  TensorView Args::*required;
  std::optional<TensorView> Args::*optional;
  // For an output that is written only when an optional input is given (gradScalesOut with scales): that input.
  // An output that is not written is not checked for overlaps.
  std::optional<TensorView> Args::*written_with;
  DTypeGroup group;
  // For an output that is written only with some attribute values (MoeInitRoutingV2's counts, by dropPadMode and
  // their flags): true for the arguments that write it. Null: written_with alone decides.
  bool (*written_if)(const Args&) = nullptr;

  bool is_optional() const { return optional != nullptr; }
  // The view, or null when an optional tensor is absent.
  const TensorView* Get(const Args& a) const {
    if (required != nullptr) return &(a.*required);
    return (a.*optional) ? &*(a.*optional) : nullptr;
  }
  // Stores `v` (null: absent; a required tensor then keeps its default, empty view).
  void Set(Args& a, const TensorView* v) const {
    if (required != nullptr) {
      if (v != nullptr) a.*required = *v;
    } else if (v != nullptr) {
      a.*optional = *v;
    } else {
      (a.*optional).reset();
    }
  }
  // True for an output that a call with these inputs and attributes writes (see written_with, written_if), given
  // or not.
  bool WrittenBy(const Args& a) const {
    return role == ArgRole::kOutput && (written_with == nullptr || (a.*written_with)) &&
           (written_if == nullptr || written_if(a));
  }
  // False for an output that this call does not write: absent, or not written (see WrittenBy).
  bool Written(const Args& a) const { return Get(a) != nullptr && WrittenBy(a); }
};

// One integer or boolean attribute of `Args`: exactly one of `value` / `flag` is set.
template <typename Args>
struct AttrArg {
  const char* name;  // e.g. "dropPadMode"
  int64_t Args::*value;
  bool Args::*flag;

  int64_t Get(const Args& a) const { return value != nullptr ? a.*value : (a.*flag ? 1 : 0); }
  void Set(Args& a, int64_t v) const {
    if (value != nullptr) a.*value = v;
    else a.*flag = v != 0;
  }
};

// One optional integer-array attribute of `Args` (aclIntArray in the aclnn signature, where the arrays follow
// the integer and boolean attributes): absent or a list of values.
template <typename Args>
struct IntArrayArg {
  const char* name;  // e.g. "restoreShapeOptional"
  std::optional<std::vector<int64_t>> Args::*value;

  const std::vector<int64_t>* Get(const Args& a) const { return (a.*value) ? &*(a.*value) : nullptr; }
  // Stores a copy of `v` (null: absent).
  void Set(Args& a, const std::vector<int64_t>* v) const {
    if (v != nullptr) a.*value = *v;
    else (a.*value).reset();
  }
};

namespace op_info {

constexpr DTypeGroup kTokens = DTypeGroup::kTokens;
constexpr DTypeGroup kWeights = DTypeGroup::kWeights;

template <typename A>
constexpr TensorArg<A> In(const char* name, TensorView A::*m, DTypeGroup g = DTypeGroup::kNone) {
  return {name, ArgRole::kInput, m, nullptr, nullptr, g};
}
template <typename A>
constexpr TensorArg<A> In(const char* name, std::optional<TensorView> A::*m, DTypeGroup g = DTypeGroup::kNone) {
  return {name, ArgRole::kInput, nullptr, m, nullptr, g};
}
template <typename A>
constexpr TensorArg<A> Out(const char* name, TensorView A::*m, DTypeGroup g = DTypeGroup::kNone) {
  return {name, ArgRole::kOutput, m, nullptr, nullptr, g};
}
template <typename A>
constexpr TensorArg<A> Out(const char* name, std::optional<TensorView> A::*m, DTypeGroup g,
                           std::optional<TensorView> A::*written_with = nullptr) {
  return {name, ArgRole::kOutput, nullptr, m, written_with, g};
}
// An optional output written only where `written_if` holds (a function of the attributes).
template <typename A>
constexpr TensorArg<A> Out(const char* name, std::optional<TensorView> A::*m, DTypeGroup g,
                           bool (*written_if)(const A&)) {
  return {name, ArgRole::kOutput, nullptr, m, nullptr, g, written_if};
}
template <typename A>
constexpr AttrArg<A> Attr(const char* name, int64_t A::*m) { return {name, m, nullptr}; }
template <typename A>
constexpr AttrArg<A> Attr(const char* name, bool A::*m) { return {name, nullptr, m}; }
template <typename A>
constexpr IntArrayArg<A> IntArray(const char* name, std::optional<std::vector<int64_t>> A::*m) { return {name, m}; }

}  // namespace op_info

// Specialized below for each operator's argument struct: kName, kKey, kPlan / kRun / kInfer (its C++ API
// functions), kTensors, kAttrs, and kIntArrays for an operator that takes integer arrays (IntArraysOf).
template <typename Args>
struct OpInfo;

template <>
struct OpInfo<FinalizeRoutingV2GradArgs> {
  using A = FinalizeRoutingV2GradArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanFinalizeRoutingV2Grad;  // phase one
  static constexpr Status (*kRun)(const A&) = &FinalizeRoutingV2Grad;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferFinalizeRoutingV2GradOutputs;
  static constexpr const char* kName = "MoeFinalizeRoutingV2Grad";
  static constexpr const char* kKey = "finalize-routing-v2-grad";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("gradY", &A::grad_y, op_info::kTokens),
      op_info::In("expandedRowIdx", &A::expanded_row_idx),
      op_info::In("expandedX", &A::expanded_x, op_info::kTokens),
      op_info::In("scales", &A::scales, op_info::kWeights),
      op_info::In("expertIdx", &A::expert_idx),
      op_info::In("bias", &A::bias, op_info::kTokens),
      op_info::Out("gradExpandedXOut", &A::grad_expanded_x, op_info::kTokens),
      op_info::Out("gradScalesOut", &A::grad_scales, op_info::kWeights, &A::scales)};
  static constexpr AttrArg<A> kAttrs[] = {
      op_info::Attr("dropPadMode", &A::drop_pad_mode), op_info::Attr("activeNum", &A::active_num),
      op_info::Attr("expertNum", &A::expert_num), op_info::Attr("expertCapacity", &A::expert_capacity)};
};

template <>
struct OpInfo<TokenPermuteWithRoutingMapGradArgs> {
  using A = TokenPermuteWithRoutingMapGradArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanTokenPermuteWithRoutingMapGrad;  // phase one
  static constexpr Status (*kRun)(const A&) = &TokenPermuteWithRoutingMapGrad;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferTokenPermuteWithRoutingMapGradOutputs;
  static constexpr const char* kName = "MoeTokenPermuteWithRoutingMapGrad";
  static constexpr const char* kKey = "token-permute-with-routing-map-grad";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("permutedTokenOutputGrad", &A::permuted_token_output_grad, op_info::kTokens),
      op_info::In("permutedProbsOutputGrad", &A::permuted_probs_output_grad, op_info::kWeights),
      op_info::In("sortedIndices", &A::sorted_indices),
      op_info::In("routingMap", &A::routing_map),
      op_info::Out("tokensGradOut", &A::tokens_grad, op_info::kTokens),
      op_info::Out("probsGradOut", &A::probs_grad, op_info::kWeights, &A::permuted_probs_output_grad)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("numExperts", &A::num_experts),
                                          op_info::Attr("tokensNum", &A::tokens_num),
                                          op_info::Attr("dropAndPad", &A::drop_and_pad)};
};

template <>
struct OpInfo<FinalizeRoutingV2Args> {
  using A = FinalizeRoutingV2Args;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanFinalizeRoutingV2;  // phase one
  static constexpr Status (*kRun)(const A&) = &FinalizeRoutingV2;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferFinalizeRoutingV2Outputs;
  static constexpr const char* kName = "MoeFinalizeRoutingV2";
  static constexpr const char* kKey = "finalize-routing-v2";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("expandedX", &A::expanded_x, op_info::kTokens),
      op_info::In("expandedRowIdx", &A::expanded_row_idx),
      op_info::In("x1", &A::x1, op_info::kTokens),
      op_info::In("x2", &A::x2, op_info::kTokens),
      op_info::In("bias", &A::bias, op_info::kTokens),
      op_info::In("scales", &A::scales, op_info::kWeights),
      op_info::In("expertIdx", &A::expert_idx),
      op_info::Out("out", &A::out, op_info::kTokens)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("dropPadMode", &A::drop_pad_mode)};
};

template <>
struct OpInfo<TokenPermuteWithRoutingMapArgs> {
  using A = TokenPermuteWithRoutingMapArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanTokenPermuteWithRoutingMap;  // phase one
  static constexpr Status (*kRun)(const A&) = &TokenPermuteWithRoutingMap;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferTokenPermuteWithRoutingMapOutputs;
  static constexpr const char* kName = "MoeTokenPermuteWithRoutingMap";
  static constexpr const char* kKey = "token-permute-with-routing-map";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("tokens", &A::tokens, op_info::kTokens),
      op_info::In("routingMap", &A::routing_map),
      op_info::In("probs", &A::probs, op_info::kWeights),
      op_info::Out("permuteTokensOut", &A::permute_tokens, op_info::kTokens),
      op_info::Out("permuteProbsOut", &A::permute_probs, op_info::kWeights, &A::probs),
      op_info::Out("sortedIndicesOut", &A::sorted_indices)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("numOutTokens", &A::num_out_tokens),
                                          op_info::Attr("dropAndPad", &A::drop_and_pad)};
};

template <>
struct OpInfo<InitRoutingV2Args> {
  using A = InitRoutingV2Args;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanInitRoutingV2;  // phase one
  static constexpr Status (*kRun)(const A&) = &InitRoutingV2;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) = &InferInitRoutingV2Outputs;  // query
  static constexpr const char* kName = "MoeInitRoutingV2";
  static constexpr const char* kKey = "init-routing-v2";
  // The counts: the cumsum or count in dropless mode with flag 1 or 2, the counts before capacity in drop/pad
  // mode with their flag.
  static constexpr bool WritesCountOrCumsum(const A& a) {
    return a.drop_pad_mode == 0 &&
           (a.expert_tokens_count_or_cumsum_flag == 1 || a.expert_tokens_count_or_cumsum_flag == 2);
  }
  static constexpr bool WritesBeforeCapacity(const A& a) {
    return a.drop_pad_mode == 1 && a.expert_tokens_before_capacity_flag;
  }
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("x", &A::x, op_info::kTokens),
      op_info::In("expertIdx", &A::expert_idx),
      op_info::Out("expandedXOut", &A::expanded_x, op_info::kTokens),
      op_info::Out("expandedRowIdxOut", &A::expanded_row_idx),
      op_info::Out("expertTokensCountOrCumsumOut", &A::expert_tokens_count_or_cumsum, DTypeGroup::kNone,
                   &WritesCountOrCumsum),
      op_info::Out("expertTokensBeforeCapacityOut", &A::expert_tokens_before_capacity, DTypeGroup::kNone,
                   &WritesBeforeCapacity)};
  static constexpr AttrArg<A> kAttrs[] = {
      op_info::Attr("activeNum", &A::active_num), op_info::Attr("expertCapacity", &A::expert_capacity),
      op_info::Attr("expertNum", &A::expert_num), op_info::Attr("dropPadMode", &A::drop_pad_mode),
      op_info::Attr("expertTokensCountOrCumsumFlag", &A::expert_tokens_count_or_cumsum_flag),
      op_info::Attr("expertTokensBeforeCapacityFlag", &A::expert_tokens_before_capacity_flag)};
};

template <>
struct OpInfo<InitRoutingV2GradArgs> {
  using A = InitRoutingV2GradArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanInitRoutingV2Grad;  // phase one
  static constexpr Status (*kRun)(const A&) = &InitRoutingV2Grad;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferInitRoutingV2GradOutputs;
  static constexpr const char* kName = "MoeInitRoutingV2Grad";
  static constexpr const char* kKey = "init-routing-v2-grad";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("gradExpandedX", &A::grad_expanded_x, op_info::kTokens),
      op_info::In("expandedRowIdx", &A::expanded_row_idx),
      op_info::Out("out", &A::out, op_info::kTokens)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("topK", &A::top_k),
                                          op_info::Attr("dropPadMode", &A::drop_pad_mode),
                                          op_info::Attr("activeNum", &A::active_num)};
};

template <>
struct OpInfo<TokenUnpermuteWithRoutingMapArgs> {
  using A = TokenUnpermuteWithRoutingMapArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanTokenUnpermuteWithRoutingMap;  // phase one
  static constexpr Status (*kRun)(const A&) = &TokenUnpermuteWithRoutingMap;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferTokenUnpermuteWithRoutingMapOutputs;
  static constexpr const char* kName = "MoeTokenUnpermuteWithRoutingMap";
  static constexpr const char* kKey = "token-unpermute-with-routing-map";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("permutedTokens", &A::permuted_tokens, op_info::kTokens),
      op_info::In("sortedIndices", &A::sorted_indices),
      op_info::In("routingMapOptional", &A::routing_map),
      op_info::In("probsOptional", &A::probs, op_info::kWeights),
      op_info::Out("unpermutedTokens", &A::unpermuted_tokens, op_info::kTokens),
      op_info::Out("outIndex", &A::out_index),
      op_info::Out("permuteTokenId", &A::permute_token_id),
      op_info::Out("permuteProbs", &A::permute_probs, op_info::kWeights, &A::probs)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("paddedMode", &A::padded_mode)};
  static constexpr IntArrayArg<A> kIntArrays[] = {op_info::IntArray("restoreShapeOptional", &A::restore_shape)};
};

template <>
struct OpInfo<TokenUnpermuteWithRoutingMapGradArgs> {
  using A = TokenUnpermuteWithRoutingMapGradArgs;
  static constexpr Status (*kPlan)(const A&, Plan*) = &PlanTokenUnpermuteWithRoutingMapGrad;  // phase one
  static constexpr Status (*kRun)(const A&) = &TokenUnpermuteWithRoutingMapGrad;               // plan, allocate, run
  static constexpr Status (*kInfer)(const A&, std::vector<OutputSpec>*) =  // output query
      &InferTokenUnpermuteWithRoutingMapGradOutputs;
  static constexpr const char* kName = "MoeTokenUnpermuteWithRoutingMapGrad";
  static constexpr const char* kKey = "token-unpermute-with-routing-map-grad";
  static constexpr TensorArg<A> kTensors[] = {
      op_info::In("unpermutedTokensGrad", &A::unpermuted_tokens_grad, op_info::kTokens),
      op_info::In("outIndex", &A::out_index),
      op_info::In("permuteTokenId", &A::permute_token_id),
      op_info::In("routingMapOptional", &A::routing_map),
      op_info::In("permutedTokensOptional", &A::permuted_tokens, op_info::kTokens),
      op_info::In("probsOptional", &A::probs, op_info::kWeights),
      op_info::Out("permutedTokensGradOut", &A::permuted_tokens_grad, op_info::kTokens),
      op_info::Out("probsGradOutOptional", &A::probs_grad, op_info::kWeights, &A::probs)};
  static constexpr AttrArg<A> kAttrs[] = {op_info::Attr("dropAndPad", &A::drop_and_pad)};
  static constexpr IntArrayArg<A> kIntArrays[] = {op_info::IntArray("restoreShapeOptional", &A::restore_shape)};
};

// The integer-array attributes of an operator (OpInfo<Args>::kIntArrays), none for most: `size` of them at
// `Get()`.
template <typename Args, typename = void>
struct IntArraysOf {
  static constexpr size_t size = 0;
  static constexpr const IntArrayArg<Args>* Get() { return nullptr; }
};
template <typename Args>
struct IntArraysOf<Args, std::void_t<decltype(OpInfo<Args>::kIntArrays)>> {
  static constexpr size_t size = std::size(OpInfo<Args>::kIntArrays);
  static constexpr const IntArrayArg<Args>* Get() { return OpInfo<Args>::kIntArrays; }
};

// Calls fn(OpInfo<Args>()) for every operator's Args, in the order of the README's operator table.
template <typename Fn>
void ForEachOp(const Fn& fn) {
  fn(OpInfo<FinalizeRoutingV2GradArgs>());
  fn(OpInfo<TokenPermuteWithRoutingMapGradArgs>());
  fn(OpInfo<FinalizeRoutingV2Args>());
  fn(OpInfo<TokenPermuteWithRoutingMapArgs>());
  fn(OpInfo<InitRoutingV2Args>());
  fn(OpInfo<InitRoutingV2GradArgs>());
  fn(OpInfo<TokenUnpermuteWithRoutingMapArgs>());
  fn(OpInfo<TokenUnpermuteWithRoutingMapGradArgs>());
}

}  // namespace moegrad
