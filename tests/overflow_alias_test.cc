// Phase one rejects outputs that share memory with an input or with another output, and sizes, offsets and
// workspaces that do not fit in 64 bits, through the aclnn API and the C++ API. Most cases use fake data
// pointers into the never-mapped first page: phase one must decide from metadata alone, so touching any of
// them would crash the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"

namespace moegrad {
namespace {

void* Fake(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x100 + 0x40 * i)); }

struct AclTensorDeleter {
  void operator()(aclTensor* t) const { aclDestroyTensor(t); }
};
using AclTensorPtr = std::unique_ptr<aclTensor, AclTensorDeleter>;

// The aclTensor of a well-formed view: same data, sizes and strides, storage exactly the elements it spans.
AclTensorPtr ToAcl(const TensorView& v) {
  bool empty = false;
  for (int d = 0; d < v.rank; ++d) empty = empty || v.sizes[d] == 0;
  int64_t extent = empty ? 0 : 1;
  for (int d = 0; d < v.rank && !empty; ++d) extent += (v.sizes[d] - 1) * v.strides[d];
  return AclTensorPtr(aclCreateTensor(v.sizes, static_cast<uint64_t>(v.rank), static_cast<aclDataType>(v.dtype),
                                      v.strides, 0, ACL_FORMAT_ND, &extent, 1, v.data));
}
AclTensorPtr ToAcl(const std::optional<TensorView>& v) { return v ? ToAcl(*v) : AclTensorPtr(); }

struct Outcome {
  int status;
  std::string message;
};

// Phase one of MoeFinalizeRoutingV2Grad through aclnn; a successful executor is destroyed unrun.
Outcome AclPlan(const FinalizeRoutingV2GradArgs& a) {
  AclTensorPtr gy = ToAcl(a.grad_y), idx = ToAcl(a.expanded_row_idx), x = ToAcl(a.expanded_x),
               s = ToAcl(a.scales), e = ToAcl(a.expert_idx), b = ToAcl(a.bias), gx = ToAcl(a.grad_expanded_x),
               gs = ToAcl(a.grad_scales);
  EXPECT_TRUE(gy && idx && gx) << aclGetRecentErrMsg();
  uint64_t ws = 0;
  aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(Fake(99));
  const aclnnStatus st = aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(
      gy.get(), idx.get(), x.get(), s.get(), e.get(), b.get(), a.drop_pad_mode, a.active_num, a.expert_num,
      a.expert_capacity, gx.get(), gs.get(), &ws, &ex);
  if (st == ACLNN_SUCCESS) {
    aclDestroyAclOpExecutor(ex);
  } else {
    EXPECT_EQ(ex, nullptr) << "a failed phase one must leave *executor null";
  }
  return {st, st == ACLNN_SUCCESS ? "" : aclGetRecentErrMsg()};
}

Outcome CppPlan(const FinalizeRoutingV2GradArgs& a) {
  Plan plan;
  const Status s = PlanFinalizeRoutingV2Grad(a, &plan);
  EXPECT_EQ(plan.valid(), s.ok());
  return {static_cast<int>(s.code()), s.message()};
}

// Both APIs must give the same status and message.
void ExpectRejected(const FinalizeRoutingV2GradArgs& a, const std::string& message) {
  const Outcome cpp = CppPlan(a);
  const Outcome acl = AclPlan(a);
  EXPECT_EQ(cpp.status, ACLNN_ERR_PARAM_INVALID) << cpp.message;
  EXPECT_EQ(acl.status, ACLNN_ERR_PARAM_INVALID) << acl.message;
  EXPECT_EQ(cpp.message, message);
  EXPECT_EQ(acl.message, message);
}

// A small valid MoeFinalizeRoutingV2Grad call (mode 0, scales and bias) over real, separate buffers.
struct FinalizeCase {
  static constexpr int64_t R = 4, K = 2, H = 8, E = 3, kRows = R * K;
  std::vector<float> grad_y = std::vector<float>(R * H), expanded_x = std::vector<float>(kRows * H),
                     scales = std::vector<float>(R * K), bias = std::vector<float>(E * H),
                     grad_x = std::vector<float>(kRows * H), grad_scales = std::vector<float>(R * K);
  std::vector<int32_t> row_idx = std::vector<int32_t>(R * K), expert_idx = std::vector<int32_t>(R * K);

  FinalizeCase() {
    for (size_t i = 0; i < grad_y.size(); ++i) grad_y[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    for (size_t i = 0; i < expanded_x.size(); ++i) expanded_x[i] = 0.125f * static_cast<float>(i % 5) + 0.5f;
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.5f + 0.25f * static_cast<float>(i % 3);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = -0.25f * static_cast<float>(i % 4);
    for (int64_t i = 0; i < R * K; ++i) {
      row_idx[i] = static_cast<int32_t>((i * 3) % kRows);
      expert_idx[i] = static_cast<int32_t>(i % E);
    }
  }
  FinalizeRoutingV2GradArgs Args() {
    FinalizeRoutingV2GradArgs a;
    a.grad_y = TensorView(grad_y.data(), DType::kFloat32, {R, H});
    a.expanded_row_idx = TensorView(row_idx.data(), DType::kInt32, {R * K});
    a.expanded_x = TensorView(expanded_x.data(), DType::kFloat32, {kRows, H});
    a.scales = TensorView(scales.data(), DType::kFloat32, {R, K});
    a.expert_idx = TensorView(expert_idx.data(), DType::kInt32, {R, K});
    a.bias = TensorView(bias.data(), DType::kFloat32, {E, H});
    a.grad_expanded_x = TensorView(grad_x.data(), DType::kFloat32, {kRows, H});
    a.grad_scales = TensorView(grad_scales.data(), DType::kFloat32, {R, K});
    return a;
  }
};

std::string Overlap(const char* out, const char* in) {
  return std::string("MoeFinalizeRoutingV2Grad: ") + out + " overlaps " + in + " in memory";
}

TEST(FinalizeGradAlias, ValidCaseIsAccepted) {
  FinalizeCase c;
  EXPECT_EQ(CppPlan(c.Args()).status, 0);
  EXPECT_EQ(AclPlan(c.Args()).status, 0);
}

TEST(FinalizeGradAlias, GradExpandedXOnEachInputIsRejected) {
  const char* names[] = {"gradY", "expandedRowIdx", "expandedX", "scales", "expertIdx", "bias"};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(names[i]);
    FinalizeCase c;
    FinalizeRoutingV2GradArgs a = c.Args();
    TensorView* inputs[] = {&a.grad_y, &a.expanded_row_idx, &*a.expanded_x, &*a.scales, &*a.expert_idx, &*a.bias};
    // Input i moves to the start of a buffer large enough for the output, which starts there too, so it
    // overlaps input i and nothing else.
    std::vector<float> shared(2 * FinalizeCase::kRows * FinalizeCase::H);
    inputs[i]->data = shared.data();
    a.grad_expanded_x.data = shared.data();
    ExpectRejected(a, Overlap("gradExpandedXOut", names[i]));
    a.grad_expanded_x.data = shared.data() + 4;  // or anywhere inside it
    ExpectRejected(a, Overlap("gradExpandedXOut", names[i]));
  }
}

TEST(FinalizeGradAlias, GradScalesOnInputsOrOtherOutputIsRejected) {
  FinalizeCase c;
  FinalizeRoutingV2GradArgs a = c.Args();
  a.grad_scales->data = c.scales.data();
  ExpectRejected(a, Overlap("gradScalesOut", "scales"));
  a.grad_scales->data = c.bias.data() + 3;  // inside bias, not at its start
  ExpectRejected(a, Overlap("gradScalesOut", "bias"));
  // The two outputs: found while checking gradExpandedXOut, the first output.
  a.grad_scales->data = c.grad_x.data() + FinalizeCase::kRows * FinalizeCase::H - 1;
  ExpectRejected(a, Overlap("gradExpandedXOut", "gradScalesOut"));
}

TEST(FinalizeGradAlias, OneSharedElementIsEnough) {
  FinalizeCase c;
  std::vector<float> arena(FinalizeCase::kRows * FinalizeCase::H + FinalizeCase::R * FinalizeCase::H);
  FinalizeRoutingV2GradArgs a = c.Args();
  a.grad_expanded_x.data = arena.data();
  // gradY starts on the last element of gradExpandedXOut.
  a.grad_y.data = arena.data() + FinalizeCase::kRows * FinalizeCase::H - 1;
  ExpectRejected(a, Overlap("gradExpandedXOut", "gradY"));
  // One element later the views are adjacent and valid.
  a.grad_y.data = arena.data() + FinalizeCase::kRows * FinalizeCase::H;
  EXPECT_EQ(CppPlan(a).status, 0);
  EXPECT_EQ(AclPlan(a).status, 0);
}

TEST(FinalizeGradAlias, InterleavedStridedViewsCountAsOverlapping) {
  // The check compares byte spans, so two column-interleaved views are rejected although they share no
  // element: a documented, conservative choice.
  FinalizeCase c;
  std::vector<float> arena(2 * FinalizeCase::kRows * FinalizeCase::H);
  FinalizeRoutingV2GradArgs a = c.Args();
  a.grad_expanded_x = TensorView(arena.data(), DType::kFloat32, {FinalizeCase::kRows, FinalizeCase::H},
                                 {2 * FinalizeCase::H, 2});
  a.expanded_x = TensorView(arena.data() + 1, DType::kFloat32, {FinalizeCase::kRows, FinalizeCase::H},
                            {2 * FinalizeCase::H, 2});
  ExpectRejected(a, Overlap("gradExpandedXOut", "expandedX"));
}

TEST(FinalizeGradAlias, SameAclTensorAsInputAndOutputIsRejected) {
  FinalizeCase c;
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

TEST(FinalizeGradAlias, EmptyViewsNeverOverlap) {
  // R = 0: every view is empty and all of them start at the same address.
  std::vector<float> one(8);
  FinalizeRoutingV2GradArgs a;
  a.grad_y = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.expanded_row_idx = TensorView(one.data(), DType::kInt32, {0});
  a.expanded_x = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.scales = TensorView(one.data(), DType::kFloat32, {0, 2});
  a.grad_expanded_x = TensorView(one.data(), DType::kFloat32, {0, 8});
  a.grad_scales = TensorView(one.data(), DType::kFloat32, {0, 2});
  EXPECT_EQ(CppPlan(a).status, 0) << CppPlan(a).message;
  EXPECT_EQ(AclPlan(a).status, 0);
  EXPECT_TRUE(FinalizeRoutingV2Grad(a).ok());

  // H = 0: the empty output may sit on top of the (non-empty) index input.
  FinalizeCase c;
  FinalizeRoutingV2GradArgs b;
  b.grad_y = TensorView(c.grad_y.data(), DType::kFloat32, {FinalizeCase::R, 0});
  b.expanded_row_idx = TensorView(c.row_idx.data(), DType::kInt32, {FinalizeCase::R * FinalizeCase::K});
  b.grad_expanded_x = TensorView(c.row_idx.data(), DType::kFloat32, {FinalizeCase::kRows, 0});
  const std::vector<int32_t> idx_before = c.row_idx;
  EXPECT_EQ(AclPlan(b).status, 0);
  EXPECT_TRUE(FinalizeRoutingV2Grad(b).ok());
  EXPECT_EQ(c.row_idx, idx_before);
}

TEST(FinalizeGradAlias, UnwrittenGradScalesIsNotChecked) {
  // Without scales gradScalesOut is not written, so it may share memory with an input.
  FinalizeCase c;
  FinalizeRoutingV2GradArgs a = c.Args();
  a.scales.reset();
  a.bias.reset();
  a.expert_idx.reset();
  a.grad_scales->data = c.grad_y.data();
  const std::vector<float> grad_y_before = c.grad_y;
  EXPECT_EQ(AclPlan(a).status, 0);
  EXPECT_TRUE(FinalizeRoutingV2Grad(a).ok());
  EXPECT_EQ(c.grad_y, grad_y_before);
}

TEST(FinalizeGradAlias, AdjacentViewsInOneArenaComputeLikeSeparateBuffers) {
  FinalizeCase c;
  const FinalizeRoutingV2GradArgs separate = c.Args();
  ASSERT_TRUE(FinalizeRoutingV2Grad(separate).ok());
  FinalizeCase expect;
  ref::FinalizeRoutingV2Grad(expect.Args());
  // gradExpandedX is one product per element here (row_idx is a permutation), so it matches the reference
  // exactly; gradScales is a dot product whose order the reference does not share.
  EXPECT_EQ(c.grad_x, expect.grad_x);

  // The same tensors back to back in one allocation, outputs between inputs.
  FinalizeCase d;
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

// A 2-D view set field by field: TensorView's contiguous constructor would compute the overflowing strides.
TensorView View2D(void* data, DType dtype, int64_t s0, int64_t s1, int64_t st0, int64_t st1) {
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
  FinalizeCase c;
  FinalizeRoutingV2GradArgs a = c.Args();
  int i = 0;
  for (TensorView* v : {&a.grad_y, &a.expanded_row_idx, &*a.expanded_x, &*a.scales, &*a.expert_idx, &*a.bias,
                        &a.grad_expanded_x, &*a.grad_scales}) {
    v->data = Fake(i++);
  }
  return a;
}

TEST(FinalizeGradOverflow, EveryArgumentsElementCountIsChecked) {
  const int64_t big = int64_t{1} << 40;
  for (int which = 0; which < 8; ++which) {
    FinalizeRoutingV2GradArgs a = FakeArgs();
    TensorView* v[] = {&a.grad_y, &a.expanded_row_idx, &*a.expanded_x, &*a.scales, &*a.expert_idx, &*a.bias,
                       &a.grad_expanded_x, &*a.grad_scales};
    const char* names[] = {"gradY", "expandedRowIdx", "expandedX", "scales", "expertIdx", "bias",
                           "gradExpandedXOut", "gradScalesOut"};
    SCOPED_TRACE(names[which]);
    // 2^40 x 2^40 elements: the element count needs 80 bits (contiguous strides would wrap too).
    *v[which] = View2D(v[which]->data, v[which]->dtype, big, big, 1, 1);
    ExpectRejected2(a, "MoeFinalizeRoutingV2Grad: " + std::string(names[which]) + " of shape (" +
                           std::to_string(big) + ", " + std::to_string(big) + ") overflows 64-bit element offsets");
  }
}

TEST(FinalizeGradOverflow, StrideSpansAndByteOffsetsAreChecked) {
  const int64_t h = FinalizeCase::H;
  FinalizeRoutingV2GradArgs a = FakeArgs();
  // (R - 1) * 2^62 elements: the element offset of the last row needs 65 bits.
  a.grad_y = View2D(Fake(0), DType::kFloat32, FinalizeCase::R, h, int64_t{1} << 62, 1);
  ExpectRejected2(a, "MoeFinalizeRoutingV2Grad: gradY of shape (4, 8) overflows 64-bit element offsets");
  // Element offsets fit (7 * 2^60 + 57) but bytes (x4) do not.
  FinalizeRoutingV2GradArgs b = FakeArgs();
  b.grad_expanded_x = View2D(Fake(6), DType::kFloat32, FinalizeCase::kRows, h, h, int64_t{1} << 60);
  ExpectRejected2(b, "MoeFinalizeRoutingV2Grad: gradExpandedXOut of shape (8, 8) overflows 64-bit byte offsets");
}

// Mode 1 with H = 0: (E, C, 0) views are empty, so E * C rows are metadata only.
FinalizeRoutingV2GradArgs DropPadArgs(int64_t e, int64_t cap) {
  FinalizeRoutingV2GradArgs a;
  a.grad_y = TensorView(Fake(0), DType::kBFloat16, {2, 0});
  a.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {2});
  a.drop_pad_mode = 1;
  a.expert_num = e;
  a.expert_capacity = cap;
  a.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {e, cap, 0});
  return a;
}

TEST(FinalizeGradOverflow, RowCountOverflowIsRejected) {
  const int64_t e = int64_t{1} << 32;
  FinalizeRoutingV2GradArgs a = DropPadArgs(e, e);
  a.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {1, 1, 0});
  ExpectRejected(a, "MoeFinalizeRoutingV2Grad: expertNum * expertCapacity = " + std::to_string(e) + " * " +
                        std::to_string(e) + " overflows");
}

TEST(FinalizeGradOverflow, WorkspaceOverflowIsRejectedNotWrapped) {
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

// --- every operator: each output against each input and each other output; each argument's size -----------

// Tensors 1 MiB apart: a view moved onto one tensor's data touches no other.
struct Arena {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(size_t{12} << 20);
  void* Slot(int k) { return bytes.data() + (static_cast<size_t>(k) << 20); }
};

struct Named {
  std::string name;
  TensorView* view;
};

// One operator's small valid call (every optional tensor present, so every output is written), its tensors
// by name in the order the operator checks them, and phase one through either API.
struct OpUnderTest {
  std::string op;
  std::vector<Named> inputs, outputs;
  std::function<Outcome()> cpp, acl;
};

template <typename Args>
Outcome CppOutcome(const Args& a, Status (*plan_fn)(const Args&, Plan*)) {
  Plan plan;
  const Status s = plan_fn(a, &plan);
  return {static_cast<int>(s.code()), s.message()};
}

// The aclnn phase one `call(workspaceSize, executor)`; a successful executor is destroyed unrun.
Outcome AclOutcome(const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& call) {
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  const aclnnStatus st = call(&ws, &ex);
  if (st == ACLNN_SUCCESS) aclDestroyAclOpExecutor(ex);
  return {st, st == ACLNN_SUCCESS ? "" : aclGetRecentErrMsg()};
}

OpUnderTest FinalizeGradOp(Arena& arena, FinalizeRoutingV2GradArgs& a) {
  a = FinalizeRoutingV2GradArgs();
  a.grad_y = TensorView(arena.Slot(0), DType::kFloat32, {4, 8});
  a.expanded_row_idx = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.expanded_x = TensorView(arena.Slot(2), DType::kFloat32, {8, 8});
  a.scales = TensorView(arena.Slot(3), DType::kFloat32, {4, 2});
  a.expert_idx = TensorView(arena.Slot(4), DType::kInt32, {4, 2});
  a.bias = TensorView(arena.Slot(5), DType::kFloat32, {3, 8});
  a.grad_expanded_x = TensorView(arena.Slot(6), DType::kFloat32, {8, 8});
  a.grad_scales = TensorView(arena.Slot(7), DType::kFloat32, {4, 2});
  OpUnderTest t;
  t.op = "MoeFinalizeRoutingV2Grad";
  t.inputs = {{"gradY", &a.grad_y}, {"expandedRowIdx", &a.expanded_row_idx}, {"expandedX", &*a.expanded_x},
              {"scales", &*a.scales}, {"expertIdx", &*a.expert_idx}, {"bias", &*a.bias}};
  t.outputs = {{"gradExpandedXOut", &a.grad_expanded_x}, {"gradScalesOut", &*a.grad_scales}};
  t.cpp = [&a] { return CppOutcome(a, PlanFinalizeRoutingV2Grad); };
  t.acl = [&a] { return AclPlan(a); };
  return t;
}

OpUnderTest FinalizeOp(Arena& arena, FinalizeRoutingV2Args& a) {
  a = FinalizeRoutingV2Args();
  a.expanded_x = TensorView(arena.Slot(0), DType::kBFloat16, {8, 8});
  a.expanded_row_idx = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.x1 = TensorView(arena.Slot(2), DType::kBFloat16, {4, 8});
  a.x2 = TensorView(arena.Slot(3), DType::kBFloat16, {4, 8});
  a.bias = TensorView(arena.Slot(4), DType::kBFloat16, {3, 8});
  a.scales = TensorView(arena.Slot(5), DType::kBFloat16, {4, 2});
  a.expert_idx = TensorView(arena.Slot(6), DType::kInt32, {4, 2});
  a.drop_pad_mode = 2;
  a.out = TensorView(arena.Slot(7), DType::kBFloat16, {4, 8});
  OpUnderTest t;
  t.op = "MoeFinalizeRoutingV2";
  t.inputs = {{"expandedX", &a.expanded_x}, {"expandedRowIdx", &a.expanded_row_idx}, {"x1", &*a.x1},
              {"x2", &*a.x2},           {"bias", &*a.bias},     {"scales", &*a.scales},
              {"expertIdx", &*a.expert_idx}};
  t.outputs = {{"out", &a.out}};
  t.cpp = [&a] { return CppOutcome(a, PlanFinalizeRoutingV2); };
  t.acl = [&a] {
    AclTensorPtr x = ToAcl(a.expanded_x), idx = ToAcl(a.expanded_row_idx), x1 = ToAcl(a.x1), x2 = ToAcl(a.x2),
                 b = ToAcl(a.bias), s = ToAcl(a.scales), e = ToAcl(a.expert_idx), o = ToAcl(a.out);
    return AclOutcome([&](uint64_t* ws, aclOpExecutor** ex) {
      return aclnnMoeFinalizeRoutingV2GetWorkspaceSize(x.get(), idx.get(), x1.get(), x2.get(), b.get(), s.get(),
                                                       e.get(), a.drop_pad_mode, o.get(), ws, ex);
    });
  };
  return t;
}

OpUnderTest PermuteOp(Arena& arena, TokenPermuteWithRoutingMapArgs& a) {
  a = TokenPermuteWithRoutingMapArgs();
  a.tokens = TensorView(arena.Slot(0), DType::kFloat16, {4, 8});
  a.routing_map = TensorView(arena.Slot(1), DType::kInt8, {4, 3});
  a.probs = TensorView(arena.Slot(2), DType::kFloat16, {4, 3});
  a.num_out_tokens = 8;
  a.permute_tokens = TensorView(arena.Slot(3), DType::kFloat16, {8, 8});
  a.permute_probs = TensorView(arena.Slot(4), DType::kFloat16, {8});
  a.sorted_indices = TensorView(arena.Slot(5), DType::kInt32, {8});
  OpUnderTest t;
  t.op = "MoeTokenPermuteWithRoutingMap";
  t.inputs = {{"tokens", &a.tokens}, {"routingMap", &a.routing_map}, {"probs", &*a.probs}};
  t.outputs = {{"permuteTokensOut", &a.permute_tokens}, {"permuteProbsOut", &*a.permute_probs},
               {"sortedIndicesOut", &a.sorted_indices}};
  t.cpp = [&a] { return CppOutcome(a, PlanTokenPermuteWithRoutingMap); };
  t.acl = [&a] {
    AclTensorPtr tok = ToAcl(a.tokens), map = ToAcl(a.routing_map), pr = ToAcl(a.probs),
                 o = ToAcl(a.permute_tokens), op = ToAcl(a.permute_probs), si = ToAcl(a.sorted_indices);
    return AclOutcome([&](uint64_t* ws, aclOpExecutor** ex) {
      return aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(tok.get(), map.get(), pr.get(), a.num_out_tokens,
                                                                a.drop_and_pad, o.get(), op.get(), si.get(), ws, ex);
    });
  };
  return t;
}

OpUnderTest PermuteGradOp(Arena& arena, TokenPermuteWithRoutingMapGradArgs& a) {
  a = TokenPermuteWithRoutingMapGradArgs();
  a.permuted_token_output_grad = TensorView(arena.Slot(0), DType::kFloat32, {8, 8});
  a.permuted_probs_output_grad = TensorView(arena.Slot(1), DType::kFloat32, {8});
  a.sorted_indices = TensorView(arena.Slot(2), DType::kInt32, {8});
  a.routing_map = TensorView(arena.Slot(3), DType::kBool, {4, 3});
  a.num_experts = 3;
  a.tokens_num = 4;
  a.tokens_grad = TensorView(arena.Slot(4), DType::kFloat32, {4, 8});
  a.probs_grad = TensorView(arena.Slot(5), DType::kFloat32, {4, 3});
  OpUnderTest t;
  t.op = "MoeTokenPermuteWithRoutingMapGrad";
  t.inputs = {{"permutedTokenOutputGrad", &a.permuted_token_output_grad},
              {"permutedProbsOutputGrad", &*a.permuted_probs_output_grad},
              {"sortedIndices", &a.sorted_indices},
              {"routingMap", &*a.routing_map}};
  t.outputs = {{"tokensGradOut", &a.tokens_grad}, {"probsGradOut", &*a.probs_grad}};
  t.cpp = [&a] { return CppOutcome(a, PlanTokenPermuteWithRoutingMapGrad); };
  t.acl = [&a] {
    AclTensorPtr g = ToAcl(a.permuted_token_output_grad), pg = ToAcl(a.permuted_probs_output_grad),
                 si = ToAcl(a.sorted_indices), map = ToAcl(a.routing_map), tg = ToAcl(a.tokens_grad),
                 pgo = ToAcl(a.probs_grad);
    return AclOutcome([&](uint64_t* ws, aclOpExecutor** ex) {
      return aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(g.get(), pg.get(), si.get(), map.get(),
                                                                    a.num_experts, a.tokens_num, a.drop_and_pad,
                                                                    tg.get(), pgo.get(), ws, ex);
    });
  };
  return t;
}

// Runs `check` on each operator's fresh small call.
void ForEachOp(const std::function<void(OpUnderTest&)>& check) {
  Arena arena;
  FinalizeRoutingV2GradArgs fg;
  FinalizeRoutingV2Args ff;
  TokenPermuteWithRoutingMapArgs pf;
  TokenPermuteWithRoutingMapGradArgs pg;
  const std::function<OpUnderTest()> makers[] = {[&] { return FinalizeGradOp(arena, fg); },
                                                 [&] { return FinalizeOp(arena, ff); },
                                                 [&] { return PermuteOp(arena, pf); },
                                                 [&] { return PermuteGradOp(arena, pg); }};
  for (const auto& make : makers) {
    OpUnderTest t = make();
    SCOPED_TRACE(t.op);
    check(t);
  }
}

TEST(EveryOperatorAlias, SmallCallsAreAccepted) {
  ForEachOp([](OpUnderTest& t) {
    EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
    EXPECT_EQ(t.acl().status, 0) << t.acl().message;
  });
}

TEST(EveryOperatorAlias, EachOutputOnEachInputAndOnEachOtherOutputIsRejected) {
  ForEachOp([](OpUnderTest& t) {
    for (size_t o = 0; o < t.outputs.size(); ++o) {
      std::vector<std::pair<Named, std::string>> others;  // (tensor, the message naming the pair)
      for (const Named& in : t.inputs) others.push_back({in, t.outputs[o].name + " overlaps " + in.name});
      for (size_t p = 0; p < t.outputs.size(); ++p) {
        if (p == o) continue;
        // Found while checking whichever of the two outputs comes first.
        const Named& first = t.outputs[std::min(o, p)];
        const Named& second = t.outputs[std::max(o, p)];
        others.push_back({t.outputs[p], first.name + " overlaps " + second.name});
      }
      TensorView* out = t.outputs[o].view;
      void* const own = out->data;
      for (const auto& [other, pair] : others) {
        SCOPED_TRACE(t.outputs[o].name + " on " + other.name);
        const std::string want = t.op + ": " + pair + " in memory";
        out->data = other.view->data;
        EXPECT_EQ(t.cpp().message, want);
        EXPECT_EQ(t.acl().message, want);
        out->data = static_cast<char*>(other.view->data) + other.view->element_size();  // one element in
        EXPECT_EQ(t.cpp().status, ACLNN_ERR_PARAM_INVALID);
      }
      out->data = own;
    }
  });
}

TEST(EveryOperatorOverflow, EachArgumentsElementCountIsChecked) {
  ForEachOp([](OpUnderTest& t) {
    std::vector<Named> all = t.inputs;
    all.insert(all.end(), t.outputs.begin(), t.outputs.end());
    const int64_t big = int64_t{1} << 40;
    for (const Named& n : all) {
      SCOPED_TRACE(n.name);
      const TensorView saved = *n.view;
      *n.view = View2D(saved.data, saved.dtype, big, big, 1, 1);
      EXPECT_EQ(t.cpp().message, t.op + ": " + n.name + " of shape (" + std::to_string(big) + ", " +
                                     std::to_string(big) + ") overflows 64-bit element offsets");
      // Element offsets fit, bytes do not (one-byte elements cannot get there).
      if (saved.element_size() > 1) {
        *n.view = View2D(saved.data, saved.dtype, 2, 2, int64_t{1} << 62, 1);
        EXPECT_EQ(t.cpp().message, t.op + ": " + n.name + " of shape (2, 2) overflows 64-bit byte offsets");
      }
      *n.view = saved;
    }
  });
}

// Attributes at the ends of int64 with empty tensors that agree with them: phase one must answer with a
// status (never wrap a size or overflow in its own arithmetic: the sanitizer build aborts on that).
TEST(EveryOperatorOverflow, ExtremeAttributesWithEmptyTensors) {
  const int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  auto expect_status = [](const Outcome& o, const char* what) {
    EXPECT_TRUE(o.status == 0 || o.status == ACLNN_ERR_PARAM_INVALID) << what << ": " << o.status << " " << o.message;
  };
  for (const int64_t v : {kMax, kMax - 1, kMin, int64_t{1} << 62, int64_t{-1}}) {
    SCOPED_TRACE(v);
    // MoeFinalizeRoutingV2Grad, mode 1 with E = v (C = 1) and mode 0 with activeNum = v.
    FinalizeRoutingV2GradArgs g = DropPadArgs(v > 0 ? v : 1, 1);
    expect_status(CppPlan(g), "finalize grad expertNum");
    g.drop_pad_mode = v;
    expect_status(CppPlan(g), "finalize grad dropPadMode");
    g = DropPadArgs(2, 2);
    g.drop_pad_mode = 0;
    g.active_num = v;
    g.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {2, 0});
    expect_status(CppPlan(g), "finalize grad activeNum");
    expect_status(AclPlan(g), "finalize grad activeNum (aclnn)");

    // MoeFinalizeRoutingV2, drop/pad with E = v experts of capacity 1; and dropPadMode = v.
    FinalizeRoutingV2Args f;
    f.expanded_x = TensorView(Fake(0), DType::kFloat32, {v > 0 ? v : 1, 1, 0});
    f.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {0});
    f.drop_pad_mode = 3;
    f.out = TensorView(Fake(2), DType::kFloat32, {0, 0});
    expect_status(CppOutcome(f, PlanFinalizeRoutingV2), "finalize experts");
    f.drop_pad_mode = v;
    expect_status(CppOutcome(f, PlanFinalizeRoutingV2), "finalize dropPadMode");

    // MoeTokenPermuteWithRoutingMap: T = v tokens of hidden size 0, no experts; numOutTokens = v.
    for (const bool dp : {false, true}) {
      TokenPermuteWithRoutingMapArgs p;
      const int64_t tokens = v > 0 ? v : 1;
      p.tokens = TensorView(Fake(0), DType::kFloat32, {tokens, 0});
      p.routing_map = TensorView(Fake(1), DType::kBool, {tokens, 0});
      p.drop_and_pad = dp;
      p.permute_tokens = TensorView(Fake(2), DType::kFloat32, {0, 0});
      p.sorted_indices = TensorView(Fake(3), DType::kInt32, {0});
      expect_status(CppOutcome(p, PlanTokenPermuteWithRoutingMap), "permute tokens");
      p.num_out_tokens = v;
      expect_status(CppOutcome(p, PlanTokenPermuteWithRoutingMap), "permute numOutTokens");
    }

    // MoeTokenPermuteWithRoutingMapGrad: tokensNum = v and numExperts = v, N = 0 rows.
    for (const bool dp : {false, true}) {
      TokenPermuteWithRoutingMapGradArgs q;
      q.permuted_token_output_grad = TensorView(Fake(0), DType::kFloat32, {0, 0});
      q.sorted_indices = TensorView(Fake(1), DType::kInt32, {0});
      q.num_experts = v;
      q.tokens_num = v;
      q.drop_and_pad = dp;
      q.tokens_grad = TensorView(Fake(2), DType::kFloat32, {v > 0 ? v : 1, 0});
      expect_status(CppOutcome(q, PlanTokenPermuteWithRoutingMapGrad), "permute grad tokensNum");
      q.num_experts = 4;
      expect_status(CppOutcome(q, PlanTokenPermuteWithRoutingMapGrad), "permute grad tokensNum, 4 experts");
    }
  }
}

TEST(EveryOperatorOverflow, PermuteGradWorkspaceOverflowIsRejected) {
  // Drop-and-pad keeps a (T + 1)-entry offset table: 2^62 tokens need 2^65 bytes.
  TokenPermuteWithRoutingMapGradArgs q;
  q.permuted_token_output_grad = TensorView(Fake(0), DType::kFloat32, {0, 0});
  q.sorted_indices = TensorView(Fake(1), DType::kInt32, {0});
  q.num_experts = 1;
  q.tokens_num = int64_t{1} << 62;
  q.drop_and_pad = true;
  q.tokens_grad = TensorView(Fake(2), DType::kFloat32, {q.tokens_num, 0});
  const Outcome o = CppOutcome(q, PlanTokenPermuteWithRoutingMapGrad);
  EXPECT_EQ(o.status, ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(o.message, "MoeTokenPermuteWithRoutingMapGrad: the workspace size overflows 64 bits");
}

}  // namespace
}  // namespace moegrad
