// MoeFinalizeRoutingV2 against hand-computed values and, bit for bit, against the scalar reference: every
// dropPadMode, optional x1 / x2 / scales / bias, dropped pairs, duplicated rows, dtypes (scales' apart from the
// rest), layouts, hidden sizes with odd tails, empty tensors, both APIs, SIMD targets and thread counts. Contract:
// docs/ops/finalize_routing_v2.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
struct Tensors {
  TestTensor x, idx, x1, x2, bias, scales, expert, out;
};

class FinalizeRoutingV2Tester {
 public:
  FinalizeRoutingV2Tester& tokens(int64_t v) { R_ = v; return *this; }
  FinalizeRoutingV2Tester& hidden(int64_t v) { H_ = v; return *this; }
  FinalizeRoutingV2Tester& topk(int64_t v) { K_ = v; return *this; }
  FinalizeRoutingV2Tester& mode(int64_t v) { mode_ = v; return *this; }
  FinalizeRoutingV2Tester& experts(int64_t v) { E_ = v; return *this; }
  FinalizeRoutingV2Tester& capacity(int64_t v) { C_ = v; return *this; }
  FinalizeRoutingV2Tester& x1(bool v) { x1_ = v; return *this; }
  FinalizeRoutingV2Tester& x2(bool v) { x2_ = v; return *this; }
  FinalizeRoutingV2Tester& scales(bool v) { scales_ = v; return *this; }
  FinalizeRoutingV2Tester& bias(bool v) { bias_ = v; return *this; }
  // Without bias: pass an expertIdx full of out-of-range values anyway (it must not be read).
  FinalizeRoutingV2Tester& unread_expert_idx(bool v) { unread_expert_idx_ = v; return *this; }
  FinalizeRoutingV2Tester& drop_rate(double v) { drop_ = v; return *this; }   // modes 1, 3
  FinalizeRoutingV2Tester& duplicates(bool v) { dup_ = v; return *this; }      // independent index values
  FinalizeRoutingV2Tester& layout(Layout in, Layout out) { in_ = in; out_ = out; return *this; }
  FinalizeRoutingV2Tester& seed(uint64_t v) { seed_ = v; return *this; }
  FinalizeRoutingV2Tester& api(Api v) { api_ = v; return *this; }
  FinalizeRoutingV2Tester& all_targets(bool v) { all_targets_ = v; return *this; }

  // scales in the dtype of the rest, or in its own.
  void Test(DType dtype) const { Test(DTypes{dtype, dtype}); }
  void Test(DTypes dtype) const {
    const Tensors in = Make(dtype);
    Tensors want = in;
    ref::FinalizeRoutingV2(Call(want).CppArgs());
    const auto out_before = in.out.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_, /*runs=*/2);  // a plan or executor runs twice
      ASSERT_TRUE(s.ok()) << s.message() << Describe(dtype) << where;
      EXPECT_TRUE(got.out.OutsideViewUnchanged(out_before)) << "out written outside its view" << Describe(dtype);
      for (int64_t i = 0; i < got.out.numel(); ++i) {
        if (ElementBits(got.out, i) != ElementBits(want.out, i)) {
          ADD_FAILURE() << "out[" << i / H_ << "][" << i % H_ << "] = " << got.out.GetF(i)
                        << " but the reference gives " << want.out.GetF(i) << Describe(dtype) << where;
          break;
        }
      }
      const TestTensor* ins[] = {&got.x, &got.idx, &got.x1, &got.x2, &got.bias, &got.scales, &got.expert};
      const TestTensor* orig[] = {&in.x, &in.idx, &in.x1, &in.x2, &in.bias, &in.scales, &in.expert};
      for (int k = 0; k < 7; ++k) EXPECT_TRUE(ins[k]->SameBytes(orig[k]->Snapshot())) << "input " << k << " written";
    };
    if (!all_targets_) return check("");
    ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
  }

 private:
  bool drop_pad() const { return mode_ == 1 || mode_ == 3; }

  Tensors Make(DTypes dtypes) const {
    const DType dtype = dtypes.tokens;
    std::mt19937_64 rng(seed_);
    const int64_t pairs = R_ * K_;
    const int64_t rows = drop_pad() ? E_ * C_ : pairs;
    Tensors t;
    t.x = drop_pad() ? TestTensor(dtype, {E_, C_, H_}, in_, seed_ + 1) : TestTensor(dtype, {pairs, H_}, in_, seed_ + 1);
    t.idx = TestTensor(DType::kInt32, {pairs}, in_, seed_ + 2);
    t.x1 = TestTensor(dtype, {R_, H_}, in_, seed_ + 3);
    t.x2 = TestTensor(dtype, {R_, H_}, in_, seed_ + 4);
    t.bias = TestTensor(dtype, {E_, H_}, in_, seed_ + 5);
    t.scales = TestTensor(dtypes.weights, {R_, K_}, in_, seed_ + 6);
    t.expert = TestTensor(DType::kInt32, {R_, K_}, in_, seed_ + 7);
    t.out = TestTensor(dtype, {R_, H_}, out_, seed_ + 8);
    for (TestTensor* f : {&t.x, &t.x1, &t.x2, &t.bias, &t.scales}) f->FillUniform(rng);
    // Index values: a permutation of the rows (as the routing step writes them) or independent draws.
    std::vector<int64_t> slots(static_cast<size_t>(rows));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int64_t i = 0; i < pairs; ++i) {
      int64_t v = -1;
      if (rows > 0 && !(drop_pad() && unit(rng) < drop_)) {
        if (dup_) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        else if (i < rows) v = slots[static_cast<size_t>(i)];
      }
      t.idx.SetI(i, v);
    }
    for (int64_t i = 0; i < pairs; ++i) {
      t.expert.SetI(i, bias_ ? static_cast<int64_t>(rng() % static_cast<uint64_t>(E_)) : 1000 + i);
    }
    return t;
  }

  // The call over `t`: the optional tensors as configured.
  TestCall<FinalizeRoutingV2Args> Call(Tensors& t) const {
    TestCall<FinalizeRoutingV2Args> c;
    c.tensors = {&t.x,
                 &t.idx,
                 x1_ ? &t.x1 : nullptr,
                 x2_ ? &t.x2 : nullptr,
                 bias_ ? &t.bias : nullptr,
                 scales_ ? &t.scales : nullptr,
                 bias_ || unread_expert_idx_ ? &t.expert : nullptr,
                 &t.out};
    c.attrs = {mode_};
    return c;
  }

  std::string Describe(DTypes dtype) const {
    return std::string(" [") + DTypesName(dtype) + " mode=" + std::to_string(mode_) + " R=" + std::to_string(R_) +
           " K=" + std::to_string(K_) + " H=" + std::to_string(H_) + " E=" + std::to_string(E_) +
           " C=" + std::to_string(C_) + (x1_ ? " x1" : "") + (x2_ ? " x2" : "") + (scales_ ? " scales" : "") +
           (bias_ ? " bias" : "") + (dup_ ? " dup" : "") + " drop=" + std::to_string(drop_) + " in=" +
           LayoutName(in_) + " out=" + LayoutName(out_) + " api=" + ApiName(api_) +
           " seed=" + std::to_string(seed_) + " target=" + SimdTarget() + "]";
  }

  int64_t R_ = 5, H_ = 17, K_ = 3, mode_ = 2, E_ = 4, C_ = 4;
  bool x1_ = false, x2_ = false, scales_ = true, bias_ = false, unread_expert_idx_ = false, dup_ = false;
  double drop_ = 0.25;
  Layout in_ = Layout::kContiguous, out_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
  bool all_targets_ = false;
};

// out = x1 + sum_k s * (x + b) worked by hand. R = 2, H = 2, K = 2; rows x0..x3 = [1,2] [3,4] [5,6] [7,8];
// token-major pairs (0,0) (0,1) (1,0) (1,1) read rows 2, 0|dropped, 3, 1; scales [[0.5, 2], [1, -1]];
// x1 = [[10, 20], [30, 40]]; bias b0 = [100, 0], b1 = [0, 100]; expertIdx [[1, 0], [1, 0]].
//   no bias:   out[0] = [10,20] + 0.5*[5,6] + 2*[1,2] = [14.5, 27];  out[1] = [30,40] + [7,8] - [3,4] = [34, 44]
//   bias, pair (0,1) dropped: out[0] = [10,20] + 0.5*[5,106] + 2*[100,0] = [212.5, 73]
//                             out[1] = [30,40] + [7,108] - [103,4] = [-66, 144]
// (212.5 is not a bf16 value; the scales are exact in every dtype.)
void HandComputed(int64_t mode, DTypes d, Layout layout) {
  SCOPED_TRACE(::testing::Message() << "mode " << mode << " " << DTypesName(d) << " " << LayoutName(layout));
  const DType dtype = d.tokens;
  const bool dp = mode == 1 || mode == 3;
  TestTensor x = dp ? TestTensor(dtype, {2, 2, 2}, layout, 1) : TestTensor(dtype, {4, 2}, layout, 1);
  TestTensor idx(DType::kInt32, {4}, layout, 2), x1(dtype, {2, 2}, layout, 3), scales(d.weights, {2, 2}, layout, 4);
  TestTensor bias(dtype, {2, 2}, layout, 5), expert(DType::kInt32, {2, 2}, layout, 6), out(dtype, {2, 2}, layout, 7);
  const float xv[] = {1, 2, 3, 4, 5, 6, 7, 8}, x1v[] = {10, 20, 30, 40}, sv[] = {0.5f, 2, 1, -1}, bv[] = {100, 0, 0, 100};
  for (int i = 0; i < 8; ++i) x.SetF(i, xv[i]);
  for (int i = 0; i < 4; ++i) {
    x1.SetF(i, x1v[i]);
    scales.SetF(i, sv[i]);
    bias.SetF(i, bv[i]);
    expert.SetI(i, i % 2 == 0 ? 1 : 0);
  }
  const int64_t token_major[] = {2, dp ? -1 : 0, 3, 1};
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t k = 0; k < 2; ++k) idx.SetI(mode >= 2 ? r * 2 + k : k * 2 + r, token_major[r * 2 + k]);
  }
  FinalizeRoutingV2Args a;
  a.expanded_x = x;
  a.expanded_row_idx = idx;
  a.x1 = x1.view();
  a.scales = scales.view();
  if (dp) {
    a.bias = bias.view();
    a.expert_idx = expert.view();
  }
  a.drop_pad_mode = mode;
  a.out = out;
  ASSERT_TRUE(FinalizeRoutingV2(a).ok());
  const std::vector<float> want = dp ? std::vector<float>{212.5f, 73, -66, 144} : std::vector<float>{14.5f, 27, 34, 44};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.GetF(i), want[static_cast<size_t>(i)]) << i;
}

TEST(FinalizeRoutingV2, HandComputed) {
  for (int64_t mode : {0, 1, 2, 3}) {
    for (DType dt : {DType::kFloat32, DType::kFloat16}) {
      for (DType w : kFloats) {
        for (Layout l : kLayouts) HandComputed(mode, {dt, w}, l);
      }
    }
  }
}

// One rounding: in bf16, 1 + 2^-8 + 2^-8 is 1 + 2^-7 exactly when summed in fp32, but 1 when each partial sum
// is rounded to bf16.
TEST(FinalizeRoutingV2, RoundsOnce) {
  TestTensor x(DType::kBFloat16, {2, 1}), idx(DType::kInt32, {2}), x1(DType::kBFloat16, {1, 1});
  TestTensor out(DType::kBFloat16, {1, 1});
  x.SetF(0, 1.0f / 256);
  x.SetF(1, 1.0f / 256);
  x1.SetF(0, 1.0f);
  idx.SetI(0, 0);
  idx.SetI(1, 1);
  FinalizeRoutingV2Args a;
  a.expanded_x = x;
  a.expanded_row_idx = idx;
  a.x1 = x1.view();
  a.drop_pad_mode = 2;
  a.out = out;
  ASSERT_TRUE(FinalizeRoutingV2(a).ok());
  EXPECT_EQ(out.GetF(0), 1.0f + 1.0f / 128);
}

// fp32 scales with 16-bit rows keep their precision. With the rows' unit roundoff u (2^-8 in bf16, 2^-11 in
// fp16), x = 1 + 2u and scale 1 + u (a tie that rounds to 1 in the rows' dtype): out = rne(1 + 3u + 2u^2) =
// 1 + 4u, where a scale rounded to the rows' dtype first gives 1 + 2u.
TEST(FinalizeRoutingV2, ScalesKeepTheirOwnPrecision) {
  for (const DType rows : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(rows));
    const float u = Epsilon(rows) / 2;
    TestTensor x(rows, {1, 1}), idx(DType::kInt32, {1}), scales(DType::kFloat32, {1, 1}), out(rows, {1, 1});
    x.SetF(0, 1 + 2 * u);
    scales.SetF(0, 1 + u);
    idx.SetI(0, 0);
    FinalizeRoutingV2Args a;
    a.expanded_x = x;
    a.expanded_row_idx = idx;
    a.scales = scales.view();
    a.drop_pad_mode = 2;
    a.out = out;
    ASSERT_TRUE(FinalizeRoutingV2(a).ok());
    EXPECT_EQ(out.GetF(0), 1 + 4 * u);
  }
}

// Nothing at all to add (no x1 / x2, every pair dropped, no bias) gives +0.
TEST(FinalizeRoutingV2, AllDroppedWithoutBiasIsZero) {
  for (int64_t mode : {1, 3}) {
    FinalizeRoutingV2Tester().mode(mode).drop_rate(1.0).hidden(33).Test(DType::kFloat32);
    TestTensor x(DType::kFloat32, {2, 2, 3}), idx(DType::kInt32, {4}), out(DType::kFloat32, {2, 3});
    for (int i = 0; i < 4; ++i) idx.SetI(i, -1);
    FinalizeRoutingV2Args a;
    a.expanded_x = x;
    a.expanded_row_idx = idx;
    a.drop_pad_mode = mode;
    a.out = out;
    ASSERT_TRUE(FinalizeRoutingV2(a).ok());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(ElementBits(out, i), 0u) << i;
  }
}

TEST(FinalizeRoutingV2, ModesOptionalsAndHiddenSizes) {
  struct Opt {
    bool x1, x2, scales, bias;
  } const opts[] = {{false, false, false, false}, {true, false, true, false}, {false, true, false, false},
                    {true, true, true, true},     {false, false, false, true}, {false, false, true, true}};
  uint64_t seed = 1;
  for (int64_t mode : {0, 1, 2, 3}) {
    for (const Opt& o : opts) {
      for (int64_t H : {1, 3, 8, 17, 64, 100, 1031}) {
        for (DType dt : kFloats) {
          FinalizeRoutingV2Tester().mode(mode).x1(o.x1).x2(o.x2).scales(o.scales).bias(o.bias).hidden(H).seed(seed++)
              .Test(dt);
        }
      }
    }
  }
}

// Every (tokens, scales) dtype combination in every mode: with and without x1, x2 and bias, dropped and
// duplicated rows, rows with and without a column tail, a strided layout and the aclnn API.
TEST(FinalizeRoutingV2, EveryDTypeCombination) {
  uint64_t seed = 600;
  for (const DTypes& d : kEveryDTypes) {
    for (int64_t mode : {0, 1, 2, 3}) {
      for (int64_t H : {17, 1031}) {
        FinalizeRoutingV2Tester().mode(mode).hidden(H).seed(seed++).Test(d);
        FinalizeRoutingV2Tester().mode(mode).hidden(H).x1(true).x2(true).bias(true).duplicates(true).seed(seed++)
            .Test(d);
      }
      FinalizeRoutingV2Tester().mode(mode).topk(9).hidden(40).x1(true).bias(true).layout(Layout::kPadded,
          Layout::kTransposed).api(Api::kAclnn).seed(seed++).Test(d);
    }
  }
}

TEST(FinalizeRoutingV2, TopKWithoutScales) {
  for (int64_t mode : {0, 1, 2, 3}) {
    // Rows of more than 16 terms (x1, x2 and K pairs) are summed in several groups of terms.
    for (int64_t K : {1, 2, 5, 9, 14, 15, 33}) {
      FinalizeRoutingV2Tester().mode(mode).topk(K).scales(false).experts(3).capacity(7).hidden(40).seed(K)
          .Test(DType::kFloat32);
      FinalizeRoutingV2Tester().mode(mode).topk(K).scales(true).bias(true).x1(K > 9).x2(K > 14).experts(3).capacity(7)
          .hidden(24).seed(K + 9).Test(DType::kBFloat16);
    }
  }
}

TEST(FinalizeRoutingV2, DropsDuplicatesAndUnreadExpertIdx) {
  uint64_t seed = 50;
  for (int64_t mode : {0, 1, 2, 3}) {
    for (double drop : {0.0, 0.5, 1.0}) {
      for (DType dt : kFloats) {
        FinalizeRoutingV2Tester().mode(mode).drop_rate(drop).bias(true).duplicates(true).seed(seed++).Test(dt);
        FinalizeRoutingV2Tester().mode(mode).drop_rate(drop).bias(false).unread_expert_idx(true).x1(true).seed(seed++)
            .Test(dt);
      }
    }
  }
  // Capacity smaller than the pairs: the pairs past E*C are dropped.
  FinalizeRoutingV2Tester().mode(3).tokens(9).topk(2).experts(2).capacity(3).drop_rate(0).bias(true)
      .Test(DType::kFloat16);
}

TEST(FinalizeRoutingV2, LayoutsAndApis) {
  uint64_t seed = 200;
  for (Layout in : kLayouts) {
    for (Layout out : kLayouts) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        for (int64_t mode : {0, 3}) {
          for (DType dt : kFloats) {
            FinalizeRoutingV2Tester().mode(mode).layout(in, out).api(api).x1(true).x2(true).bias(true).hidden(19)
                .seed(seed++).Test(dt);
          }
        }
      }
    }
  }
}

TEST(FinalizeRoutingV2, EmptyTensors) {
  for (int64_t mode : {0, 1, 2, 3}) {
    for (Api api : {Api::kCpp, Api::kAclnn}) {
      FinalizeRoutingV2Tester().mode(mode).tokens(0).x1(true).bias(true).api(api)
          .Test(DType::kFloat32);           // R = 0
      FinalizeRoutingV2Tester().mode(mode).hidden(0).x1(true).bias(true).api(api)
          .Test(DType::kFloat16);           // H = 0
      FinalizeRoutingV2Tester().mode(mode).topk(0).x1(true).x2(true).api(api)
          .Test(DType::kBFloat16);              // K = 0
      FinalizeRoutingV2Tester().mode(mode).topk(0).scales(false).x2(true).api(api)
          .Test(DType::kFloat32);          // K = 0
      FinalizeRoutingV2Tester().mode(mode).topk(0).scales(false).bias(true).api(api)
          .Test(DType::kFloat32);        // no term
    }
  }
  for (int64_t mode : {1, 3}) {
    FinalizeRoutingV2Tester().mode(mode).capacity(0).x1(true).bias(true).Test(DType::kFloat32);  // every pair dropped
    FinalizeRoutingV2Tester().mode(mode).experts(0).capacity(3).x1(true).Test(DType::kFloat16);
    FinalizeRoutingV2Tester().mode(mode).tokens(0).x1(true).bias(true).Test({DType::kBFloat16, DType::kFloat32});
    FinalizeRoutingV2Tester().mode(mode).topk(0).x1(true).Test({DType::kFloat32, DType::kFloat16});
  }
}

// Outputs of 8 MiB and more take streaming stores on tiles that start a cache line and prefetch the next
// tile: H = 2049 puts rows at every 4-byte offset (and ends in a partial tile), H = 2048 streams every tile.
TEST(FinalizeRoutingV2, LargeOutputsStream) {
  uint64_t seed = 900;
  for (int64_t H : {2048, 2049}) {
    for (DType dt : kFloats) {
      // 2048 rows: 16.8 MB in f32, 8.4 MB in 16-bit types.
      FinalizeRoutingV2Tester().mode(0).tokens(2048).topk(2).hidden(H).experts(16).x1(true).bias(true).seed(seed++)
          .Test(dt);
      FinalizeRoutingV2Tester().mode(3).tokens(2048).topk(2).hidden(H).experts(16).capacity(200).seed(seed++).Test(dt);
    }
  }
  FinalizeRoutingV2Tester().mode(2).tokens(2048).topk(2).hidden(2049).experts(16).bias(true).all_targets(true)
      .seed(seed++).Test(DType::kBFloat16);
}

TEST(FinalizeRoutingV2, BitIdenticalAcrossSimdTargetsAndThreads) {
  // 200 rows of (K + 3) * 300 elements: several tasks per run; H spans tiles with a tail.
  for (int64_t mode : {0, 3}) {
    for (DType dt : kFloats) {
      FinalizeRoutingV2Tester().mode(mode).tokens(200).topk(4).hidden(1031).experts(8).capacity(110).x1(true).x2(true)
          .bias(true).all_targets(true).seed(static_cast<uint64_t>(mode) + 7).Test(dt);
    }
  }
  FinalizeRoutingV2Tester().mode(2).tokens(90).topk(2).hidden(77).layout(Layout::kPadded, Layout::kTransposed)
      .all_targets(true).Test(DType::kBFloat16);
  FinalizeRoutingV2Tester().mode(1).tokens(40).topk(17).hidden(600).experts(6).capacity(120).x1(true).bias(true)
      .all_targets(true).Test(DType::kFloat16);
  // scales in another dtype than the rows.
  FinalizeRoutingV2Tester().mode(0).tokens(200).topk(4).hidden(1031).experts(8).x1(true).bias(true).all_targets(true)
      .seed(11).Test({DType::kBFloat16, DType::kFloat32});
  FinalizeRoutingV2Tester().mode(3).tokens(200).topk(4).hidden(1031).experts(8).capacity(110).x2(true).bias(true)
      .all_targets(true).seed(12).Test({DType::kFloat16, DType::kBFloat16});
  FinalizeRoutingV2Tester().mode(2).tokens(90).topk(2).hidden(77).layout(Layout::kPadded, Layout::kTransposed)
      .all_targets(true).Test({DType::kFloat32, DType::kFloat16});
}

}  // namespace
}  // namespace moegrad::testing
