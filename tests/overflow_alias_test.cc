// MoeFinalizeRoutingV2Grad and aclCreateTensor in detail: outputs that share memory with an input or with
// another output are rejected by phase one, and so are sizes, offsets and workspaces that do not fit in 64
// bits, through the aclnn API and the C++ API. (Every operator, pair by pair: overflow_alias_every_op_test.cc.)
// Many cases use fake data pointers into the never-mapped first page: phase one must decide from metadata
// alone, so touching any of them would crash the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/overflow_alias_util.h"

namespace moegrad {
namespace {

using namespace moegrad::alias_testing;  // NOLINT

// Both APIs must give the same status and message.
void ExpectRejected(const FinalizeRoutingV2GradArgs& a, const std::string& message) {
  const Outcome cpp = CppPlan(a);
  const Outcome acl = AclPlan(a);
  EXPECT_EQ(cpp.status, ACLNN_ERR_PARAM_INVALID) << cpp.message;
  EXPECT_EQ(acl.status, ACLNN_ERR_PARAM_INVALID) << acl.message;
  EXPECT_EQ(cpp.message, message);
  EXPECT_EQ(acl.message, message);
}

// Both APIs accept `a`, and the one-call form runs it.
void ExpectAcceptedAndRun(const FinalizeRoutingV2GradArgs& a) {
  const Outcome cpp = CppPlan(a);
  const Outcome acl = AclPlan(a);
  EXPECT_EQ(cpp.status, 0) << cpp.message;
  EXPECT_EQ(acl.status, 0) << acl.message;
  EXPECT_TRUE(FinalizeRoutingV2Grad(a).ok());
}

// A small valid MoeFinalizeRoutingV2Grad call (mode 0, scales and bias) over real, separate buffers.
constexpr int64_t kR = 4, kK = 2, kH = 8, kE = 3, kRows = kR * kK;
struct FinalizeRoutingV2GradBuffers {
  std::vector<float> grad_y = std::vector<float>(kR * kH), expanded_x = std::vector<float>(kRows * kH),
                     scales = std::vector<float>(kR * kK), bias = std::vector<float>(kE * kH),
                     grad_x = std::vector<float>(kRows * kH), grad_scales = std::vector<float>(kR * kK);
  std::vector<int32_t> row_idx = std::vector<int32_t>(kR * kK), expert_idx = std::vector<int32_t>(kR * kK);

  FinalizeRoutingV2GradBuffers() {
    for (size_t i = 0; i < grad_y.size(); ++i) grad_y[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    for (size_t i = 0; i < expanded_x.size(); ++i) expanded_x[i] = 0.125f * static_cast<float>(i % 5) + 0.5f;
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.5f + 0.25f * static_cast<float>(i % 3);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = -0.25f * static_cast<float>(i % 4);
    for (int64_t i = 0; i < kR * kK; ++i) {
      row_idx[i] = static_cast<int32_t>((i * 3) % kRows);
      expert_idx[i] = static_cast<int32_t>(i % kE);
    }
  }
  FinalizeRoutingV2GradArgs Args() {
    FinalizeRoutingV2GradArgs a;
    a.grad_y = TensorView(grad_y.data(), DType::kFloat32, {kR, kH});
    a.expanded_row_idx = TensorView(row_idx.data(), DType::kInt32, {kR * kK});
    a.expanded_x = TensorView(expanded_x.data(), DType::kFloat32, {kRows, kH});
    a.scales = TensorView(scales.data(), DType::kFloat32, {kR, kK});
    a.expert_idx = TensorView(expert_idx.data(), DType::kInt32, {kR, kK});
    a.bias = TensorView(bias.data(), DType::kFloat32, {kE, kH});
    a.grad_expanded_x = TensorView(grad_x.data(), DType::kFloat32, {kRows, kH});
    a.grad_scales = TensorView(grad_scales.data(), DType::kFloat32, {kR, kK});
    return a;
  }
};

std::string Overlap(const char* out, const char* in) {
  return std::string("MoeFinalizeRoutingV2Grad: ") + out + " overlaps " + in + " in memory";
}

TEST(FinalizeRoutingV2GradAlias, ValidCaseIsAccepted) {
  FinalizeRoutingV2GradBuffers c;
  EXPECT_EQ(CppPlan(c.Args()).status, 0);
  EXPECT_EQ(AclPlan(c.Args()).status, 0);
}

TEST(FinalizeRoutingV2GradAlias, OneSharedElementIsEnough) {
  FinalizeRoutingV2GradBuffers c;
  std::vector<float> arena(kRows * kH + kR * kH);
  FinalizeRoutingV2GradArgs a = c.Args();
  a.grad_expanded_x.data = arena.data();
  // gradY starts on the last element of gradExpandedXOut.
  a.grad_y.data = arena.data() + kRows * kH - 1;
  ExpectRejected(a, Overlap("gradExpandedXOut", "gradY"));
  // One element later the views are adjacent and valid.
  a.grad_y.data = arena.data() + kRows * kH;
  EXPECT_EQ(CppPlan(a).status, 0);
  EXPECT_EQ(AclPlan(a).status, 0);
}

TEST(FinalizeRoutingV2GradAlias, InterleavedStridedViewsCountAsOverlapping) {
  // The check compares byte spans, so two column-interleaved views are rejected although they share no
  // element: a documented, conservative choice.
  FinalizeRoutingV2GradBuffers c;
  std::vector<float> arena(2 * kRows * kH);
  FinalizeRoutingV2GradArgs a = c.Args();
  a.grad_expanded_x = TensorView(arena.data(), DType::kFloat32, {kRows, kH}, {2 * kH, 2});
  a.expanded_x = TensorView(arena.data() + 1, DType::kFloat32, {kRows, kH}, {2 * kH, 2});
  ExpectRejected(a, Overlap("gradExpandedXOut", "expandedX"));
}

TEST(FinalizeRoutingV2GradAlias, SameAclTensorAsInputAndOutputIsRejected) {
  FinalizeRoutingV2GradBuffers c;
  const FinalizeRoutingV2GradArgs a = c.Args();
  AclTensorPtr gy = ToAcl(a.grad_y), idx = ToAcl(a.expanded_row_idx), x = ToAcl(a.expanded_x),
               s = ToAcl(a.scales), e = ToAcl(a.expert_idx), b = ToAcl(a.bias), gs = ToAcl(a.grad_scales);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gy.get(), idx.get(), x.get(), s.get(), e.get(), b.get(),
                                                          0, 0, 0, 0, x.get(), gs.get(), &ws, &ex),
            ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(ex, nullptr);
  EXPECT_EQ(std::string(aclGetRecentErrMsg()), Overlap("gradExpandedXOut", "expandedX"));
}

TEST(FinalizeRoutingV2GradAlias, EmptyViewsNeverOverlap) {
  // R = 0: every view is empty and all of them start at the same address.
  std::vector<float> one(8);
  FinalizeRoutingV2GradArgs a;
  a.grad_y = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.expanded_row_idx = TensorView(one.data(), DType::kInt32, {0});
  a.expanded_x = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.scales = TensorView(one.data(), DType::kFloat32, {0, 2});
  a.grad_expanded_x = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.grad_scales = TensorView(one.data(), DType::kFloat32, {0, 2});
  ExpectAcceptedAndRun(a);

  // H = 0: the empty output may sit on top of the (non-empty) index input.
  FinalizeRoutingV2GradBuffers c;
  FinalizeRoutingV2GradArgs b;
  b.grad_y = TensorView(c.grad_y.data(), DType::kFloat32, {kR, 0});
  b.expanded_row_idx = TensorView(c.row_idx.data(), DType::kInt32, {kR * kK});
  b.grad_expanded_x = TensorView(c.row_idx.data(), DType::kFloat32, {kRows, 0});
  const std::vector<int32_t> idx_before = c.row_idx;
  ExpectAcceptedAndRun(b);
  EXPECT_EQ(c.row_idx, idx_before);
}

TEST(FinalizeRoutingV2GradAlias, UnwrittenGradScalesIsNotChecked) {
  // Without scales gradScalesOut is not written, so it may share memory with an input.
  FinalizeRoutingV2GradBuffers c;
  FinalizeRoutingV2GradArgs a = c.Args();
  a.scales.reset();
  a.bias.reset();
  a.expert_idx.reset();
  a.grad_scales->data = c.grad_y.data();
  const std::vector<float> grad_y_before = c.grad_y;
  ExpectAcceptedAndRun(a);
  EXPECT_EQ(c.grad_y, grad_y_before);
}

TEST(FinalizeRoutingV2GradAlias, AdjacentViewsInOneArenaComputeLikeSeparateBuffers) {
  FinalizeRoutingV2GradBuffers c;
  const FinalizeRoutingV2GradArgs separate = c.Args();
  ASSERT_TRUE(FinalizeRoutingV2Grad(separate).ok());
  FinalizeRoutingV2GradBuffers expect;
  ref::FinalizeRoutingV2Grad(expect.Args());
  // gradExpandedX is one product per element here (row_idx is a permutation), so it matches the reference
  // exactly; gradScales is a dot product whose order the reference does not share.
  EXPECT_EQ(c.grad_x, expect.grad_x);

  // The same tensors back to back in one allocation, outputs between inputs.
  FinalizeRoutingV2GradBuffers d;
  std::vector<unsigned char> arena(4 * (d.grad_y.size() + d.grad_x.size() + d.expanded_x.size() +
                                        d.grad_scales.size() + d.scales.size() + d.row_idx.size()));
  size_t at = 0;
  auto place = [&](auto& vec) {
    void* p = arena.data() + at;
    std::memcpy(p, vec.data(), vec.size() * 4);
    at += vec.size() * 4;
    return p;
  };
  FinalizeRoutingV2GradArgs a = d.Args();
  a.grad_y.data = place(d.grad_y);
  a.grad_expanded_x.data = place(d.grad_x);
  a.expanded_x->data = place(d.expanded_x);
  a.grad_scales->data = place(d.grad_scales);
  a.scales->data = place(d.scales);
  a.expanded_row_idx.data = place(d.row_idx);
  ASSERT_EQ(AclPlan(a).status, 0);
  ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
  EXPECT_EQ(std::memcmp(a.grad_expanded_x.data, c.grad_x.data(), c.grad_x.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.grad_scales->data, c.grad_scales.data(), c.grad_scales.size() * 4), 0);
}

// --- 64-bit overflow ----------------------------------------------------------------------------------

// Views no aclTensor can describe (aclCreateTensor rejects them itself): the C++ API's plan and one-call form.
void ExpectRejected2(const FinalizeRoutingV2GradArgs& a, const std::string& message) {
  const Outcome o = CppPlan(a);
  EXPECT_EQ(o.status, ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(o.message, message);
  const Status run = FinalizeRoutingV2Grad(a);
  EXPECT_EQ(run.message(), message);
}

// The valid small case's metadata over fake pointers.
FinalizeRoutingV2GradArgs FakeArgs() {
  FinalizeRoutingV2GradBuffers c;
  FinalizeRoutingV2GradArgs a = c.Args();
  int i = 0;
  for (TensorView* v : {&a.grad_y, &a.expanded_row_idx, &*a.expanded_x, &*a.scales, &*a.expert_idx, &*a.bias,
                        &a.grad_expanded_x, &*a.grad_scales}) {
    v->data = Fake(i++);
  }
  return a;
}

TEST(FinalizeRoutingV2GradOverflow, StrideSpansAndByteOffsetsAreChecked) {
  FinalizeRoutingV2GradArgs a = FakeArgs();
  // (R - 1) * 2^62 elements: the element offset of the last row needs 65 bits.
  a.grad_y = View2D(Fake(0), DType::kFloat32, kR, kH, int64_t{1} << 62, 1);
  ExpectRejected2(a, "MoeFinalizeRoutingV2Grad: gradY of shape (4, 8) overflows 64-bit element offsets");
  // Element offsets fit (7 * 2^60 + 57) but bytes (x4) do not.
  FinalizeRoutingV2GradArgs b = FakeArgs();
  b.grad_expanded_x = View2D(Fake(6), DType::kFloat32, kRows, kH, kH, int64_t{1} << 60);
  ExpectRejected2(b, "MoeFinalizeRoutingV2Grad: gradExpandedXOut of shape (8, 8) overflows 64-bit byte offsets");
}

TEST(FinalizeRoutingV2GradOverflow, RowCountOverflowIsRejected) {
  const int64_t e = int64_t{1} << 32;
  FinalizeRoutingV2GradArgs a = DropPadArgs(e, e);
  a.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {1, 1, 0});
  ExpectRejected(a, "MoeFinalizeRoutingV2Grad: expertNum * expertCapacity = " + std::to_string(e) + " * " +
                        std::to_string(e) + " overflows");
}

TEST(FinalizeRoutingV2GradOverflow, WorkspaceOverflowIsRejectedNotWrapped) {
  // 2^62 rows: the row-offset table needs (2^62 + 1) * 8 bytes, past 2^64.
  const int64_t half = int64_t{1} << 31;
  ExpectRejected(DropPadArgs(half, half), "MoeFinalizeRoutingV2Grad: the workspace size overflows 64 bits");
  // 2^58 rows fit: the reported size holds the (2^58 + 1)-entry table and is not wrapped.
  const int64_t fits = int64_t{1} << 29;
  const FinalizeRoutingV2GradArgs ok = DropPadArgs(fits, fits);
  Plan plan;
  ASSERT_TRUE(PlanFinalizeRoutingV2Grad(ok, &plan).ok());
  EXPECT_GE(plan.workspace_size(), ((uint64_t{1} << 58) + 1) * 8);
  EXPECT_LT(plan.workspace_size(), uint64_t{1} << 62);
  // Running it needs 2^61 bytes: the one-call form reports the failed allocation instead of wrapping.
  const Status run = FinalizeRoutingV2Grad(ok);
  EXPECT_EQ(run.code(), StatusCode::kRuntimeError) << run.message();
}

TEST(AclCreateTensorOverflow, SizesStridesStorageAndOffsetsAreChecked) {
  const int64_t big = int64_t{1} << 40;
  const int64_t dims[] = {big, big};
  const int64_t small[] = {2, 2};
  const int64_t huge_stride[] = {int64_t{1} << 62, 1};
  const int64_t storage_ok[] = {16};
  const int64_t storage_big[] = {big, big};
  const int64_t storage_bytes[] = {int64_t{1} << 62};  // elements fit, bytes (x4) do not
  const int64_t zero[] = {0};
  struct Case {
    const char* what;
    aclTensor* t;
  } cases[] = {
      {"view element count", aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, storage_ok, 1, Fake(0))},
      {"storage element count",
       aclCreateTensor(small, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, storage_big, 2, Fake(0))},
      {"storage bytes", aclCreateTensor(small, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, storage_bytes, 1, Fake(0))},
      {"stride span", aclCreateTensor(small, 2, ACL_FLOAT, huge_stride, 0, ACL_FORMAT_ND, storage_ok, 1, Fake(0))},
      {"offset + span", aclCreateTensor(small, 2, ACL_FLOAT, huge_stride, INT64_MAX - 2, ACL_FORMAT_ND, storage_ok, 1,
                                        Fake(0))},
      {"byte offset of an empty view",
       aclCreateTensor(zero, 1, ACL_FLOAT, nullptr, int64_t{1} << 62, ACL_FORMAT_ND, zero, 1, Fake(0))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.t, nullptr);
    if (c.t != nullptr) aclDestroyTensor(c.t);
    EXPECT_EQ(std::string(aclGetRecentErrMsg()).rfind("aclCreateTensor: ", 0), 0u) << aclGetRecentErrMsg();
  }
}

}  // namespace
}  // namespace moegrad
