// MoeFinalizeRoutingV2Grad against the scalar reference (FinalizeRoutingV2GradTester) and against hand-computed values,
// over hidden sizes, modes, optional arguments, dtypes (the tokens' and the weights' apart), layouts, duplicated
// and unwritten rows, empty tensors, SIMD targets and thread counts. docs/ops/finalize_routing_v2_grad.md is the
// contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "acl/acl.h"
#include "moegrad/ops.hpp"
#include "moegrad/plan.hpp"
#include "tests/support/finalize_routing_v2_grad_tester.h"

namespace moegrad::testing {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};

// No scales / scales / scales + bias.
struct Optionals {
  bool scales, bias;
};
constexpr Optionals kOptionals[] = {{false, false}, {true, false}, {true, true}};

// Fills a float tensor from a row-major list of values.
void Fill(TestTensor& t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size(); ++i) t.SetF(static_cast<int64_t>(i), values[i]);
}
void FillI(TestTensor& t, const std::vector<int64_t>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size(); ++i) t.SetI(static_cast<int64_t>(i), values[i]);
}
std::vector<float> Values(const TestTensor& t) {
  std::vector<float> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.GetF(i));
  return out;
}

// Worked by hand from the formulas: R = 2, H = 2, K = 2, gradY = [[1, 2], [3, 4]], scales = [0.5, 2, 0.25, -1],
// bias rows b0 = [1, 0], b1 = [0, 2], expertIdx = [0, 1, 1, 0]. Pair 0 is dropped, pairs 1..3 write row 1.
//   gradExpandedX[1] = 2 * [1, 2] + 0.25 * [3, 4] - 1 * [3, 4] = [-0.25, 1]; the other rows are zero.
//   gradScales = [b0.g0, (x1 + b1).g0, (x1 + b1).g1, (x1 + b0).g1] = [1, 4, 10, 5] with x1 = [2, -1].
// Every value is exact in every dtype: scales and gradScales may be in another dtype than the rest.
void HandComputed(int64_t mode, Layout layout, DTypes d) {
  SCOPED_TRACE(::testing::Message() << "mode " << mode << " " << LayoutName(layout) << " " << DTypesName(d));
  const DType dtype = d.tokens;
  const std::vector<int64_t> rows_shape = mode == 1 ? std::vector<int64_t>{2, 2, 2} : std::vector<int64_t>{3, 2};
  TestTensor grad_y(dtype, {2, 2}, layout, 1), idx(DType::kInt32, {4}, layout, 2), x(dtype, rows_shape, layout, 3);
  TestTensor scales(d.weights, {2, 2}, layout, 4), expert(DType::kInt32, {2, 2}, layout, 5);
  TestTensor bias(dtype, {2, 2}, layout, 6), gx(dtype, rows_shape, layout, 7), gs(d.weights, {2, 2}, layout, 8);
  Fill(grad_y, {1, 2, 3, 4});
  // Mode 0 with activeNum 3: value 3 is dropped. Mode 1: -1 is dropped; the rows are E * C = 4.
  FillI(idx, mode == 1 ? std::vector<int64_t>{-1, 1, 1, 1} : std::vector<int64_t>{3, 1, 1, 1});
  std::vector<float> xv = {1, 1, 2, -1, 0.5f, 0.5f};
  if (mode == 1) xv.insert(xv.end(), {-1, 3});
  Fill(x, xv);
  Fill(scales, {0.5f, 2, 0.25f, -1});
  FillI(expert, {0, 1, 1, 0});
  Fill(bias, {1, 0, 0, 2});

  FinalizeRoutingV2GradArgs a;
  a.grad_y = grad_y;
  a.expanded_row_idx = idx;
  a.expanded_x = x.view();
  a.scales = scales.view();
  a.expert_idx = expert.view();
  a.bias = bias.view();
  a.drop_pad_mode = mode;
  a.active_num = mode == 1 ? 0 : 3;
  a.expert_num = mode == 1 ? 2 : 0;
  a.expert_capacity = mode == 1 ? 2 : 0;
  a.grad_expanded_x = gx;
  a.grad_scales = gs.view();
  ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
  std::vector<float> want_gx = {0, 0, -0.25f, 1, 0, 0};
  if (mode == 1) want_gx.insert(want_gx.end(), {0, 0});
  EXPECT_EQ(Values(gx), want_gx);
  EXPECT_EQ(Values(gs), (std::vector<float>{1, 4, 10, 5}));

  // Without bias: gradScales = [0 (dropped), x1.g0, x1.g1, x1.g1] = [0, 0, 2, 2].
  a.bias.reset();
  ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
  EXPECT_EQ(Values(gx), want_gx);
  EXPECT_EQ(Values(gs), (std::vector<float>{0, 0, 2, 2}));
}

TEST(FinalizeRoutingV2Grad, HandComputed) {
  for (int64_t mode : {0, 1}) {
    for (Layout layout : kLayouts) {
      for (const DTypes& d : kEveryDTypes) HandComputed(mode, layout, d);
    }
  }
}

// Three pairs write row 0 of an fp32 gradExpandedX; ascending pair order is observable in the rounding:
// 1 + 2^-24 + 2^-24 is 1 left to right, but 2^-24 + 2^-24 + 1 = 1 + 2^-23.
TEST(FinalizeRoutingV2Grad, DuplicatesSumInAscendingPairOrder) {
  const float tiny = std::ldexp(1.0f, -24);
  for (bool big_first : {true, false}) {
    TestTensor grad_y(DType::kFloat32, {3, 1}), idx(DType::kInt32, {3}), gx(DType::kFloat32, {3, 1});
    Fill(grad_y, big_first ? std::vector<float>{1, tiny, tiny} : std::vector<float>{tiny, tiny, 1});
    FillI(idx, {0, 0, 0});
    FinalizeRoutingV2GradArgs a;
    a.grad_y = grad_y;
    a.expanded_row_idx = idx;
    a.grad_expanded_x = gx;
    ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
    EXPECT_EQ(gx.GetF(0), big_first ? 1.0f : 1.0f + 2 * tiny);
    EXPECT_EQ(gx.GetF(1), 0.0f);
    EXPECT_EQ(gx.GetF(2), 0.0f);
  }
}

// Weights in a wider dtype than the tokens keep their precision. With tokens of unit roundoff u (2^-8 in bf16,
// 2^-11 in fp16), gradY = expandedX = 1 + 2u and scale 1 + u (fp32; a tie that rounds to 1 in the tokens'
// dtype): gradExpandedX = rne(1 + 3u + 2u^2) = 1 + 4u, where a scale rounded to the tokens' dtype first gives
// 1 + 2u; gradScales = (1 + 2u)^2 = 1 + 4u + 4u^2 exactly in fp32, where a rounding to the tokens' gives 1 + 4u.
TEST(FinalizeRoutingV2Grad, WeightsKeepTheirOwnPrecision) {
  for (const DType tokens : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(tokens));
    const float u = Epsilon(tokens) / 2;
    TestTensor grad_y(tokens, {1, 1}), idx(DType::kInt32, {1}), x(tokens, {1, 1}), scales(DType::kFloat32, {1, 1});
    TestTensor gx(tokens, {1, 1}), gs(DType::kFloat32, {1, 1});
    grad_y.SetF(0, 1 + 2 * u);
    x.SetF(0, 1 + 2 * u);
    scales.SetF(0, 1 + u);
    idx.SetI(0, 0);
    ASSERT_EQ(grad_y.GetF(0), 1 + 2 * u);
    FinalizeRoutingV2GradArgs a;
    a.grad_y = grad_y;
    a.expanded_row_idx = idx;
    a.expanded_x = x.view();
    a.scales = scales.view();
    a.grad_expanded_x = gx;
    a.grad_scales = gs.view();
    ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
    EXPECT_EQ(gx.GetF(0), 1 + 4 * u);
    EXPECT_EQ(gs.GetF(0), 1 + 4 * u + 4 * u * u);
  }
}

TEST(FinalizeRoutingV2Grad, HiddenSizes) {
  int n = 0;
  for (int64_t H : {1, 3, 8, 17, 64, 100, 1031, 7168}) {
    for (DType dtype : kDTypes) {
      for (int64_t mode : {0, 1}) {
        for (const Optionals& o : kOptionals) {
          for (uint64_t seed : {1, 2}) {
            ++n;
            FinalizeRoutingV2GradTester()
                .tokens(H >= 1031 ? 3 : 7).hidden(H).topk(H >= 1031 ? 2 : 3).mode(mode).experts(4).capacity(4)
                .scales(o.scales).bias(o.bias).duplicates(seed == 2).layout(kLayouts[n % 3]).seed(seed * 1000 + n)
                .api(n % 5 == 0 ? Api::kAclnn : Api::kCpp)
                .Test(dtype);
          }
        }
      }
    }
  }
}

// Every (tokens, weights) dtype combination on each kernel path: one writer per row walked token by token
// (contiguous, with and without a column tail) or element by element (strided), rows with several writers,
// drop/pad mode, no scales (gradScalesOut untouched), scales without bias, and the aclnn API.
TEST(FinalizeRoutingV2Grad, EveryDTypeCombination) {
  int n = 0;
  for (const DTypes& d : kEveryDTypes) {
    ++n;
    FinalizeRoutingV2GradTester().tokens(9).hidden(1000).topk(3).mode(0).bias(true).seed(n).Test(d);
    FinalizeRoutingV2GradTester().tokens(9).hidden(256).topk(2).mode(0).seed(n).Test(d);
    FinalizeRoutingV2GradTester().tokens(7).hidden(37).topk(3).mode(0).bias(true).layout(Layout::kPadded).seed(n)
        .Test(d);
    FinalizeRoutingV2GradTester().tokens(7).hidden(1031).topk(3).mode(0).active_num(15).bias(true).duplicates(true)
        .seed(n).Test(d);
    FinalizeRoutingV2GradTester().tokens(6).hidden(100).topk(2).mode(1).experts(3).capacity(3).bias(true)
        .duplicates(true).layout(Layout::kTransposed).seed(n).Test(d);
    FinalizeRoutingV2GradTester().tokens(6).hidden(64).topk(2).mode(1).experts(4).capacity(4).seed(n)
        .api(Api::kAclnn).Test(d);
    FinalizeRoutingV2GradTester().tokens(5).hidden(33).topk(2).scales(false).pass_grad_scales(true)
        .pass_expanded_x(true).seed(n).Test(d);
  }
}

// The model shapes of `moegrad bench` (Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V3: H, E, K), a few tokens each.
TEST(FinalizeRoutingV2Grad, ModelShapes) {
  const struct {
    int64_t H, E, K;
  } models[] = {{2048, 128, 8}, {4096, 8, 2}, {7168, 256, 8}};
  int n = 0;
  for (const auto& m : models) {
    for (DType dtype : kDTypes) {
      ++n;
      FinalizeRoutingV2GradTester().tokens(3).hidden(m.H).topk(m.K).experts(m.E).mode(0).bias(true).seed(n).Test(dtype);
      // Mode 1 with the expert count capped: E * C rows of H are written, most of them zero.
      FinalizeRoutingV2GradTester().tokens(3).hidden(m.H).topk(m.K).experts(std::min<int64_t>(m.E, 16)).capacity(2)
          .mode(1).bias(true).seed(n).Test(dtype);
    }
    // Training's usual mix: bf16 tokens, fp32 routing weights.
    FinalizeRoutingV2GradTester().tokens(3).hidden(m.H).topk(m.K).experts(m.E).mode(0).bias(true).seed(n)
        .Test({DType::kBFloat16, DType::kFloat32});
  }
}

// The correctness sweep once more on every SIMD target this machine runs, in every dtype combination, with
// rows of several writers and (mode 0) of one (determinism across targets is checked separately, byte for byte).
TEST(FinalizeRoutingV2Grad, HiddenSizesEverySimdTarget) {
  const auto targets = ForEachSimdTarget([] {
    int n = 0;
    for (int64_t H : {1, 3, 17, 100, 1031}) {
      for (const DTypes& d : kEveryDTypes) {
        ++n;
        FinalizeRoutingV2GradTester().tokens(5).hidden(H).topk(2).mode(n % 2).bias(true).duplicates(true)
            .layout(n % 3 == 2 ? Layout::kTransposed : Layout::kContiguous).seed(n).Test(d);
        FinalizeRoutingV2GradTester().tokens(5).hidden(H).topk(2).mode(0).bias(n % 2 == 0).seed(n).Test(d);
      }
    }
  });
  std::string names;
  for (const auto& t : targets) names += t + " ";
  std::printf("SIMD targets: %s\n", names.c_str());
}

TEST(FinalizeRoutingV2Grad, DroplessActiveNum) {
  constexpr int64_t R = 6, K = 3;  // R * K = 18
  int n = 0;
  for (int64_t active : {0, 1, 7, 17, 18, 19, 1000}) {
    for (const Optionals& o : kOptionals) {
      for (DType dtype : kDTypes) {
        for (bool dup : {false, true}) {
          ++n;
          FinalizeRoutingV2GradTester().tokens(R).hidden(19).topk(K).mode(0).active_num(active).experts(3)
              .scales(o.scales).bias(o.bias).duplicates(dup).seed(n).Test(dtype);
        }
      }
    }
  }
}

TEST(FinalizeRoutingV2Grad, DropPadCapacities) {
  int n = 0;
  for (int64_t E : {1, 3, 8}) {
    for (int64_t C : {1, 2, 5, 20}) {
      for (const Optionals& o : kOptionals) {
        for (bool dup : {false, true}) {
          ++n;
          FinalizeRoutingV2GradTester().tokens(6).hidden(21).topk(E >= 3 ? 3 : 1).mode(1).experts(E).capacity(C)
              .active_num(n % 4 == 0 ? 5 : 0)  // ignored in mode 1
              .scales(o.scales).bias(o.bias).duplicates(dup).seed(n).Test(kEveryDTypes[n % 9]);
        }
      }
    }
  }
}

TEST(FinalizeRoutingV2Grad, NoScales) {
  int n = 0;
  for (int64_t K : {1, 2, 4}) {
    for (int64_t mode : {0, 1}) {
      for (DType dtype : kDTypes) {
        for (int extras = 0; extras < 8; ++extras) {
          ++n;
          FinalizeRoutingV2GradTester().tokens(5).hidden(33).topk(K).mode(mode).capacity(3).scales(false)
              .pass_expanded_x(extras & 1).pass_grad_scales(extras & 2).pass_expert_idx(extras & 4)
              .duplicates(extras % 3 == 0).layout(kLayouts[n % 3]).seed(n).Test(dtype);
        }
      }
    }
  }
}

TEST(FinalizeRoutingV2Grad, ScalesWithoutBiasButWithExpertIdx) {
  int n = 0;
  for (int64_t mode : {0, 1}) {
    for (DType dtype : kDTypes) {
      ++n;
      FinalizeRoutingV2GradTester().tokens(4).hidden(40).topk(2).mode(mode).scales(true).pass_expert_idx(true)
          .duplicates(true).seed(n).Test(dtype);
    }
  }
}

TEST(FinalizeRoutingV2Grad, Layouts) {
  int n = 0;
  for (Layout in : kLayouts) {
    for (Layout out : kLayouts) {
      for (int64_t mode : {0, 1}) {
        for (DType dtype : kDTypes) {
          for (int64_t H : {5, 35}) {
            ++n;
            FinalizeRoutingV2GradTester().tokens(5).hidden(H).topk(3).mode(mode).active_num(mode == 0 ? 11 : 0)
                .capacity(3).bias(true).duplicates(n % 2 == 0).input_layout(in).output_layout(out)
                .pass_grad_scales(true).seed(n).api(n % 4 == 0 ? Api::kAclnn : Api::kCppPlan).Test(dtype);
          }
        }
      }
    }
  }
}

// Index values drawn independently, and biased towards few rows: many pairs per row, many rows with none.
TEST(FinalizeRoutingV2Grad, DuplicatedAndUnwrittenRows) {
  int n = 0;
  for (int64_t mode : {0, 1}) {
    for (const Optionals& o : kOptionals) {
      for (DType dtype : kDTypes) {
        for (int64_t K : {1, 4}) {
          ++n;
          FinalizeRoutingV2GradTester().tokens(9).hidden(50).topk(K).mode(mode).experts(2).capacity(2)
              .active_num(mode == 0 ? 3 : 0).scales(o.scales).bias(o.bias).duplicates(true).seed(n)
              .Test(dtype);
        }
      }
    }
  }
}

TEST(FinalizeRoutingV2Grad, EmptyTensors) {
  int n = 0;
  for (const DTypes& d : kEveryDTypes) {
    for (const Optionals& o : kOptionals) {
      for (int64_t mode : {0, 1}) {
        for (Api api : {Api::kCpp, Api::kAclnn}) {
          // R = 0 (mode 1 still zeroes its E * C rows), H = 0 (gradScales are empty sums: zero), K = 0.
          ++n;
          FinalizeRoutingV2GradTester().tokens(0).hidden(9).topk(o.scales ? 3 : 0).mode(mode).scales(o.scales)
              .bias(o.bias).seed(n).api(api).Test(d);
          ++n;
          FinalizeRoutingV2GradTester().tokens(4).hidden(0).topk(2).mode(mode).scales(o.scales).bias(o.bias)
              .duplicates(true).seed(n).api(api).Test(d);
          ++n;
          FinalizeRoutingV2GradTester().tokens(4).hidden(6).topk(0).mode(mode).scales(o.scales).bias(o.bias)
              .pass_grad_scales(true).seed(n).api(api).Test(d);
          ++n;
          FinalizeRoutingV2GradTester().tokens(0).hidden(0).topk(0).mode(mode).scales(o.scales).bias(o.bias)
              .seed(n).api(api).Test(d);
          // A single row (E = C = 1, or activeNum 1): most pairs dropped or all writing it.
          ++n;
          FinalizeRoutingV2GradTester().tokens(3).hidden(4).topk(2).mode(mode).experts(1).capacity(1)
              .active_num(mode == 0 ? 1 : 0).scales(o.scales).bias(o.bias).duplicates(true).seed(n).api(api)
              .Test(d);
        }
      }
    }
  }
}

// A random configuration: small sizes, every mode, optional argument, layout, dtype of each group and API.
FinalizeRoutingV2GradTester RandomTester(std::mt19937_64& rng, uint64_t seed, DTypes* dtypes) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const bool scales = pick(0, 3) != 0;
  const int64_t R = pick(0, 4) == 0 ? pick(0, 2) : pick(1, 12);
  const int64_t K = scales ? pick(0, 5) : pick(0, 4);
  const int64_t H = pick(0, 9) == 0 ? pick(60, 200) : pick(0, 40);
  FinalizeRoutingV2GradTester t;
  t.tokens(R).hidden(H).topk(K).mode(pick(0, 1)).experts(pick(1, 6)).capacity(pick(1, 6))
      .active_num(pick(0, 2) == 0 ? 0 : pick(0, R * K + 2))
      .scales(scales).bias(scales && pick(0, 1)).duplicates(pick(0, 1))
      .input_layout(kLayouts[pick(0, 2)]).output_layout(kLayouts[pick(0, 2)])
      .pass_expanded_x(pick(0, 1)).pass_grad_scales(pick(0, 1)).pass_expert_idx(pick(0, 1))
      .api(static_cast<Api>(pick(0, 2))).seed(seed);
  dtypes->tokens = kDTypes[pick(0, 2)];
  dtypes->weights = kDTypes[pick(0, 2)];  // drawn apart: two in three cases mixed
  return t;
}

// Thousands of small random configurations through all three APIs.
TEST(FinalizeRoutingV2Grad, RandomCases) {
  std::mt19937_64 rng(20240611);
  for (int n = 0; n < 10000 && !::testing::Test::HasFailure(); ++n) {  // one configuration's report is enough
    DTypes dtypes;
    RandomTester(rng, 1000 + n, &dtypes).Test(dtypes);
  }
}

TEST(FinalizeRoutingV2Grad, RandomCasesEverySimdTarget) {
  std::mt19937_64 rng(777);
  int n = 0;
  ForEachSimdTarget([&] {
    for (int k = 0; k < 400 && !::testing::Test::HasFailure(); ++k) {
      DTypes dtypes;
      RandomTester(rng, 50000 + ++n, &dtypes).Test(dtypes);
    }
  });
}

// Shapes large enough that both passes (gradExpandedX rows, gradScales pairs) split over 2 and 3 threads
// (a task is given at least 256 KB of rows), on every SIMD target: every byte of every output identical.
TEST(FinalizeRoutingV2Grad, BitIdenticalAcrossSimdTargetsAndThreads) {
  // bf16, H 1031: 63 rows per task; 96 * 4 = 384 rows and pairs.
  FinalizeRoutingV2GradTester().tokens(96).hidden(1031).topk(4).mode(0).bias(true).duplicates(true).seed(1)
      .TestDeterminism(DType::kBFloat16);
  // fp32, H 7168 (a DeepSeek-V3 layer): 4 rows per task.
  FinalizeRoutingV2GradTester().tokens(8).hidden(7168).topk(4).mode(1).experts(8).capacity(5).bias(true).seed(2)
      .TestDeterminism(DType::kFloat32);
  // fp16, H 100, strided rows (the scalar path): 1310 rows per task; 1024 x 3 rows.
  FinalizeRoutingV2GradTester().tokens(1024).hidden(100).topk(3).mode(0).active_num(3000).bias(true).duplicates(true)
      .layout(Layout::kTransposed).seed(3).TestDeterminism(DType::kFloat16);
  // 16-bit rows with one writer per row (the token walk, whose 16-bit loads and stores are written per SIMD
  // target), scales and bias, with (H 1000) and without (H 256) columns past the last full step.
  for (const int64_t hidden : {1000, 256}) {
    for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
      FinalizeRoutingV2GradTester().tokens(160).hidden(hidden).topk(4).mode(0).bias(true).seed(6)
          .TestDeterminism(dtype);
    }
  }
  // About 24 MiB moved: up to 16-24 chunks of tokens, taken by whichever thread is free (ChunkQueue).
  FinalizeRoutingV2GradTester().tokens(256).hidden(2048).topk(4).mode(0).bias(true).seed(7)
      .TestDeterminism(DType::kFloat32);
  FinalizeRoutingV2GradTester().tokens(256).hidden(2048).topk(4).mode(1).experts(8).capacity(120).seed(8)
      .TestDeterminism(DType::kBFloat16);
  // fp32 scales without bias, drop-and-pad (a DeepSeek-V3 layer's mode 1): the token walk that takes each vector
  // pair in turn on some cores (TokenPairStepInTurn).
  FinalizeRoutingV2GradTester().tokens(256).hidden(2048).topk(4).mode(1).experts(8).capacity(120).seed(12)
      .TestDeterminism(DType::kFloat32);
  // More than half of the 2400 rows unwritten (about 5 MiB of zero rows): chunks of them from a second queue.
  FinalizeRoutingV2GradTester().tokens(256).hidden(2048).topk(4).mode(1).experts(8).capacity(300).seed(11)
      .TestDeterminism(DType::kBFloat16);
  // Scales without bias, padded views, realistic (one-to-one) mode 1 layout.
  FinalizeRoutingV2GradTester().tokens(64).hidden(2048).topk(2).mode(1).experts(8).capacity(12).layout(Layout::kPadded)
      .seed(5).TestDeterminism(DType::kBFloat16);
  // No scales, mode 1 with many unwritten rows.
  FinalizeRoutingV2GradTester().tokens(40).hidden(1031).topk(2).mode(1).experts(16).capacity(8).scales(false)
      .seed(4).TestDeterminism(DType::kFloat32);
  // Weights in another dtype than the tokens: the token walk (bf16 rows, fp32 weights) and rows of several
  // writers (fp16 rows, bf16 weights; fp32 rows, fp16 weights).
  FinalizeRoutingV2GradTester().tokens(160).hidden(1000).topk(4).mode(0).bias(true).seed(8)
      .TestDeterminism({DType::kBFloat16, DType::kFloat32});
  FinalizeRoutingV2GradTester().tokens(96).hidden(1031).topk(4).mode(0).bias(true).duplicates(true).seed(9)
      .TestDeterminism({DType::kFloat16, DType::kBFloat16});
  FinalizeRoutingV2GradTester().tokens(8).hidden(7168).topk(4).mode(1).experts(8).capacity(5).bias(true).seed(10)
      .TestDeterminism({DType::kFloat32, DType::kFloat16});
}

// Decode sizes: one or two tokens of DeepSeek-V3 width, where one token is most of the work and threads take
// ranges of pairs instead of tokens (a token's pairs split between threads, each reading its gradY row):
// rows on 64-byte lines (H 7168) and off them (H 7000), both modes, scales and bias, checked against the
// reference on one thread and byte for byte on every target with 1-3 threads.
TEST(FinalizeRoutingV2Grad, FewTokensSplitPairs) {
  int n = 0;
  for (int64_t T : {1, 2}) {
    for (int64_t H : {7168, 7000}) {
      for (const DTypes& d : {DTypes{DType::kBFloat16, DType::kBFloat16}, DTypes{DType::kFloat32, DType::kFloat32},
                              DTypes{DType::kBFloat16, DType::kFloat32}}) {
        ++n;
        FinalizeRoutingV2GradTester().tokens(T).hidden(H).topk(8).experts(64).mode(0).bias(true).seed(n)
            .TestDeterminism(d);
        FinalizeRoutingV2GradTester().tokens(T).hidden(H).topk(8).experts(64).capacity(1).mode(1).bias(true)
            .seed(n).TestDeterminism(d);
      }
    }
  }
}

// gradScales is summed in 16 partial sums (column j into partial j % 16, in column order), folded pairwise
// (partial q + partial q + 8, then q + 4, q + 2, q + 1), on every SIMD target. Rounding exposes the order:
// with terms 2^24 at column c, -2^24 at c + 4 and 1 at c + 8 (c % 16 < 4), the fold gives (2^24 + 1) + -2^24
// = 0 (2^24 + 1 rounds to 2^24), where a left-to-right sum, or partials in another lane order, gives 1. The
// same for the three dtypes (and weights in another dtype than the rows), rows walked whole or in steps with a
// tail, strided rows (padded views, the element-by-element path), with and without bias (the f32 token walk
// without bias takes each vector pair in turn on some cores: TokenPairStepInTurn), and every thread count.
TEST(FinalizeRoutingV2Grad, DotPartialSumsInTheDocumentedOrderOnEveryTarget) {
  for (const DTypes& d : {kEveryDTypes[0], kEveryDTypes[1], kEveryDTypes[2], DTypes{DType::kBFloat16, DType::kFloat32},
                          DTypes{DType::kFloat16, DType::kBFloat16}, DTypes{DType::kFloat32, DType::kFloat16}}) {
    for (const auto& [hidden, layout] : {std::pair{int64_t{256}, Layout::kContiguous},
                                         std::pair{int64_t{200}, Layout::kContiguous},
                                         std::pair{int64_t{200}, Layout::kPadded}}) {
      for (const bool bias : {true, false}) {
        SCOPED_TRACE(DTypesName(d) + " H " + std::to_string(hidden) + " " + LayoutName(layout) +
                     (bias ? " bias" : " no bias"));
        FinalizeRoutingV2GradCase c =
            FinalizeRoutingV2GradTester().tokens(24).hidden(hidden).topk(4).bias(bias).pass_expert_idx(true)
                .layout(layout).seed(7).Build(d);
        // gradY 2^12 everywhere, bias 0; pair i's expandedX row holds 2^12, -2^12 and 2^-12 (terms 2^24, -2^24,
        // 1) at columns c, c + 4, c + 8 with c = 16 * (i % 12) + i % 4 (a column past 128, the 16-bit token step,
        // for i % 12 >= 8), zero elsewhere. All of these are exact in every dtype.
        for (int64_t j = 0; j < c.grad_y->numel(); ++j) c.grad_y->SetF(j, 4096.0f);
        if (c.bias) {
          for (int64_t j = 0; j < c.bias->numel(); ++j) c.bias->SetF(j, 0.0f);
        }
        for (int64_t j = 0; j < c.expanded_x->numel(); ++j) c.expanded_x->SetF(j, 0.0f);
        const int64_t pairs = c.expanded_row_idx->numel();
        for (int64_t i = 0; i < pairs; ++i) {
          const int64_t row = c.expanded_row_idx->GetI(i);
          const int64_t col = 16 * (i % 12) + i % 4;
          c.expanded_x->SetF(row * hidden + col, 4096.0f);
          c.expanded_x->SetF(row * hidden + col + 4, -4096.0f);
          c.expanded_x->SetF(row * hidden + col + 8, 1.0f / 4096.0f);
        }
        const FinalizeRoutingV2GradCase before = c;
        const std::vector<std::string> targets = ForEachSimdTarget([&] {
          for (int threads : {1, 2, 3}) {
            SetNumThreads(threads);
            FinalizeRoutingV2GradCase run = before;
            ASSERT_EQ(AclFinalizeRoutingV2GradCall(run.Call()).Run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
            for (int64_t i = 0; i < pairs; ++i) {
              ASSERT_EQ(run.grad_scales->GetF(i), 0.0f)
                  << "pair " << i << " on " << SimdTarget() << " with " << threads << " threads";
            }
          }
        });
        SetNumThreads(0);
        EXPECT_GE(targets.size(), 1u);
      }
    }
  }
}

// A repeatable executor runs any number of times, re-reading its inputs each time.
TEST(FinalizeRoutingV2Grad, RepeatableExecutorRunsTwice) {
  FinalizeRoutingV2GradCase c = FinalizeRoutingV2GradTester().tokens(6).hidden(24).topk(2).bias(true).seed(9)
      .Build(DType::kBFloat16);
  AclFinalizeRoutingV2GradCall call(c.Call());
  uint64_t ws = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(call.PhaseOne(&ws, &executor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(executor), ACLNN_SUCCESS);
  std::vector<int64_t> workspace((ws + 7) / 8);
  ASSERT_EQ(aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws, executor, nullptr), ACLNN_SUCCESS);
  const auto gx = c.grad_expanded_x->Snapshot();
  const auto gs = c.grad_scales->Snapshot();
  // Doubling gradY doubles both outputs exactly (a power of two scales every product and sum).
  for (int64_t i = 0; i < c.grad_y->numel(); ++i) c.grad_y->SetF(i, 2.0f * c.grad_y->GetF(i));
  const FinalizeRoutingV2GradCase first = c;
  ASSERT_EQ(aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws, executor, nullptr), ACLNN_SUCCESS);
  EXPECT_FALSE(c.grad_expanded_x->SameBytes(gx));
  for (int64_t i = 0; i < c.grad_expanded_x->numel(); ++i) {
    ASSERT_EQ(c.grad_expanded_x->GetF(i), 2.0f * first.grad_expanded_x->GetF(i)) << i;
  }
  for (int64_t i = 0; i < c.grad_scales->numel(); ++i) {
    ASSERT_EQ(c.grad_scales->GetF(i), 2.0f * first.grad_scales->GetF(i)) << i;
  }
  EXPECT_FALSE(c.grad_scales->SameBytes(gs));
  EXPECT_EQ(aclDestroyAclOpExecutor(executor), ACLNN_SUCCESS);
}

}  // namespace
}  // namespace moegrad::testing
