// A TensorView describes itself truthfully even when it is not valid: built from more sizes than kMaxRank, or
// with a strides list of another length than its sizes', it writes nothing past its arrays (AddressSanitizer
// checks this in the sanitizer build) and every operator rejects it in its first check, with one line naming
// the tensor, writing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "moegrad/op_info.hpp"
#include "moegrad/tensor.hpp"
#include "tests/support/api.h"
#include "tests/support/valid_calls.h"

namespace moegrad::testing {
namespace {

// A view constructed on the stack between two guard arrays: a write past sizes[] or strides[] would change the
// view's own later fields (checked) or, under AddressSanitizer, be reported.
TEST(TensorView, MoreSizesThanMaxRankKeepTheRankAndWriteNothingPast) {
  float data[4] = {};
  const TensorView v(data, DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(v.rank, 9);
  EXPECT_FALSE(v.valid_rank());
  EXPECT_EQ(v.device, Device::kHost);  // the field after strides[]
  EXPECT_EQ(v.numel(), 0);
  EXPECT_FALSE(v.is_contiguous());
  for (int d = 0; d < TensorView::kMaxRank; ++d) {
    EXPECT_EQ(v.sizes[d], 1);
    EXPECT_EQ(v.strides[d], 1);
  }
  const TensorView w(data, DType::kFloat32, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17},
                     {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(w.rank, 16);
  EXPECT_EQ(w.device, Device::kHost);
  EXPECT_EQ(w.sizes[7], 9);
  EXPECT_EQ(w.strides[7], 1);
}

TEST(TensorView, StridesOfAnotherLengthMakeTheViewInvalid) {
  float data[6] = {};
  const TensorView fewer(data, DType::kFloat32, {2, 3}, {3});
  EXPECT_EQ(fewer.rank, TensorView::kMismatchedStrides);
  EXPECT_FALSE(fewer.valid_rank());
  const TensorView more(data, DType::kFloat32, {2, 3}, {3, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(more.rank, TensorView::kMismatchedStrides);
  EXPECT_EQ(more.device, Device::kHost);
  EXPECT_EQ(more.numel(), 0);
  // Control: matching lengths give the strided view asked for.
  const TensorView ok(data, DType::kFloat32, {2, 3}, {1, 2});
  EXPECT_EQ(ok.rank, 2);
  EXPECT_EQ(ok.strides[0], 1);
  EXPECT_EQ(ok.strides[1], 2);
  EXPECT_EQ(ok.numel(), 6);
}

// Every tensor of a valid call of every operator, in turn replaced by `bad` (same data and dtype): phase one and
// the one-call form fail with INVALID and `want` naming that tensor, and nothing is written.
template <typename Args, typename MakeBad>
void CheckEveryTensor(ValidCall<Args> v, const MakeBad& make_bad, const std::string& want) {
  using Info = OpInfo<Args>;
  SCOPED_TRACE(Info::kName);
  const TestCall<Args> c = v.Call();
  ASSERT_TRUE(c.Run(Api::kCpp).ok());
  const auto before = v.Snapshot();
  int checked = 0;
  for (size_t i = 0; i < kNumTensors<Args>; ++i) {
    const TensorArg<Args>& arg = Info::kTensors[i];
    Args a = c.CppArgs();
    if (arg.Get(a) == nullptr) continue;
    SCOPED_TRACE(arg.name);
    const TensorView bad = make_bad(*arg.Get(a));
    arg.Set(a, &bad);
    Plan plan;
    Status s = Info::kPlan(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kInvalid);
    EXPECT_FALSE(plan.valid());
    ExpectErrorMessage(s.message(), Info::kName, std::string(arg.name) + want);
    s = Info::kRun(a);
    EXPECT_EQ(s.code(), StatusCode::kInvalid);
    ++checked;
  }
  EXPECT_GE(checked, 3);
  v.ExpectUnchanged(before);
}

template <typename MakeBad>
void CheckEveryOperator(const MakeBad& make_bad, const std::string& want) {
  CheckEveryTensor(FinalizeRoutingV2GradCall(), make_bad, want);
  CheckEveryTensor(TokenPermuteWithRoutingMapGradCall(), make_bad, want);
  CheckEveryTensor(FinalizeRoutingV2Call(), make_bad, want);
  CheckEveryTensor(TokenPermuteWithRoutingMapCall(), make_bad, want);
  CheckEveryTensor(InitRoutingV2Call(), make_bad, want);
  CheckEveryTensor(InitRoutingV2GradCall(), make_bad, want);
  CheckEveryTensor(TokenUnpermuteWithRoutingMapCall(), make_bad, want);
  CheckEveryTensor(TokenUnpermuteWithRoutingMapGradCall(), make_bad, want);
}

TEST(TensorView, EveryOperatorRejectsATooHighRankFirst) {
  CheckEveryOperator([](const TensorView& t) { return TensorView(t.data, t.dtype, {1, 1, 1, 1, 1, 1, 1, 1, 1}); },
                     " has rank 9; ranks 0..8 are supported");
}

TEST(TensorView, EveryOperatorRejectsMismatchedStrides) {
  CheckEveryOperator([](const TensorView& t) { return TensorView(t.data, t.dtype, {1, 1}, {1}); },
                     " was built with a strides list whose length differs from its sizes'");
}

}  // namespace
}  // namespace moegrad::testing
