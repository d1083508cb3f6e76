// Each operator's entry points beyond its OpInfo (which has the C++ API's kPlan and kRun), found from its argument
// struct (OpEntry<Args>: the two aclnn phases, the scalar reference), and calls through them driven by OpInfo<Args>: tensors in the
// order of OpInfo<Args>::kTensors, attributes in the order of kAttrs. That is the order of the aclnn signature,
// which puts the attributes between the inputs and the outputs. Header-only and without GoogleTest: the fuzz
// targets use it too. A new operator adds its line of MOEGRAD_TEST_OP_ENTRY here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"
#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"

namespace moegrad::testing {

template <typename Args>
struct OpEntry;

// The entry points of operator Op follow from its name: aclnnMoeOpGetWorkspaceSize, aclnnMoeOp, ref::Op.
#define MOEGRAD_TEST_OP_ENTRY(Op)                                           \
  template <>                                                               \
  struct OpEntry<Op##Args> {                                                \
    static constexpr auto kAclnnPhaseOne = &aclnnMoe##Op##GetWorkspaceSize; \
    static constexpr auto kAclnnPhaseTwo = &aclnnMoe##Op;                   \
    static constexpr auto kReference = &ref::Op;                            \
  }
MOEGRAD_TEST_OP_ENTRY(FinalizeRoutingV2Grad);
MOEGRAD_TEST_OP_ENTRY(TokenPermuteWithRoutingMapGrad);
MOEGRAD_TEST_OP_ENTRY(FinalizeRoutingV2);
MOEGRAD_TEST_OP_ENTRY(TokenPermuteWithRoutingMap);
MOEGRAD_TEST_OP_ENTRY(InitRoutingV2);
MOEGRAD_TEST_OP_ENTRY(InitRoutingV2Grad);
MOEGRAD_TEST_OP_ENTRY(TokenUnpermuteWithRoutingMap);
MOEGRAD_TEST_OP_ENTRY(TokenUnpermuteWithRoutingMapGrad);
#undef MOEGRAD_TEST_OP_ENTRY

// The argument struct of an OpInfo (what ForEachOp hands out).
template <typename Info>
struct ArgsOf;
template <typename A>
struct ArgsOf<OpInfo<A>> {
  using type = A;
};

template <typename Args>
constexpr size_t kNumTensors = std::size(OpInfo<Args>::kTensors);
template <typename Args>
constexpr size_t kNumAttrs = std::size(OpInfo<Args>::kAttrs);
// Integer-array attributes (aclIntArray), after the attributes in the aclnn signature; none for most operators.
template <typename Args>
constexpr size_t kNumIntArrays = IntArraysOf<Args>::size;
// One call's integer arrays in kIntArrays order (nullopt: absent).
template <typename Args>
using IntArrays = std::array<std::optional<std::vector<int64_t>>, kNumIntArrays<Args>>;

// How many of kTensors are inputs: they come first, the outputs after them.
template <typename Args>
constexpr size_t NumInputs() {
  size_t n = 0;
  while (n < kNumTensors<Args> && OpInfo<Args>::kTensors[n].role == ArgRole::kInput) ++n;
  return n;
}
template <typename Args>
constexpr bool InputsThenOutputs() {
  for (size_t i = NumInputs<Args>(); i < kNumTensors<Args>; ++i) {
    if (OpInfo<Args>::kTensors[i].role != ArgRole::kOutput) return false;
  }
  return true;
}

// The index in kTensors of the tensor `name` (as messages print it), or kNumTensors<Args> when there is none.
template <typename Args>
size_t TensorIndex(const char* name) {
  for (size_t i = 0; i < kNumTensors<Args>; ++i) {
    if (std::strcmp(OpInfo<Args>::kTensors[i].name, name) == 0) return i;
  }
  return kNumTensors<Args>;
}
// The index in kAttrs of the attribute `name`, or kNumAttrs<Args> when there is none.
template <typename Args>
size_t AttrIndex(const char* name) {
  for (size_t i = 0; i < kNumAttrs<Args>; ++i) {
    if (std::strcmp(OpInfo<Args>::kAttrs[i].name, name) == 0) return i;
  }
  return kNumAttrs<Args>;
}

// The views of `a` (null for an absent optional tensor) and its attributes, in OpInfo order.
template <typename Args>
std::array<const TensorView*, kNumTensors<Args>> ViewsOf(const Args& a) {
  std::array<const TensorView*, kNumTensors<Args>> v{};
  for (size_t i = 0; i < kNumTensors<Args>; ++i) v[i] = OpInfo<Args>::kTensors[i].Get(a);
  return v;
}
template <typename Args>
std::array<int64_t, kNumAttrs<Args>> AttrsOf(const Args& a) {
  std::array<int64_t, kNumAttrs<Args>> v{};
  for (size_t i = 0; i < kNumAttrs<Args>; ++i) v[i] = OpInfo<Args>::kAttrs[i].Get(a);
  return v;
}
template <typename Args>
IntArrays<Args> IntArraysOfArgs(const Args& a) {
  IntArrays<Args> v{};
  for (size_t i = 0; i < kNumIntArrays<Args>; ++i) {
    const std::vector<int64_t>* p = IntArraysOf<Args>::Get()[i].Get(a);
    if (p != nullptr) v[i] = *p;
  }
  return v;
}
// The arguments of views (null: absent; a required tensor then keeps an empty view), attribute values and
// integer arrays (null: all absent) in OpInfo order.
template <typename Args>
Args MakeArgs(const TensorView* const* views, const int64_t* attrs, const IntArrays<Args>* arrays = nullptr) {
  Args a;
  for (size_t i = 0; i < kNumTensors<Args>; ++i) OpInfo<Args>::kTensors[i].Set(a, views[i]);
  for (size_t i = 0; i < kNumAttrs<Args>; ++i) OpInfo<Args>::kAttrs[i].Set(a, attrs[i]);
  for (size_t i = 0; arrays != nullptr && i < kNumIntArrays<Args>; ++i) {
    IntArraysOf<Args>::Get()[i].Set(a, (*arrays)[i] ? &*(*arrays)[i] : nullptr);
  }
  return a;
}

namespace detail {
template <typename Args, size_t... I, size_t... J, size_t... L, size_t... K>
aclnnStatus AclnnPhaseOne(aclTensor* const* tensors, const int64_t* attrs, const aclIntArray* const* arrays,
                          uint64_t* workspace_size, aclOpExecutor** executor, std::index_sequence<I...>,
                          std::index_sequence<J...>, std::index_sequence<L...>, std::index_sequence<K...>) {
  return OpEntry<Args>::kAclnnPhaseOne(tensors[I]..., attrs[J]..., arrays[L]..., tensors[sizeof...(I) + K]...,
                                       workspace_size, executor);
}

struct IntArrayDeleter {
  void operator()(aclIntArray* a) const { aclDestroyIntArray(a); }
};
}  // namespace detail

// aclnn's phase one of the operator of `Args`: `tensors` (null: absent) in kTensors order, `attrs` in kAttrs
// order, `arrays` (null: every array absent) in kIntArrays order.
template <typename Args>
aclnnStatus AclnnPhaseOne(aclTensor* const* tensors, const int64_t* attrs, uint64_t* workspace_size,
                          aclOpExecutor** executor, const IntArrays<Args>* arrays = nullptr) {
  static_assert(InputsThenOutputs<Args>(), "OpInfo lists the inputs first, as the aclnn signature does");
  constexpr size_t kInputs = NumInputs<Args>();
  std::array<std::unique_ptr<aclIntArray, detail::IntArrayDeleter>, kNumIntArrays<Args>> owned;
  std::array<const aclIntArray*, kNumIntArrays<Args> + 1> raw{};
  for (size_t i = 0; arrays != nullptr && i < kNumIntArrays<Args>; ++i) {
    if (!(*arrays)[i]) continue;
    owned[i].reset(aclCreateIntArray((*arrays)[i]->data(), (*arrays)[i]->size()));
    raw[i] = owned[i].get();
  }
  return detail::AclnnPhaseOne<Args>(tensors, attrs, raw.data(), workspace_size, executor,
                                     std::make_index_sequence<kInputs>(), std::make_index_sequence<kNumAttrs<Args>>(),
                                     std::make_index_sequence<kNumIntArrays<Args>>(),
                                     std::make_index_sequence<kNumTensors<Args> - kInputs>());
}

}  // namespace moegrad::testing
