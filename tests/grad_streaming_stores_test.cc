// The gradient operators write large outputs (1 MiB or more, in a call that moves 8 MiB or more) with
// streaming (non-temporal) stores, and only rows that start a cache line; the rest take ordinary stores. These
// cases are that large, with H = 2049 so that successive rows start at every offset within a line (wherever
// the storage begins), and must match the reference bit for bit on every SIMD target and thread count, rows
// nobody writes included.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/finalize_routing_v2_grad_tester.h"
#include "tests/support/test_tensor.h"

namespace moegrad {
namespace {

using testing::ElementBits;
using testing::FinalizeRoutingV2GradTester;
using testing::TestTensor;

constexpr int64_t kHidden = 2049;  // rows of 8196 (f32) or 4098 (16-bit) bytes: every offset within a line

TEST(GradStreamingStores, FinalizeRoutingV2GradDropless) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    // 2048 rows of gradExpandedX: 16.8 MB in f32, 8.4 MB in 16-bit types.
    FinalizeRoutingV2GradTester().tokens(256).topk(8).hidden(kHidden).mode(0).bias(true).experts(64).seed(3)
        .TestDeterminism(dtype);
  }
}

TEST(GradStreamingStores, FinalizeRoutingV2GradDropPadWithUnwrittenRows) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // 64 experts x 40 slots for 2048 pairs: some experts overflow (dropped pairs), others leave zero rows.
    FinalizeRoutingV2GradTester().tokens(256).topk(8).hidden(kHidden).mode(1).experts(64).capacity(40).seed(4)
        .TestDeterminism(dtype);
  }
}

TEST(GradStreamingStores, FinalizeRoutingV2GradDuplicatesTakeTheGeneralPath) {
  FinalizeRoutingV2GradTester().tokens(256).topk(8).hidden(kHidden).mode(0).duplicates(true).seed(5)
      .TestDeterminism(DType::kBFloat16);
}

// Permute grad: tokensGrad of T = 2048 rows (8.4 MB in 16-bit types), dropless or drop-and-pad.
void CheckTokenPermuteWithRoutingMapGrad(DType dtype, bool drop_and_pad, uint64_t seed) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + (drop_and_pad ? " drop-and-pad" : " dropless"));
  const int64_t T = 2048, E = 16, K = 2, C = 256;
  const int64_t N = drop_and_pad ? E * C : T * K;
  std::mt19937_64 rng(seed);
  TestTensor grad(dtype, {N, kHidden}, testing::Layout::kContiguous, seed);
  grad.FillUniform(rng);
  TestTensor probs_in(dtype, {N}, testing::Layout::kContiguous, seed + 1);
  probs_in.FillUniform(rng);
  TestTensor idx(DType::kInt32, {N}, testing::Layout::kContiguous, seed + 2);
  TestTensor map(DType::kInt8, {T, E}, testing::Layout::kContiguous, seed + 3);
  // K distinct experts per token; dropless rows are a permutation, drop-and-pad rows name any token.
  std::vector<int64_t> experts(E);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t e = 0; e < E; ++e) map.SetI(t * E + e, 0);
    for (int64_t k = 0; k < K; ++k) map.SetI(t * E + experts[k], 1);
  }
  std::vector<int64_t> rows(N);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (int64_t p = 0; p < N; ++p) idx.SetI(p, drop_and_pad ? static_cast<int64_t>(rng() % T) : rows[p]);

  TestTensor want_tokens(dtype, {T, kHidden}, testing::Layout::kContiguous, seed + 4);
  TestTensor want_probs(dtype, {T, E}, testing::Layout::kContiguous, seed + 5);
  const TestTensor tokens_before = want_tokens, probs_before = want_probs;
  // The call writing `tokens` and `probs` (its tensors in the C signature's order).
  auto call = [&](TestTensor& tokens, TestTensor& probs) {
    return testing::TestCall<TokenPermuteWithRoutingMapGradArgs>{{&grad, &probs_in, &idx, &map, &tokens, &probs},
                                                                 {E, T, drop_and_pad}};
  };
  ref::TokenPermuteWithRoutingMapGrad(call(want_tokens, want_probs).CppArgs());

  testing::ForEachThreadCountAndSimdTarget([&](int threads) {
    const std::string run = std::string(SimdTarget()) + " x " + std::to_string(threads) + " threads";
    TestTensor tokens = tokens_before, probs = probs_before;
    const Status s = call(tokens, probs).Run(testing::Api::kCpp);
    ASSERT_TRUE(s.ok()) << s.message() << " " << run;
    int64_t bad = -1;
    for (int64_t i = 0; i < tokens.numel() && bad < 0; ++i) {
      if (ElementBits(tokens, i) != ElementBits(want_tokens, i)) bad = i;
    }
    EXPECT_EQ(bad, -1) << "tokensGrad element " << bad << " differs from the reference on " << run;
    for (int64_t i = 0; i < probs.numel(); ++i) {
      ASSERT_EQ(ElementBits(probs, i), ElementBits(want_probs, i)) << "probsGrad element " << i << " " << run;
    }
    EXPECT_TRUE(tokens.OutsideViewUnchanged(tokens_before.Snapshot())) << run;
  });
}

TEST(GradStreamingStores, TokenPermuteWithRoutingMapGradDropless) {
  CheckTokenPermuteWithRoutingMapGrad(DType::kFloat32, false, 11);
  CheckTokenPermuteWithRoutingMapGrad(DType::kBFloat16, false, 12);
}

TEST(GradStreamingStores, TokenPermuteWithRoutingMapGradDropAndPad) {
  CheckTokenPermuteWithRoutingMapGrad(DType::kFloat32, true, 13);
  CheckTokenPermuteWithRoutingMapGrad(DType::kFloat16, true, 14);
}

// Init-routing grad: out of N = 2048 rows (8.4 MB in 16-bit types). Mode 0 with activeNum below L (pairs reading
// rows past it skipped), mode 1 with drops (experts past their capacity), each pair's row as the forward gives it.
void CheckInitRoutingV2Grad(DType dtype, int64_t mode, uint64_t seed) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + " dropPadMode " + std::to_string(mode));
  const int64_t N = 2048, K = 2, E = 16, C = 200, L = N * K, active = L - 500;
  std::mt19937_64 rng(seed);
  TestTensor grad = mode == 1 ? TestTensor(dtype, {E, C, kHidden}, testing::Layout::kContiguous, seed)
                              : TestTensor(dtype, {active, kHidden}, testing::Layout::kContiguous, seed);
  grad.FillUniform(rng);
  TestTensor idx(DType::kInt32, {L}, testing::Layout::kContiguous, seed + 1);
  std::vector<int64_t> rows(L), taken(E, 0);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (int64_t p = 0; p < L; ++p) {
    const int64_t e = static_cast<int64_t>(rng() % E);
    idx.SetI(p, mode == 0 ? rows[p] : taken[e] < C ? e * C + taken[e] : -1);
    ++taken[e];
  }
  TestTensor want(dtype, {N, kHidden}, testing::Layout::kContiguous, seed + 2);
  const TestTensor before = want;
  auto call = [&](TestTensor& out) {
    return testing::TestCall<InitRoutingV2GradArgs>{{&grad, &idx, &out}, {K, mode, mode == 0 ? active : 0}};
  };
  ref::InitRoutingV2Grad(call(want).CppArgs());

  testing::ForEachThreadCountAndSimdTarget([&](int threads) {
    const std::string run = std::string(SimdTarget()) + " x " + std::to_string(threads) + " threads";
    TestTensor out = before;
    const Status s = call(out).Run(testing::Api::kCpp);
    ASSERT_TRUE(s.ok()) << s.message() << " " << run;
    int64_t bad = -1;
    for (int64_t i = 0; i < out.numel() && bad < 0; ++i) {
      if (ElementBits(out, i) != ElementBits(want, i)) bad = i;
    }
    EXPECT_EQ(bad, -1) << "out element " << bad << " differs from the reference on " << run;
    EXPECT_TRUE(out.OutsideViewUnchanged(before.Snapshot())) << run;
  });
}

TEST(GradStreamingStores, InitRoutingV2GradDroplessWithActiveNum) {
  CheckInitRoutingV2Grad(DType::kFloat32, 0, 21);
  CheckInitRoutingV2Grad(DType::kBFloat16, 0, 22);
}

TEST(GradStreamingStores, InitRoutingV2GradDropPad) {
  CheckInitRoutingV2Grad(DType::kFloat32, 1, 23);
  CheckInitRoutingV2Grad(DType::kFloat16, 1, 24);
}

// Unpermute grad: permutedTokensGrad of N = 2048 rows (8.4 MB in 16-bit types), with and without probs. Dropless:
// each row one pair (a permutation). Drop-and-pad: rows drawn with repeats, so some rows sum several pairs and
// others none (+0 rows, streamed too).
void CheckTokenUnpermuteWithRoutingMapGrad(DType dtype, DType weights, bool drop_and_pad, bool probs,
                                           uint64_t seed) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + "/" + DTypeName(weights) +
               (drop_and_pad ? " drop-and-pad" : " dropless") + (probs ? " probs" : ""));
  const int64_t T = 1024, E = 16, K = 2, N = 2048;
  std::mt19937_64 rng(seed);
  TestTensor grad(dtype, {T, kHidden}, testing::Layout::kContiguous, seed);
  grad.FillUniform(rng);
  TestTensor perm(dtype, {N, kHidden}, testing::Layout::kContiguous, seed + 1);
  perm.FillUniform(rng);
  TestTensor prob(weights, {T, E}, testing::Layout::kContiguous, seed + 2);
  prob.FillUniform(rng);
  TestTensor map(DType::kBool, {T, E}, testing::Layout::kContiguous, seed + 3);
  std::vector<uint8_t> routed(static_cast<size_t>(T * E), 0);
  for (int64_t t = 0; t < T; ++t) {
    routed[static_cast<size_t>(t * E + t % E)] = 1;
    routed[static_cast<size_t>(t * E + (t + 1) % E)] = 1;
  }
  testing::SetRoutingMap(map, routed);
  TestTensor out_index(DType::kInt32, {N}, testing::Layout::kContiguous, seed + 4);
  TestTensor token_id(DType::kInt32, {N}, testing::Layout::kContiguous, seed + 5);
  std::vector<int64_t> rows(N);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (int64_t i = 0; i < N; ++i) {
    out_index.SetI(i, drop_and_pad ? static_cast<int64_t>(rng() % N) : rows[static_cast<size_t>(i)]);
    token_id.SetI(i, drop_and_pad ? static_cast<int64_t>(rng() % T) : i / K);
  }
  TestTensor want(dtype, {N, kHidden}, testing::Layout::kContiguous, seed + 6);
  TestTensor want_probs(weights, {T, E}, testing::Layout::kContiguous, seed + 7);
  const TestTensor before = want, before_probs = want_probs;
  auto call = [&](TestTensor& out, TestTensor& out_probs) {
    return testing::TestCall<TokenUnpermuteWithRoutingMapGradArgs>{
        {&grad, &out_index, &token_id, &map, &perm, probs ? &prob : nullptr, &out, probs ? &out_probs : nullptr},
        {drop_and_pad}};
  };
  ref::TokenUnpermuteWithRoutingMapGrad(call(want, want_probs).CppArgs());

  testing::ForEachThreadCountAndSimdTarget([&](int threads) {
    const std::string run = std::string(SimdTarget()) + " x " + std::to_string(threads) + " threads";
    TestTensor out = before, out_probs = before_probs;
    const Status s = call(out, out_probs).Run(testing::Api::kCpp);
    ASSERT_TRUE(s.ok()) << s.message() << " " << run;
    for (const auto& [got, ref] : {std::pair{&out, &want}, std::pair{&out_probs, &want_probs}}) {
      int64_t bad = -1;
      for (int64_t i = 0; i < got->numel() && bad < 0; ++i) {
        if (ElementBits(*got, i) != ElementBits(*ref, i)) bad = i;
      }
      EXPECT_EQ(bad, -1) << "element " << bad << " differs from the reference on " << run;
    }
    EXPECT_TRUE(out.OutsideViewUnchanged(before.Snapshot())) << run;
  });
}

TEST(GradStreamingStores, TokenUnpermuteWithRoutingMapGradDropless) {
  CheckTokenUnpermuteWithRoutingMapGrad(DType::kBFloat16, DType::kFloat32, false, true, 31);
  CheckTokenUnpermuteWithRoutingMapGrad(DType::kFloat32, DType::kFloat32, false, false, 32);
}

TEST(GradStreamingStores, TokenUnpermuteWithRoutingMapGradDropPadWithUnwrittenRows) {
  CheckTokenUnpermuteWithRoutingMapGrad(DType::kFloat16, DType::kBFloat16, true, true, 33);
  CheckTokenUnpermuteWithRoutingMapGrad(DType::kBFloat16, DType::kBFloat16, true, false, 34);
}

}  // namespace
}  // namespace moegrad
