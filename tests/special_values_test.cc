// Non-finite, signed-zero and subnormal inputs: the kernels and the scalar reference agree on every element of
// every operator (which elements are NaN, and every bit of every other element; a NaN's sign and payload are
// not compared), for every mode, dtype, layout and SIMD target. A dropped pair without bias has no term: its
// gradScales is exactly +0 and its scale never reaches the forward's output, whatever gradY and the scale hold.
// Contract: docs/ops/finalize_routing_v2_grad.md, docs/ops/finalize_routing_v2.md ("Non-finite values").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/test_tensor.h"
#include "tools/moegrad/common/check_cases.h"
#include "tools/moegrad/common/problems.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace moegrad::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// `cases` random cases of every operator with `specials` in every float input, on every SIMD target: each result
// matches the reference (tool::VerifyRun, as `moegrad check` verifies: NaN-ness, bits, and the documented
// dot-product bound), unwritten outputs and bytes outside the views stay untouched.
void RandomCasesAgree(tool::SpecialValues specials, int cases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> targets = ForEachSimdTarget([&] {
    for (const tool::CheckOp& op : tool::CheckOps()) {
      for (int n = 0; n < cases && !::testing::Test::HasFailure(); ++n) {
        tool::CheckCase k = op.random_case_with(rng, specials);
        tool::Problem& p = *k.problem;
        const std::vector<std::vector<uint8_t>> before = tool::SnapshotOutputs(p);
        EXPECT_EQ(tool::VerifyRun(p, p.Call(), before), "") << k.description;
      }
    }
  });
  EXPECT_GE(targets.size(), 1u);
}

TEST(SpecialValues, InfNaNSignedZeroSubnormalAgreeWithReferenceInEveryOperator) {
  RandomCasesAgree(tool::SpecialValues::kAll, 600, 16001);
}

// Outputs that only move elements keep their NaNs' bits: every output of MoeInitRoutingV2 and
// MoeTokenPermuteWithRoutingMap, the probsGrad of MoeTokenPermuteWithRoutingMapGrad (a copy when dropless) and
// the permuteProbs of MoeTokenUnpermuteWithRoutingMap.
bool CopiesElements(const std::string& op, const std::string& output) {
  return op == "MoeInitRoutingV2" || op == "MoeTokenPermuteWithRoutingMap" ||
         (op == "MoeTokenPermuteWithRoutingMapGrad" && output.find("robs") != std::string::npos) ||
         (op == "MoeTokenUnpermuteWithRoutingMap" && output == "permuteProbs");
}

// NaNs with every sign and payload among the inputs, with tiny values whose products underflow (so that a walk
// changes its product form, underflow_watch.h, wherever its share of the work has one): every output is the
// same bytes, NaNs included, for 1, 2 and 3 threads and on every SIMD target, and every NaN of an arithmetic
// result is the one NaN (0xFFC00000, bf16 0xFFC0, fp16 0xFE00; docs/guarantees.md section 5).
TEST(SpecialValues, EveryNaNHasTheSameBitsForEveryThreadCountAndTarget) {
  std::vector<std::vector<std::vector<uint8_t>>> first;  // per case, per output
  size_t run = 0;
  int nan_outputs = 0;
  ForEachThreadCountAndSimdTarget([&](int threads) {
    std::mt19937_64 rng(16003);
    size_t index = 0;
    for (const tool::CheckOp& op : tool::CheckOps()) {
      for (int n = 0; n < 40 && !::testing::Test::HasFailure(); ++n, ++index) {
        tool::CheckCase k = op.random_case_with(rng, tool::SpecialValues::kAll);
        tool::Problem& p = *k.problem;
        const std::vector<std::vector<uint8_t>> before = tool::SnapshotOutputs(p);
        ASSERT_EQ(tool::VerifyRun(p, p.Call(), before), "") << k.description;
        const std::vector<std::vector<uint8_t>> after = tool::SnapshotOutputs(p);
        for (size_t i = 0; i < after.size(); ++i) {
          const tool::HostTensor& out = *p.outputs()[i].actual;
          const std::string& name = p.outputs()[i].name;
          if (!p.outputs()[i].written) continue;  // an optional output the call leaves as it was
          if (!CopiesElements(op.op, name)) {
            EXPECT_EQ(out.OtherNaNs(), 0) << op.op << " " << name << ", " << k.description;
          }
          const DType t = out.dtype();
          if (run == 0 && (t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16)) {
            for (int64_t e = 0; e < out.numel(); ++e) nan_outputs += std::isnan(out.GetF(e)) ? 1 : 0;
          }
        }
        if (run == 0) {
          first.push_back(after);
        } else {
          ASSERT_LT(index, first.size());
          for (size_t i = 0; i < after.size(); ++i) {
            EXPECT_TRUE(after[i] == first[index][i])
                << op.op << " " << p.outputs()[i].name << " differs with " << threads << " threads, "
                << k.description;
          }
        }
      }
    }
    ++run;
  });
  EXPECT_GT(nan_outputs, 1000);  // the cases do produce NaNs
}

TEST(SpecialValues, SignedZeroAndSubnormalAgreeWithReferenceInEveryOperator) {
  RandomCasesAgree(tool::SpecialValues::kFinite, 300, 16002);
}

// The comparison itself: a finite value never matches NaN or an infinity, whatever the tolerance.
TEST(SpecialValues, ComparisonTellsNaNAndInfinityApart) {
  tool::FinalizeRoutingV2GradConfig c;
  c.shape = {2, 8, 2, 2, 2};
  tool::CheckCase k{tool::MakeProblem(c), "control"};
  tool::Problem& p = *k.problem;
  ASSERT_TRUE(p.Call().ok());
  p.RunReference();
  std::string message;
  ASSERT_TRUE(tool::CompareOutputs(p, 0, &message)) << message;
  tool::OutputPair& scales = p.outputs()[1];  // carries a tolerance
  ASSERT_TRUE(scales.tolerance);
  for (const float bad : {kNaN, kInf, -kInf}) {
    const float keep = scales.actual->GetF(0);
    scales.actual->SetF(0, bad);
    EXPECT_FALSE(tool::CompareOutputs(p, 0, &message)) << bad;
    scales.expected.SetF(0, bad == kNaN ? -kNaN : bad);  // NaN vs NaN of the other sign: a match
    EXPECT_TRUE(tool::CompareOutputs(p, 0, &message)) << bad << ": " << message;
    scales.actual->SetF(0, keep);
    scales.expected.SetF(0, keep);
  }
  scales.actual->SetF(0, kInf);
  scales.expected.SetF(0, -kInf);
  EXPECT_FALSE(tool::CompareOutputs(p, 0, &message));
}

// MoeFinalizeRoutingV2Grad, R 1, K 2, H 3, drop/pad (E 1, C 1): pair 0 dropped, pair 1 reads row 0.
struct GradCase {
  TestTensor grad_y{DType::kFloat32, {1, 3}}, idx{DType::kInt32, {2}}, x{DType::kFloat32, {1, 1, 3}};
  TestTensor scales{DType::kFloat32, {1, 2}}, expert{DType::kInt32, {1, 2}}, bias{DType::kFloat32, {1, 3}};
  TestTensor grad_x{DType::kFloat32, {1, 1, 3}}, grad_scales{DType::kFloat32, {1, 2}};
  bool with_bias = false;

  FinalizeRoutingV2GradArgs Args() {
    FinalizeRoutingV2GradArgs a;
    a.grad_y = grad_y;
    a.expanded_row_idx = idx;
    a.expanded_x = x;
    a.scales = scales;
    if (with_bias) {
      a.expert_idx = expert;
      a.bias = bias;
    }
    a.drop_pad_mode = 1;
    a.expert_num = 1;
    a.expert_capacity = 1;
    a.grad_expanded_x = grad_x;
    a.grad_scales = grad_scales;
    return a;
  }
};

// Runs the kernels (C++ API, every SIMD target) and the reference on the case; returns the gradScales bits of
// each, kernels first.
std::vector<std::vector<uint32_t>> GradScalesBits(GradCase& g) {
  std::vector<std::vector<uint32_t>> bits;
  ForEachSimdTarget([&] {
    EXPECT_TRUE(FinalizeRoutingV2Grad(g.Args()).ok());
    bits.push_back({ElementBits(g.grad_scales, 0), ElementBits(g.grad_scales, 1)});
  });
  ref::FinalizeRoutingV2Grad(g.Args());
  bits.push_back({ElementBits(g.grad_scales, 0), ElementBits(g.grad_scales, 1)});
  return bits;
}

TEST(SpecialValues, DroppedPairWithoutBiasHasGradScalesPlusZero) {
  for (const float g0 : {kInf, -kInf, kNaN}) {
    GradCase g;
    g.idx.SetI(0, -1);
    g.idx.SetI(1, 0);
    for (int j = 0; j < 3; ++j) {
      g.grad_y.SetF(j, j == 0 ? g0 : 0.5f);
      g.x.SetF(j, 1.0f);
    }
    g.scales.SetF(0, 0.25f);
    g.scales.SetF(1, 2.0f);
    for (const auto& b : GradScalesBits(g)) {
      EXPECT_EQ(b[0], 0u) << g0;  // +0: no 0 * Inf
      float kept;
      std::memcpy(&kept, &b[1], 4);
      EXPECT_TRUE(std::isnan(kept) || std::isinf(kept)) << g0;  // the kept pair follows IEEE: 1 * g0 + 1
      if (!std::isnan(g0)) {
        EXPECT_EQ(kept, g0) << g0;
      } else {
        EXPECT_TRUE(std::isnan(kept));
      }
    }
  }
}

TEST(SpecialValues, DroppedPairWithBiasFollowsIEEE) {
  GradCase g;
  g.with_bias = true;
  g.idx.SetI(0, -1);
  g.idx.SetI(1, 0);
  g.expert.SetI(0, 0);
  g.expert.SetI(1, 0);
  for (int j = 0; j < 3; ++j) {
    g.grad_y.SetF(j, j == 0 ? kInf : 1.0f);
    g.x.SetF(j, 1.0f);
    g.bias.SetF(j, j == 0 ? 0.0f : 1.0f);  // b . gradY = 0 * Inf + 1 + 1 = NaN
  }
  for (const auto& b : GradScalesBits(g)) {
    float dropped;
    std::memcpy(&dropped, &b[0], 4);
    EXPECT_TRUE(std::isnan(dropped));
  }
}

// MoeFinalizeRoutingV2 mode 3 (token-major, drop/pad), R 1, K 2, H 2: pair 0 dropped with an Inf or NaN scale,
// pair 1 reads row 0. Without bias the dropped pair's scale does not reach out.
TEST(SpecialValues, DroppedPairScaleDoesNotReachForwardOutput) {
  for (const float s0 : {kInf, -kInf, kNaN}) {
    TestTensor x(DType::kFloat32, {1, 1, 2}), idx(DType::kInt32, {2}), scales(DType::kFloat32, {1, 2});
    TestTensor x1(DType::kFloat32, {1, 2}), out(DType::kFloat32, {1, 2}), want(DType::kFloat32, {1, 2});
    idx.SetI(0, -1);
    idx.SetI(1, 0);
    scales.SetF(0, s0);
    scales.SetF(1, 0.5f);
    for (int j = 0; j < 2; ++j) {
      x.SetF(j, 2.0f + j);
      x1.SetF(j, -0.0f);
    }
    auto args = [&](const TestTensor& o) {
      FinalizeRoutingV2Args a;
      a.expanded_x = x;
      a.expanded_row_idx = idx;
      a.x1 = x1;
      a.scales = scales;
      a.drop_pad_mode = 3;
      a.out = o;
      return a;
    };
    ref::FinalizeRoutingV2(args(want));
    ForEachSimdTarget([&] {
      ASSERT_TRUE(FinalizeRoutingV2(args(out)).ok());
      for (int j = 0; j < 2; ++j) {
        EXPECT_EQ(out.GetF(j), 0.5f * (2.0f + j)) << s0;  // -0 + 0.5 * x
        EXPECT_EQ(ElementBits(out, j), ElementBits(want, j)) << s0;
      }
    });
  }
}

// Signed zeros and subnormals are values like any other: a single product keeps its sign and a subnormal result
// is not flushed, in the kernels as in the reference.
TEST(SpecialValues, SignedZeroAndSubnormalResultsAreExact) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  TestTensor g(DType::kFloat32, {1, 4}), idx(DType::kInt32, {1}), x(DType::kFloat32, {1, 4});
  TestTensor scales(DType::kFloat32, {1, 1});
  TestTensor gx(DType::kFloat32, {1, 4}), gs(DType::kFloat32, {1, 1});
  idx.SetI(0, 0);
  const float gv[] = {-0.0f, tiny, -tiny * 8, 0.0f};
  for (int j = 0; j < 4; ++j) {
    g.SetF(j, gv[j]);
    x.SetF(j, 0.0f);
  }
  x.SetF(1, 0.5f);  // tiny * 0.5 rounds to nearest even: 0 (half of the smallest subnormal is a tie)
  scales.SetF(0, 1.0f);
  FinalizeRoutingV2GradArgs a;
  a.grad_y = g;
  a.expanded_row_idx = idx;
  a.expanded_x = x;
  a.scales = scales;
  a.grad_expanded_x = gx;
  a.grad_scales = gs;
  auto check = [&](const char* who) {
    EXPECT_EQ(ElementBits(gx, 0), 0x80000000u) << who;  // -0 * 1 = -0
    EXPECT_EQ(gx.GetF(1), tiny) << who;
    EXPECT_EQ(gx.GetF(2), -tiny * 8) << who;
    EXPECT_EQ(ElementBits(gx, 3), 0u) << who;
    EXPECT_EQ(ElementBits(gs, 0), 0u) << who;  // every term is a signed zero: their sum from +0 is +0
  };
  ForEachSimdTarget([&] {
    ASSERT_TRUE(FinalizeRoutingV2Grad(a).ok());
    check("kernels");
  });
  ref::FinalizeRoutingV2Grad(a);
  check("reference");
}

// --- underflowing products ----------------------------------------------------------------------------------
// The gradients' scale-and-dot loops multiply with hn::Mul, the forward walks of weighted rows with the FMA
// form, until a product underflows, then with MulNoAssist, which keeps subnormals out of
// every float multiply (src/backend/cpu/kernels/underflow_watch.h): tiny values switch at the first token,
// mixed ones within the first groups, so each call below runs both forms. The results are the reference's, bit
// for bit (gradScales and the probability gradients within the documented dot bound), on every SIMD target,
// whole token steps and a tail, every token/weight dtype pair that can underflow, both modes.
template <typename Config>
void UnderflowingCasesAgree(Config c, const char* name) {
  const std::pair<DType, DType> dtypes[] = {{DType::kFloat32, DType::kFloat32},
                                            {DType::kBFloat16, DType::kBFloat16},
                                            {DType::kBFloat16, DType::kFloat32},
                                            {DType::kFloat16, DType::kFloat16},
                                            {DType::kFloat16, DType::kFloat32}};
  int runs = 0;
  ForEachSimdTarget([&] {
    for (const tool::InputValues values : {tool::InputValues::kTiny, tool::InputValues::kMixed}) {
      for (const auto& [tokens, weights] : dtypes) {
        for (const int64_t hidden : {int64_t{512}, int64_t{3 * 128 + 40}}) {
          for (const bool drop_pad : {false, true}) {
            c.shape = {40, hidden, 16, 4, drop_pad ? 12 : 0};
            c.dtype = tokens;
            c.weight_dtype = weights;
            c.values = values;
            c.seed = static_cast<uint64_t>(runs) + 1;
            if constexpr (std::is_same_v<Config, tool::FinalizeRoutingV2GradConfig>) {
              c.mode = drop_pad ? 1 : 0;
              c.bias = !drop_pad;
            } else if constexpr (std::is_same_v<Config, tool::FinalizeRoutingV2Config>) {
              c.mode = drop_pad ? 3 : 2;
              c.bias = !drop_pad;
              c.x1 = drop_pad;  // an unscaled term before the pairs
            } else if constexpr (std::is_same_v<Config, tool::TokenUnpermuteWithRoutingMapConfig>) {
              c.padded_mode = drop_pad;
            } else {
              c.drop_and_pad = drop_pad;
            }
            std::unique_ptr<tool::Problem> p = tool::MakeProblem(c);
            const std::vector<std::vector<uint8_t>> before = tool::SnapshotOutputs(*p);
            EXPECT_EQ(tool::VerifyRun(*p, p->Call(), before), "")
                << name << " " << tool::InputValuesName(values) << " " << DTypeName(tokens) << "+"
                << DTypeName(weights) << " H " << hidden << (drop_pad ? " drop-pad" : " dropless");
            ++runs;
          }
        }
      }
    }
  });
  EXPECT_GE(runs, 40);
}

TEST(SpecialValues, UnderflowingProductsAgreeWithReferenceInFinalizeRoutingV2Grad) {
  UnderflowingCasesAgree(tool::FinalizeRoutingV2GradConfig{}, "MoeFinalizeRoutingV2Grad");
}

TEST(SpecialValues, UnderflowingProductsAgreeWithReferenceInTokenUnpermuteWithRoutingMapGrad) {
  UnderflowingCasesAgree(tool::TokenUnpermuteWithRoutingMapGradConfig{}, "MoeTokenUnpermuteWithRoutingMapGrad");
}

TEST(SpecialValues, UnderflowingProductsAgreeWithReferenceInFinalizeRoutingV2) {
  UnderflowingCasesAgree(tool::FinalizeRoutingV2Config{}, "MoeFinalizeRoutingV2");
}

TEST(SpecialValues, UnderflowingProductsAgreeWithReferenceInTokenUnpermuteWithRoutingMap) {
  UnderflowingCasesAgree(tool::TokenUnpermuteWithRoutingMapConfig{}, "MoeTokenUnpermuteWithRoutingMap");
}

// MoeFinalizeRoutingV2Grad in bf16 with a bias table of 256 KiB or more takes the FMA form from its first token
// on (FmaFromTheStart in src/backend/cpu/kernels/row_ops_scale_dot-inl.h), for ordinary values too: the
// results are the reference's for ordinary, tiny and mixed values, both weight dtypes, on every SIMD target,
// whole token steps and a tail (the tables above are smaller, so those calls switch midway).
TEST(SpecialValues, LargeBiasTableInBFloat16AgreesWithReferenceInFinalizeRoutingV2Grad) {
  int runs = 0;
  ForEachSimdTarget([&] {
    for (const tool::InputValues values :
         {tool::InputValues::kNormal, tool::InputValues::kTiny, tool::InputValues::kMixed}) {
      for (const DType weights : {DType::kBFloat16, DType::kFloat32}) {
        tool::FinalizeRoutingV2GradConfig c;
        c.shape = {12, 1024 + 40, 128, 4, 0};  // bias (128, 1064) bf16: 266 KiB
        c.dtype = DType::kBFloat16;
        c.weight_dtype = weights;
        c.bias = true;
        c.values = values;
        c.seed = static_cast<uint64_t>(runs) + 1;
        std::unique_ptr<tool::Problem> p = tool::MakeProblem(c);
        const std::vector<std::vector<uint8_t>> before = tool::SnapshotOutputs(*p);
        EXPECT_EQ(tool::VerifyRun(*p, p->Call(), before), "")
            << tool::InputValuesName(values) << " bf16+" << DTypeName(weights);
        ++runs;
      }
    }
  });
  EXPECT_GE(runs, 6);
}

#if defined(__x86_64__) || defined(__i386__)
// The underflow watch leaves the calling thread's MXCSR as the arithmetic alone would: a flag set before the
// call stays set, a clear one stays clear on ordinary values and is set by underflowing ones; the control
// bits (rounding, masks, FTZ/DAZ) never change.
TEST(SpecialValues, UnderflowWatchKeepsTheCallersFloatingPointFlags) {
  constexpr unsigned kUnderflow = 0x10u, kDenormal = 0x2u, kFlags = 0x3Fu;
  const unsigned saved = _mm_getcsr();
  auto run = [](tool::InputValues values) {
    tool::FinalizeRoutingV2GradConfig c;
    c.shape = {16, 512, 8, 4, 0};
    c.dtype = DType::kBFloat16;
    c.bias = true;
    c.values = values;
    std::unique_ptr<tool::Problem> p = tool::MakeProblem(c);
    return p;
  };
  std::unique_ptr<tool::Problem> normal = run(tool::InputValues::kNormal);
  std::unique_ptr<tool::Problem> tiny = run(tool::InputValues::kTiny);

  _mm_setcsr((saved & ~kFlags) | kUnderflow | kDenormal);
  ASSERT_TRUE(normal->Call().ok());
  const unsigned after_set = _mm_getcsr();
  _mm_setcsr(saved & ~kFlags);
  ASSERT_TRUE(normal->Call().ok());
  const unsigned after_clear = _mm_getcsr();
  _mm_setcsr(saved & ~kFlags);
  ASSERT_TRUE(tiny->Call().ok());
  const unsigned after_tiny = _mm_getcsr();
  _mm_setcsr(saved);

  EXPECT_EQ(after_set & (kUnderflow | kDenormal), kUnderflow | kDenormal);
  EXPECT_EQ(after_clear & (kUnderflow | kDenormal), 0u);
  EXPECT_EQ(after_set & ~kFlags, saved & ~kFlags);
  EXPECT_EQ(after_clear & ~kFlags, saved & ~kFlags);
  EXPECT_EQ(after_tiny & ~kFlags, saved & ~kFlags);
}
#endif

}  // namespace
}  // namespace moegrad::testing
