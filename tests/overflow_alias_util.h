// Shared by the aliasing and overflow tests: aclTensors from views, phase one of any operator through either
// API, and views no constructor may compute.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "acl/acl.h"
#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/op_entry.h"

namespace moegrad::alias_testing {

// A data pointer into the never-mapped first page.
inline void* Fake(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x100 + 0x40 * i)); }

using testing::AclTensorPtr;

// The aclTensor of a well-formed view: same data, sizes and strides, storage exactly the elements it spans.
inline AclTensorPtr ToAcl(const TensorView& v) {
  bool empty = false;
  for (int d = 0; d < v.rank; ++d) empty = empty || v.sizes[d] == 0;
  int64_t extent = empty ? 0 : 1;
  for (int d = 0; d < v.rank && !empty; ++d) extent += (v.sizes[d] - 1) * v.strides[d];
  return AclTensorPtr(aclCreateTensor(v.sizes, static_cast<uint64_t>(v.rank), static_cast<aclDataType>(v.dtype),
                                      v.strides, 0, ACL_FORMAT_ND, &extent, 1, v.data));
}
inline AclTensorPtr ToAcl(const std::optional<TensorView>& v) { return v ? ToAcl(*v) : AclTensorPtr(); }

struct Outcome {
  int status;
  std::string message;
};

// Phase one of the operator of `a` through aclnn, every view an aclTensor; a successful executor is destroyed
// unrun.
template <typename Args>
Outcome AclPlan(const Args& a) {
  using Info = OpInfo<Args>;
  AclTensorPtr t[testing::kNumTensors<Args>];
  aclTensor* raw[testing::kNumTensors<Args>];
  for (size_t i = 0; i < testing::kNumTensors<Args>; ++i) {
    const TensorView* v = Info::kTensors[i].Get(a);
    if (v != nullptr) t[i] = ToAcl(*v);
    EXPECT_TRUE(v == nullptr || t[i]) << Info::kTensors[i].name << ": " << aclGetRecentErrMsg();
    raw[i] = t[i].get();
  }
  uint64_t ws = 0;
  aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(Fake(99));
  const auto attrs = testing::AttrsOf(a);
  const auto arrays = testing::IntArraysOfArgs(a);
  const aclnnStatus st = testing::AclnnPhaseOne<Args>(raw, attrs.data(), &ws, &ex, &arrays);
  if (st == ACLNN_SUCCESS) {
    aclDestroyAclOpExecutor(ex);
  } else {
    EXPECT_EQ(ex, nullptr) << "a failed phase one must leave *executor null";
  }
  return {st, st == ACLNN_SUCCESS ? "" : aclGetRecentErrMsg()};
}

// Phase one of the operator of `a` through the C++ API.
template <typename Args>
Outcome CppPlan(const Args& a) {
  Plan plan;
  const Status s = OpInfo<Args>::kPlan(a, &plan);
  EXPECT_EQ(plan.valid(), s.ok());
  return {static_cast<int>(s.code()), s.message()};
}

// A 2-D view set field by field: TensorView's contiguous constructor would compute the overflowing strides.
inline TensorView View2D(void* data, DType dtype, int64_t s0, int64_t s1, int64_t st0, int64_t st1) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 2;
  v.sizes[0] = s0;
  v.sizes[1] = s1;
  v.strides[0] = st0;
  v.strides[1] = st1;
  return v;
}

// Mode 1 with H = 0: (E, C, 0) views are empty, so E * C rows are metadata only.
inline FinalizeRoutingV2GradArgs DropPadArgs(int64_t e, int64_t cap) {
  FinalizeRoutingV2GradArgs a;
  a.grad_y = TensorView(Fake(0), DType::kBFloat16, {2, 0});
  a.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {2});
  a.drop_pad_mode = 1;
  a.expert_num = e;
  a.expert_capacity = cap;
  a.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {e, cap, 0});
  return a;
}

}  // namespace moegrad::alias_testing
