// Every gradient operator is the exact adjoint (transpose) of its forward, checked with nothing but the two
// operators (no reference in between), for random data in every mode and dtype, the routing weights (scales,
// probs and their gradients) in the tokens' dtype or in their own:
//   MoeFinalizeRoutingV2Grad:  <F(x), g> = <x, F^T g>; gradScales[r][k] = d<y, g>/d scales[r][k], measured
//                              from forward calls with one-hot scale columns. Gradient dropPadMode 0 / 1 is the
//                              adjoint of forward mode 2 / 3; forward modes 0 / 1 (expert-major pairs) use it
//                              with the index reordered to token-major.
//   MoeTokenPermuteWithRoutingMapGrad: <P(tokens), g> = <tokens, P^T g>, <permutedProbs, gp> = <probs, probsGrad>.
//   MoeTokenUnpermuteWithRoutingMapGrad: <U(x; D), g> = <x, U^T g> = <D, probsGradOut> on the permute's indices.
//   MoeInitRoutingV2Grad:      <I(x), g> = <x, I^T g> with the forward's expandedRowIdx and the same dropPadMode
//                              and activeNum (active truncation, drops past capacity, the +0 rows of drop/pad).
// Tolerances follow from the dtype: every output element is one fp32 sum of at most M terms rounded once (to its
// own tensor's dtype), so each side of an identity is off by at most (eps(dtype) + (M + 1) * 2^-23) * sum |terms|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// sum_i a[i] * b[i] over the two views' elements in row-major order (same element count), and sum |a[i] b[i]|.
double Dot(const TestTensor& a, const TestTensor& b, double* abs_sum = nullptr) {
  EXPECT_EQ(a.numel(), b.numel());
  double s = 0, m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double p = static_cast<double>(a.GetF(i)) * b.GetF(i);
    s += p;
    m += std::fabs(p);
  }
  if (abs_sum) *abs_sum = m;
  return s;
}

double Bound(DType dtype, int64_t terms) {
  return static_cast<double>(Epsilon(dtype)) + static_cast<double>(terms + 1) * std::ldexp(1.0, -23);
}

// --- combine ------------------------------------------------------------------------------------------------
struct FinalizeRoutingV2Setup {
  int64_t mode, R, K, H, E, C;
  double drop;
  bool scales, duplicates;
  Layout layout;
  uint64_t seed;
};

void CheckFinalizeRoutingV2Adjoint(const FinalizeRoutingV2Setup& s, DTypes dtypes) {
  const DType dt = dtypes.tokens, wt = dtypes.weights;
  SCOPED_TRACE(::testing::Message() << DTypesName(dtypes) << " forward mode " << s.mode << " R=" << s.R << " K=" << s.K
                                    << " H=" << s.H << " scales=" << s.scales << " dup=" << s.duplicates
                                    << " layout=" << LayoutName(s.layout) << " seed=" << s.seed);
  std::mt19937_64 rng(s.seed);
  const bool dp = s.mode == 1 || s.mode == 3;
  const bool expert_major = s.mode == 0 || s.mode == 1;
  const int64_t pairs = s.R * s.K, rows = dp ? s.E * s.C : pairs;
  const Layout L = s.layout;
  TestTensor x = dp ? TestTensor(dt, {s.E, s.C, s.H}, L, 1) : TestTensor(dt, {rows, s.H}, L, 1);
  TestTensor idx(DType::kInt32, {pairs}, L, 2), idx_tm(DType::kInt32, {pairs}, L, 3);
  TestTensor scales(wt, {s.R, s.K}, L, 4), g(dt, {s.R, s.H}, L, 5), y(dt, {s.R, s.H}, L, 6);
  TestTensor gx = dp ? TestTensor(dt, {s.E, s.C, s.H}, L, 7) : TestTensor(dt, {rows, s.H}, L, 7);
  TestTensor gs(wt, {s.R, s.K}, L, 8);
  x.FillUniform(rng);
  g.FillUniform(rng);
  scales.FillUniform(rng);
  // Token-major pair values; a permutation of the rows unless duplicates are wanted.
  std::vector<int64_t> v(static_cast<size_t>(pairs), -1), perm(static_cast<size_t>(rows));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int64_t i = 0; i < pairs; ++i) {
    if (dp && unit(rng) < s.drop) continue;
    if (s.duplicates) v[static_cast<size_t>(i)] = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    else if (i < rows) v[static_cast<size_t>(i)] = perm[static_cast<size_t>(i)];
  }
  int64_t max_writers = 0;
  for (int64_t r = 0; r < rows; ++r) max_writers = std::max<int64_t>(max_writers, std::count(v.begin(), v.end(), r));
  for (int64_t r = 0; r < s.R; ++r) {
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t val = v[static_cast<size_t>(r * s.K + k)];
      idx_tm.SetI(r * s.K + k, val);
      idx.SetI(expert_major ? k * s.R + r : r * s.K + k, val);  // the forward's own layout
    }
  }

  FinalizeRoutingV2Args f;
  f.expanded_x = x;
  f.expanded_row_idx = idx;
  if (s.scales) f.scales = scales.view();
  f.drop_pad_mode = s.mode;
  f.out = y;
  ASSERT_TRUE(FinalizeRoutingV2(f).ok());

  FinalizeRoutingV2GradArgs b;
  b.grad_y = g;
  b.expanded_row_idx = idx_tm;  // forward modes 0 / 1: the expert-major index reordered to token-major
  if (s.scales) {
    b.expanded_x = x.view();
    b.scales = scales.view();
    b.grad_scales = gs.view();
  }
  b.drop_pad_mode = dp ? 1 : 0;  // the adjoint of forward mode 2 / 3 (and, reordered, 0 / 1)
  b.expert_num = dp ? s.E : 0;
  b.expert_capacity = dp ? s.C : 0;
  b.grad_expanded_x = gx;
  const Status st = FinalizeRoutingV2Grad(b);
  ASSERT_TRUE(st.ok()) << st.message();

  // A = sum over (pair, j) of |g s x|: both sides are sums of exactly these products.
  double lhs_abs = 0, rhs_abs = 0;
  const double lhs = Dot(y, g, &lhs_abs);
  const double rhs = Dot(x, gx, &rhs_abs);
  double A = 0;
  for (int64_t r = 0; r < s.R; ++r) {
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t val = v[static_cast<size_t>(r * s.K + k)];
      if (val < 0) continue;
      const double sc = s.scales ? scales.GetF(r * s.K + k) : 1.0;
      for (int64_t j = 0; j < s.H; ++j) A += std::fabs(sc * x.GetF(val * s.H + j) * g.GetF(r * s.H + j));
    }
  }
  const double tol = 2 * Bound(dt, std::max(s.K, max_writers)) * A + 1e-30;
  EXPECT_NEAR(lhs, rhs, tol) << "<F(x), g> vs <x, F^T g>; sum |terms| = " << A;
  if (s.H > 0 && pairs > 0) {
    EXPECT_GT(lhs_abs * rhs_abs, 0.0) << "degenerate data proves nothing";
  }

  if (!s.scales) return;
  // gradScales[r][k] = <y(e_k) - y(0), g>[r]: y(e_k) uses scales with column k one and the rest zero, so the
  // difference in row r is exactly the (x + b) of pair (r, k). x1, x2 and bias are present: x1 and x2 cancel,
  // the bias of a dropped pair does not.
  TestTensor x1(dt, {s.R, s.H}, L, 9), x2(dt, {s.R, s.H}, L, 10), bias(dt, {s.E, s.H}, L, 11);
  TestTensor expert(DType::kInt32, {s.R, s.K}, L, 12), onehot(wt, {s.R, s.K}, L, 13);
  TestTensor y0(dt, {s.R, s.H}, L, 14), yk(dt, {s.R, s.H}, L, 15);
  x1.FillUniform(rng);
  x2.FillUniform(rng);
  bias.FillUniform(rng);
  const int64_t bias_rows = bias.size(0);
  for (int64_t i = 0; i < pairs; ++i) expert.SetI(i, static_cast<int64_t>(rng() % static_cast<uint64_t>(bias_rows)));
  f.x1 = x1.view();
  f.x2 = x2.view();
  f.bias = bias.view();
  f.expert_idx = expert.view();
  f.scales = onehot.view();
  b.bias = bias.view();
  b.expert_idx = expert.view();
  ASSERT_TRUE(FinalizeRoutingV2Grad(b).ok());
  auto forward_with_column = [&](int64_t col, TestTensor* out) {
    for (int64_t i = 0; i < pairs; ++i) onehot.SetF(i, i % s.K == col ? 1.0f : 0.0f);
    f.out = *out;
    ASSERT_TRUE(FinalizeRoutingV2(f).ok());
  };
  forward_with_column(-1, &y0);
  for (int64_t k = 0; k < s.K; ++k) {
    forward_with_column(k, &yk);
    for (int64_t r = 0; r < s.R; ++r) {
      const int64_t val = v[static_cast<size_t>(r * s.K + k)];
      const int64_t e = expert.GetI(r * s.K + k);
      double d = 0, mag = 0;
      for (int64_t j = 0; j < s.H; ++j) {
        const double gj = g.GetF(r * s.H + j);
        d += (static_cast<double>(yk.GetF(r * s.H + j)) - y0.GetF(r * s.H + j)) * gj;
        const double xb = std::fabs(val >= 0 ? x.GetF(val * s.H + j) : 0.0) + std::fabs(bias.GetF(e * s.H + j));
        mag += std::fabs(gj) * (std::fabs(x1.GetF(r * s.H + j)) + std::fabs(x2.GetF(r * s.H + j)) + xb);
      }
      const double got = gs.GetF(r * s.K + k);
      // y sums K + 2 terms per element (rounded to the tokens' dtype); gradScales is an fp32 dot product over H
      // elements, rounded to the weights' dtype.
      EXPECT_NEAR(got, d, 2 * Bound(dt, s.K + 2 + s.H) * mag + Epsilon(wt) * std::fabs(got) + 1e-30)
          << "gradScales[" << r << "][" << k << "]" << (val < 0 ? " (dropped pair)" : "");
    }
  }
}

TEST(Adjoint, FinalizeRoutingV2EveryModeAndDType) {
  uint64_t seed = 1;
  for (int64_t mode : {0, 1, 2, 3}) {
    for (DType dt : kFloats) {
      for (bool scales : {false, true}) {
        CheckFinalizeRoutingV2Adjoint({mode, 7, 3, 37, 4, 5, 0.2, scales, false, Layout::kContiguous, seed++},
                                      {dt, dt});
        CheckFinalizeRoutingV2Adjoint({mode, 6, 2, 19, 3, 3, 0.3, scales, true, Layout::kPadded, seed++}, {dt, dt});
      }
    }
    // The weights in their own dtype: every combination.
    for (const DTypes& d : kEveryDTypes) {
      if (d.tokens == d.weights) continue;
      CheckFinalizeRoutingV2Adjoint({mode, 7, 3, 37, 4, 5, 0.2, true, false, Layout::kContiguous, seed++}, d);
      CheckFinalizeRoutingV2Adjoint({mode, 6, 2, 19, 3, 3, 0.3, true, true, Layout::kPadded, seed++}, d);
    }
    // Vector bodies, tiles and tails; K = 1; an empty hidden size.
    CheckFinalizeRoutingV2Adjoint({mode, 33, 4, 1031, 16, 9, 0.1, true, false, Layout::kContiguous, seed++},
                                  {DType::kFloat32, DType::kFloat32});
    CheckFinalizeRoutingV2Adjoint({mode, 33, 4, 1031, 16, 9, 0.1, true, false, Layout::kContiguous, seed++},
                                  {DType::kBFloat16, DType::kFloat32});
    CheckFinalizeRoutingV2Adjoint({mode, 9, 1, 64, 3, 4, 0.0, true, true, Layout::kTransposed, seed++},
                                  {DType::kBFloat16, DType::kBFloat16});
    CheckFinalizeRoutingV2Adjoint({mode, 9, 1, 64, 3, 4, 0.0, true, true, Layout::kTransposed, seed++},
                                  {DType::kFloat16, DType::kBFloat16});
    CheckFinalizeRoutingV2Adjoint({mode, 5, 2, 0, 3, 4, 0.0, true, false, Layout::kContiguous, seed++},
                                  {DType::kFloat16, DType::kFloat16});
  }
}

// --- dispatch -----------------------------------------------------------------------------------------------
void CheckTokenPermuteWithRoutingMapAdjoint(bool dp, int64_t T, int64_t E, int64_t H, int64_t k_or_c, double density,
                                            DType map_dt, DTypes dtypes, Layout L, uint64_t seed) {
  const DType dt = dtypes.tokens, wt = dtypes.weights;
  SCOPED_TRACE(::testing::Message() << DTypesName(dtypes) << (dp ? " drop-and-pad C=" : " dropless K=") << k_or_c
                                    << " T=" << T << " E=" << E << " H=" << H << " map=" << DTypeName(map_dt)
                                    << " layout=" << LayoutName(L) << " seed=" << seed);
  std::mt19937_64 rng(seed);
  const int64_t N = dp ? E * k_or_c : T * k_or_c;
  TestTensor tokens(dt, {T, H}, L, 1), map(map_dt, {T, E}, L, 2), probs(wt, {T, E}, L, 3);
  TestTensor permuted(dt, {N, H}, L, 4), pprobs(wt, {N}, L, 5), sorted(DType::kInt32, {N}, L, 6);
  TestTensor g(dt, {N, H}, L, 7), gp(wt, {N}, L, 8), tokens_grad(dt, {T, H}, L, 9), probs_grad(wt, {T, E}, L, 10);
  tokens.FillUniform(rng);
  probs.FillUniform(rng, 0.0f, 1.0f);
  g.FillUniform(rng);
  gp.FillUniform(rng);
  const std::vector<uint8_t> routed = RandomRouting(T, E, dp, k_or_c, density, rng);
  for (int64_t i = 0; i < T * E; ++i) {
    map.SetI(i, routed[static_cast<size_t>(i)] ? (map_dt == DType::kInt8 && i % E % 3 == 1 ? -5 : 1) : 0);
  }
  // The forward, then its gradient (tensors in the C signature's order).
  const TestCall<TokenPermuteWithRoutingMapArgs> forward{{&tokens, &map, &probs, &permuted, &pprobs, &sorted},
                                                         {N, dp}};
  Status st = forward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();
  const TestCall<TokenPermuteWithRoutingMapGradArgs> backward{{&g, &gp, &sorted, &map, &tokens_grad, &probs_grad},
                                                              {E, T, dp}};
  st = backward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();

  // A token is copied to at most K (dropless) or E (drop-and-pad) rows: that many terms per tokensGrad element.
  double A = 0;
  const double lhs = Dot(permuted, g, &A);
  const double rhs = Dot(tokens, tokens_grad);
  EXPECT_NEAR(lhs, rhs, 2 * Bound(dt, dp ? E : k_or_c) * A + 1e-30) << "<P(tokens), g> vs <tokens, P^T g>";
  double B = 0;
  const double plhs = Dot(pprobs, gp, &B);
  const double prhs = Dot(probs, probs_grad);
  EXPECT_NEAR(plhs, prhs, 2 * Bound(wt, 1) * B + 1e-30) << "<permutedProbs, gp> vs <probs, probsGrad>";
}

TEST(Adjoint, TokenPermuteWithRoutingMapEveryModeAndDType) {
  uint64_t seed = 500;
  for (const DTypes& dt : kEveryDTypes) {  // the probs in the tokens' dtype, then in their own
    for (DType map_dt : {DType::kInt8, DType::kBool}) {
      CheckTokenPermuteWithRoutingMapAdjoint(false, 11, 6, 37, 2, 0, map_dt, dt, Layout::kContiguous, seed++);
      CheckTokenPermuteWithRoutingMapAdjoint(false, 9, 8, 17, 8, 0, map_dt, dt, Layout::kPadded, seed++);
      CheckTokenPermuteWithRoutingMapAdjoint(true, 11, 6, 37, 4, 0.3, map_dt, dt, Layout::kContiguous, seed++);
      CheckTokenPermuteWithRoutingMapAdjoint(true, 8, 5, 9, 8, 0.6, map_dt, dt, Layout::kTransposed, seed++);
    }
  }
  // Many tokens (several index blocks), long rows; capacity larger than the routed counts (padding rows).
  CheckTokenPermuteWithRoutingMapAdjoint(false, 700, 16, 100, 4, 0, DType::kBool, {DType::kFloat32, DType::kFloat32},
                                         Layout::kContiguous, seed++);
  for (const DType probs : {DType::kBFloat16, DType::kFloat32}) {
    CheckTokenPermuteWithRoutingMapAdjoint(true, 700, 16, 100, 90, 0.1, DType::kInt8, {DType::kBFloat16, probs},
                                           Layout::kContiguous, seed++);
  }
  CheckTokenPermuteWithRoutingMapAdjoint(false, 5, 4, 1, 1, 0, DType::kInt8, {DType::kFloat16, DType::kFloat16},
                                         Layout::kContiguous, seed++);
}

// --- the V2 dispatch ----------------------------------------------------------------------------------------
struct InitRoutingV2Setup {
  int64_t mode, N, K, H, E, C, active;
  bool distinct;  // K distinct experts per token (a top-k routing), else any ids in [0, E) with repeats
  Layout layout;
  uint64_t seed;
};

void CheckInitRoutingV2Adjoint(const InitRoutingV2Setup& s, DType dt) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " mode " << s.mode << " N=" << s.N << " K=" << s.K
                                    << " H=" << s.H << " E=" << s.E << " C=" << s.C << " activeNum=" << s.active
                                    << " distinct=" << s.distinct << " layout=" << LayoutName(s.layout)
                                    << " seed=" << s.seed);
  std::mt19937_64 rng(s.seed);
  const int64_t L = s.N * s.K;
  const int64_t rows = s.mode == 1 ? s.E * s.C : (s.active > 0 && s.active < L ? s.active : L);
  const std::vector<int64_t> rows_shape = s.mode == 1 ? std::vector<int64_t>{s.E, s.C, s.H}
                                                      : std::vector<int64_t>{rows, s.H};
  TestTensor x(dt, {s.N, s.H}, s.layout, 1), idx(DType::kInt32, {s.N, s.K}, s.layout, 2);
  TestTensor expanded(dt, rows_shape, s.layout, 3), row_idx(DType::kInt32, {L}, s.layout, 4);
  TestTensor g(dt, rows_shape, s.layout, 5), out(dt, {s.N, s.H}, s.layout, 6);
  x.FillUniform(rng);
  g.FillUniform(rng);
  std::vector<int32_t> experts(static_cast<size_t>(s.E));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t n = 0; n < s.N; ++n) {
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < s.K; ++k) {
      idx.SetI(n * s.K + k, s.distinct ? experts[static_cast<size_t>(k)]
                                       : static_cast<int32_t>(rng() % static_cast<uint64_t>(s.E)));
    }
  }
  // activeNum, expertCapacity, expertNum, dropPadMode, expertTokensCountOrCumsumFlag, before-capacity flag.
  const TestCall<InitRoutingV2Args> forward{{&x, &idx, &expanded, &row_idx, nullptr, nullptr},
                                            {s.active, s.C, s.E, s.mode, 0, 0}};
  Status st = forward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();
  const TestCall<InitRoutingV2GradArgs> backward{{&g, &row_idx, &out}, {s.K, s.mode, s.active}};
  st = backward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();

  // Each out element is one fp32 sum of at most K terms, rounded once; expandedX is a copy (exact).
  double A = 0;
  const double lhs = Dot(expanded, g, &A);
  const double rhs = Dot(x, out);
  EXPECT_NEAR(lhs, rhs, 2 * Bound(dt, s.K) * A + 1e-30) << "<I(x), g> vs <x, I^T g>";
}

TEST(Adjoint, InitRoutingV2EveryModeAndDType) {
  uint64_t seed = 900;
  for (DType dt : kFloats) {
    // Dropless: every pair; activeNum below, at and above N*K.
    for (int64_t active : {0, 5, 21, 40}) {
      CheckInitRoutingV2Adjoint({0, 7, 3, 37, 5, 0, active, true, Layout::kContiguous, seed++}, dt);
      CheckInitRoutingV2Adjoint({0, 7, 3, 19, 4, 0, active, false, Layout::kPadded, seed++}, dt);
    }
    // Drop/pad: capacity below demand (drops), and above it (+0 rows nothing reads).
    for (int64_t C : {1, 3, 30}) {
      CheckInitRoutingV2Adjoint({1, 9, 2, 37, 4, C, 0, true, Layout::kContiguous, seed++}, dt);
      CheckInitRoutingV2Adjoint({1, 9, 4, 17, 3, C, 7, false, Layout::kTransposed, seed++}, dt);
    }
  }
  // Vector bodies and tails, K = 16, many experts; K = 1; an empty hidden size.
  CheckInitRoutingV2Adjoint({0, 40, 16, 1031, 64, 0, 0, true, Layout::kContiguous, seed++}, DType::kBFloat16);
  CheckInitRoutingV2Adjoint({1, 40, 16, 1031, 64, 6, 0, true, Layout::kContiguous, seed++}, DType::kFloat32);
  CheckInitRoutingV2Adjoint({0, 33, 1, 64, 3, 0, 10, true, Layout::kTransposed, seed++}, DType::kFloat16);
  CheckInitRoutingV2Adjoint({1, 5, 2, 0, 3, 2, 0, false, Layout::kContiguous, seed++}, DType::kFloat32);
}

// --- the routing-map combine ----------------------------------------------------------------------------------
// The permute's sortedIndices (dropless K per token, or drop-and-pad with capacity C) feed the unpermute with
// probs D; its gradient, fed the forward's outIndex and permuteTokenId, must give
//   <Unpermute(x; D), g> = <x, permutedTokensGradOut>  and  <Unpermute(x; D), g> = <D, probsGradOut>
// (the combine is linear in x and in D).
void CheckTokenUnpermuteWithRoutingMapAdjoint(bool pad, int64_t T, int64_t E, int64_t H, int64_t k_or_c,
                                              double density, DTypes dtypes, Layout L, uint64_t seed) {
  const DType dt = dtypes.tokens, wt = dtypes.weights;
  SCOPED_TRACE(::testing::Message() << DTypesName(dtypes) << (pad ? " pad C=" : " dropless K=") << k_or_c
                                    << " T=" << T << " E=" << E << " H=" << H << " layout=" << LayoutName(L)
                                    << " seed=" << seed);
  std::mt19937_64 rng(seed);
  const int64_t N = pad ? E * k_or_c : T * k_or_c;
  TestTensor tokens(dt, {T, H}, L, 1), map(DType::kBool, {T, E}, L, 2), permuted_tokens(dt, {N, H}, L, 3);
  TestTensor sorted(DType::kInt32, {N}, L, 4), x(dt, {N, H}, L, 5), probs(wt, {T, E}, L, 6);
  TestTensor out(dt, {T, H}, L, 7), out_index(DType::kInt32, {N}, L, 8), token_id(DType::kInt32, {N}, L, 9);
  TestTensor pprobs(wt, {N}, L, 10), g(dt, {T, H}, L, 11), x_grad(dt, {N, H}, L, 12), probs_grad(wt, {T, E}, L, 13);
  tokens.FillUniform(rng);
  x.FillUniform(rng);
  probs.FillUniform(rng);
  g.FillUniform(rng);
  const std::vector<uint8_t> routed = RandomRouting(T, E, pad, k_or_c, density, rng);
  for (int64_t i = 0; i < T * E; ++i) map.SetI(i, routed[static_cast<size_t>(i)]);
  // sortedIndices from the permute (tokens, routingMap, probs, permuteTokensOut, permuteProbsOut, sortedIndicesOut).
  const TestCall<TokenPermuteWithRoutingMapArgs> permute{{&tokens, &map, nullptr, &permuted_tokens, nullptr, &sorted},
                                                         {N, pad}};
  Status st = permute.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();
  const TestCall<TokenUnpermuteWithRoutingMapArgs> forward{
      {&x, &sorted, &map, &probs, &out, &out_index, &token_id, &pprobs}, {pad}};
  st = forward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();
  const TestCall<TokenUnpermuteWithRoutingMapGradArgs> backward{
      {&g, &out_index, &token_id, &map, &x, &probs, &x_grad, &probs_grad}, {pad}};
  st = backward.Run(Api::kCpp);
  ASSERT_TRUE(st.ok()) << st.message();

  // A token is the sum of at most K (dropless) or E (pad) terms; a row of x_grad of one term; a probs gradient
  // the dot product of H terms (summed over the rows of one (token, expert): one in the forward's layout).
  double A = 0;
  const double lhs = Dot(out, g, &A);
  const double rhs = Dot(x, x_grad);
  EXPECT_NEAR(lhs, rhs, 2 * Bound(dt, pad ? E : k_or_c) * A + 1e-30) << "<U(x; D), g> vs <x, U^T g>";
  const double prhs = Dot(probs, probs_grad);
  EXPECT_NEAR(lhs, prhs, 2 * (Bound(dt, pad ? E : k_or_c) + Bound(wt, H)) * A + 1e-30)
      << "<U(x; D), g> vs <D, probsGradOut>";
}

TEST(Adjoint, TokenUnpermuteWithRoutingMapEveryModeAndDType) {
  uint64_t seed = 1300;
  for (const DTypes& dt : kEveryDTypes) {  // the probs in the tokens' dtype, then in their own
    CheckTokenUnpermuteWithRoutingMapAdjoint(false, 11, 6, 37, 2, 0, dt, Layout::kContiguous, seed++);
    CheckTokenUnpermuteWithRoutingMapAdjoint(false, 9, 8, 17, 8, 0, dt, Layout::kPadded, seed++);
    CheckTokenUnpermuteWithRoutingMapAdjoint(true, 11, 6, 37, 4, 0.3, dt, Layout::kContiguous, seed++);
    CheckTokenUnpermuteWithRoutingMapAdjoint(true, 8, 5, 9, 8, 0.6, dt, Layout::kTransposed, seed++);
  }
  // Many tokens, long rows (vector bodies and tails); capacity above the routed counts (padding rows).
  CheckTokenUnpermuteWithRoutingMapAdjoint(false, 300, 16, 1031, 4, 0, {DType::kBFloat16, DType::kFloat32},
                                           Layout::kContiguous, seed++);
  CheckTokenUnpermuteWithRoutingMapAdjoint(true, 300, 16, 1031, 40, 0.1, {DType::kFloat32, DType::kFloat32},
                                           Layout::kContiguous, seed++);
  CheckTokenUnpermuteWithRoutingMapAdjoint(false, 5, 4, 1, 1, 0, {DType::kFloat16, DType::kFloat16},
                                           Layout::kContiguous, seed++);
}

}  // namespace
}  // namespace moegrad::testing
