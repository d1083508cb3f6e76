// MoeTokenPermuteWithRoutingMap against hand-computed values and, bit for bit, against the scalar reference
// (which builds the expert-major token list and argsorts it, as the formulas read): dropless and drop-and-pad,
// INT8 and BOOL maps, with and without probs, dtypes (the probs' apart from the tokens'), layouts, hidden sizes,
// empty tensors, both APIs, SIMD targets and thread counts. Contract: docs/ops/token_permute_with_routing_map.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
struct Tensors {
  TestTensor tokens, map, probs, permuted, permuted_probs, sorted;
};

class TokenPermuteWithRoutingMapTester {
 public:
  TokenPermuteWithRoutingMapTester& tokens(int64_t v) { T_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& experts(int64_t v) { E_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& hidden(int64_t v) { H_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& topk(int64_t v) { K_ = v; return *this; }          // dropless
  TokenPermuteWithRoutingMapTester& capacity(int64_t v) { C_ = v; return *this; }      // drop-and-pad
  TokenPermuteWithRoutingMapTester& drop_and_pad(bool v) { dp_ = v; return *this; }
  // Drop-and-pad: the share of routed entries.
  TokenPermuteWithRoutingMapTester& density(double v) { density_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& probs(bool v) { probs_ = v; return *this; }
  // Without probs: pass a permuteProbsOut anyway; it must stay untouched.
  TokenPermuteWithRoutingMapTester& unused_probs_out(bool v) { unused_probs_out_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& map_dtype(DType v) { map_dtype_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& layout(Layout in, Layout out) { in_ = in; out_ = out; return *this; }
  TokenPermuteWithRoutingMapTester& seed(uint64_t v) { seed_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& api(Api v) { api_ = v; return *this; }
  TokenPermuteWithRoutingMapTester& all_targets(bool v) { all_targets_ = v; return *this; }

  int64_t rows() const { return dp_ ? E_ * C_ : T_ * K_; }

  // probs (and permuteProbsOut) in the tokens' dtype, or in their own.
  void Test(DType dtype) const { Test(DTypes{dtype, dtype}); }
  void Test(DTypes dtype) const {
    const Tensors in = Make(dtype);
    Tensors want = in;
    ref::TokenPermuteWithRoutingMap(Call(want).CppArgs());
    const auto tok_before = in.permuted.Snapshot(), probs_before = in.permuted_probs.Snapshot();
    const auto idx_before = in.sorted.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_, /*runs=*/2);  // a plan or executor runs twice
      ASSERT_TRUE(s.ok()) << s.message() << Describe(dtype) << where;
      const std::string context = Describe(dtype) + where;
      ExpectBitIdentical(got.permuted, want.permuted, tok_before, "permuteTokensOut", context);
      if (probs_) ExpectBitIdentical(got.permuted_probs, want.permuted_probs, probs_before, "permuteProbsOut", context);
      else EXPECT_TRUE(got.permuted_probs.SameBytes(probs_before)) << "permuteProbsOut written" << Describe(dtype);
      EXPECT_TRUE(got.sorted.OutsideViewUnchanged(idx_before)) << "sortedIndicesOut outside view" << Describe(dtype);
      for (int64_t i = 0; i < got.sorted.numel(); ++i) {
        if (got.sorted.GetI(i) != want.sorted.GetI(i)) {
          ADD_FAILURE() << "sortedIndices[" << i << "] = " << got.sorted.GetI(i) << " but the reference gives "
                        << want.sorted.GetI(i) << Describe(dtype) << where;
          break;
        }
      }
      EXPECT_TRUE(got.tokens.SameBytes(in.tokens.Snapshot()) && got.map.SameBytes(in.map.Snapshot()) &&
                  got.probs.SameBytes(in.probs.Snapshot()))
          << "an input was written" << Describe(dtype);
    };
    if (!all_targets_) return check("");
    ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
  }

 private:
  Tensors Make(DTypes dtype) const {
    std::mt19937_64 rng(seed_);
    const int64_t N = rows();
    Tensors t;
    t.tokens = TestTensor(dtype.tokens, {T_, H_}, in_, seed_ + 1);
    t.map = TestTensor(map_dtype_, {T_, E_}, in_, seed_ + 2);
    t.probs = TestTensor(dtype.weights, {T_, E_}, in_, seed_ + 3);
    t.permuted = TestTensor(dtype.tokens, {N, H_}, out_, seed_ + 4);
    t.permuted_probs = TestTensor(dtype.weights, {N}, out_, seed_ + 5);
    t.sorted = TestTensor(DType::kInt32, {N}, out_, seed_ + 6);
    t.tokens.FillUniform(rng);
    t.probs.FillUniform(rng, 0.0f, 1.0f);
    SetRoutingMap(t.map, RandomRouting(T_, E_, dp_, K_, density_, rng));
    return t;
  }

  // The call over `t`: probs and permuteProbsOut as configured.
  TestCall<TokenPermuteWithRoutingMapArgs> Call(Tensors& t) const {
    TestCall<TokenPermuteWithRoutingMapArgs> c;
    c.tensors = {&t.tokens,
                 &t.map,
                 probs_ ? &t.probs : nullptr,
                 &t.permuted,
                 probs_ || unused_probs_out_ ? &t.permuted_probs : nullptr,
                 &t.sorted};
    c.attrs = {rows(), dp_};
    return c;
  }

  std::string Describe(DTypes dtype) const {
    return std::string(" [") + DTypesName(dtype) + " T=" + std::to_string(T_) + " E=" + std::to_string(E_) +
           " H=" + std::to_string(H_) + (dp_ ? " dropAndPad C=" + std::to_string(C_) : " K=" + std::to_string(K_)) +
           (probs_ ? " probs" : "") + " map=" + DTypeName(map_dtype_) + " in=" + LayoutName(in_) +
           " out=" + LayoutName(out_) + " api=" + ApiName(api_) +
           " seed=" + std::to_string(seed_) + " target=" + SimdTarget() + "]";
  }

  int64_t T_ = 6, E_ = 4, H_ = 17, K_ = 2, C_ = 3;
  bool dp_ = false, probs_ = true, unused_probs_out_ = false, all_targets_ = false;
  double density_ = 0.4;
  DType map_dtype_ = DType::kInt8;
  Layout in_ = Layout::kContiguous, out_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
};

// Worked by hand, in every (tokens, probs) dtype combination (every value is exact in each). Token t's row is
// [10t + 1, 10t + 2]; probs[t][e] = t + e / 4.
//   dropless, T = 3, E = 3, K = 2, routed (0,0) (0,2) (1,0) (1,1) (2,1) (2,2):
//     expert-major token list [0, 1 | 1, 2 | 0, 2]; sortedIndices (its stable argsort) [0, 4, 1, 2, 3, 5]
//   drop-and-pad, T = 3, E = 2, C = 2, routed (0,1) (1,0) (1,1):
//     expert 0 takes [1, then unrouted 0]; expert 1 takes [0, 1]: sortedIndices [1, 0, 0, 1]
TEST(TokenPermuteWithRoutingMap, HandComputed) {
  for (const DTypes& d : kEveryDTypes) {
    for (bool dp : {false, true}) {
      for (DType map_dtype : {DType::kInt8, DType::kBool}) {
        SCOPED_TRACE(DTypesName(d) + (dp ? " drop-and-pad " : " dropless ") + DTypeName(map_dtype));
        const int64_t T = 3, E = dp ? 2 : 3, N = dp ? 4 : 6;
        TestTensor tokens(d.tokens, {T, 2}), map(map_dtype, {T, E}), probs(d.weights, {T, E});
        TestTensor permuted(d.tokens, {N, 2}), pprobs(d.weights, {N}), sorted(DType::kInt32, {N});
        for (int64_t t = 0; t < T; ++t) {
          tokens.SetF(t * 2, 10.0f * t + 1);
          tokens.SetF(t * 2 + 1, 10.0f * t + 2);
          for (int64_t e = 0; e < E; ++e) {
            probs.SetF(t * E + e, t + e / 4.0f);
            map.SetI(t * E + e, 0);
          }
        }
        const std::vector<std::pair<int, int>> hits = dp ? std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {1, 1}}
                                                         : std::vector<std::pair<int, int>>{{0, 0}, {0, 2}, {1, 0},
                                                                                            {1, 1}, {2, 1}, {2, 2}};
        for (auto [t, e] : hits) map.SetI(t * E + e, 1);
        const TestCall<TokenPermuteWithRoutingMapArgs> call{{&tokens, &map, &probs, &permuted, &pprobs, &sorted},
                                                            {N, dp}};
        ASSERT_TRUE(call.Run(Api::kCpp).ok());
        const std::vector<int64_t> want_idx =
            dp ? std::vector<int64_t>{1, 0, 0, 1} : std::vector<int64_t>{0, 4, 1, 2, 3, 5};
        // The token and expert of each permuted row.
        const std::vector<std::pair<int, int>> rows =
            dp ? std::vector<std::pair<int, int>>{{1, 0}, {0, 0}, {0, 1}, {1, 1}}
               : std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {1, 1}, {2, 1}, {0, 2}, {2, 2}};
        for (int64_t i = 0; i < N; ++i) {
          EXPECT_EQ(sorted.GetI(i), want_idx[static_cast<size_t>(i)]) << i;
          const auto [t, e] = rows[static_cast<size_t>(i)];
          EXPECT_EQ(permuted.GetF(i * 2), 10.0f * t + 1) << i;
          EXPECT_EQ(permuted.GetF(i * 2 + 1), 10.0f * t + 2) << i;
          EXPECT_EQ(pprobs.GetF(i), t + e / 4.0f) << i;
        }
      }
    }
  }
}

// Decode sizes: one or two tokens fill every expert's slot (drop-and-pad) or one token is all of the work
// (dropless), so the threads split the (token, row) positions instead of the tokens, a token's rows between
// threads; rows on and off 64-byte lines, strided views, and (E = 320, H = 7168) streaming stores.
TEST(TokenPermuteWithRoutingMap, FewTokensSplitRows) {
  uint64_t seed = 1300;
  for (int64_t T : {1, 2}) {
    for (int64_t H : {4096, 2085}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        TokenPermuteWithRoutingMapTester().tokens(T).experts(64).capacity(1).drop_and_pad(true).hidden(H)
            .seed(seed++).all_targets(true).Test(dt);
      }
    }
    // Rows long enough that the call takes two or more threads (a thread's share is 256 KiB moved): dropless,
    // one token's K = 8 rows over the threads, and strided views.
    TokenPermuteWithRoutingMapTester().tokens(T).experts(64).topk(8).hidden(16411).seed(seed++).all_targets(true)
        .Test(DType::kFloat32);
    TokenPermuteWithRoutingMapTester().tokens(T).experts(64).capacity(1).drop_and_pad(true).hidden(4500)
        .layout(Layout::kTransposed, Layout::kPadded).seed(seed++).all_targets(true).Test(DType::kFloat16);
  }
  TokenPermuteWithRoutingMapTester().tokens(1).experts(320).capacity(1).drop_and_pad(true).hidden(7168)
      .seed(seed++).all_targets(true).Test(DType::kFloat32);
}

TEST(TokenPermuteWithRoutingMap, HiddenSizesAndDTypes) {
  uint64_t seed = 1;
  for (int64_t H : {1, 3, 8, 17, 64, 100, 1031}) {
    for (DType dt : kFloats) {
      TokenPermuteWithRoutingMapTester().hidden(H).seed(seed++).Test(dt);
      TokenPermuteWithRoutingMapTester().hidden(H).drop_and_pad(true).seed(seed++).Test(dt);
      TokenPermuteWithRoutingMapTester().hidden(H).probs(false).unused_probs_out(true).map_dtype(DType::kBool)
          .seed(seed++).Test(dt);
    }
  }
}

// Every (tokens, probs) dtype combination: both modes, with and without probs, strided views, both APIs, several
// index blocks, on every SIMD target and thread count for the larger ones.
TEST(TokenPermuteWithRoutingMap, EveryDTypeCombination) {
  uint64_t seed = 700;
  for (const DTypes& d : kEveryDTypes) {
    TokenPermuteWithRoutingMapTester().hidden(17).seed(seed++).Test(d);
    TokenPermuteWithRoutingMapTester().hidden(100).drop_and_pad(true).map_dtype(DType::kBool).seed(seed++).Test(d);
    TokenPermuteWithRoutingMapTester().hidden(13).layout(Layout::kTransposed, Layout::kPadded).api(Api::kAclnn)
        .seed(seed++).Test(d);
    TokenPermuteWithRoutingMapTester().hidden(9).probs(false).unused_probs_out(true).seed(seed++).Test(d);
    TokenPermuteWithRoutingMapTester().tokens(300).experts(70).topk(3).hidden(3).seed(seed++).all_targets(true)
        .Test(d);
    TokenPermuteWithRoutingMapTester().tokens(300).experts(9).capacity(40).drop_and_pad(true).density(0.2).hidden(3)
        .layout(Layout::kPadded, Layout::kTransposed).seed(seed++).all_targets(true).Test(d);
  }
}

// Outputs of 8 MiB and more are copied with streaming stores, on rows that start at a 16-byte boundary (the
// others take memcpy): H = 2049 puts successive rows at every 4-byte offset; H = 2048 streams every row.
TEST(TokenPermuteWithRoutingMap, LargeOutputsStream) {
  uint64_t seed = 500;
  for (int64_t H : {2048, 2049}) {
    for (DType dt : kFloats) {
      // 4096 permuted rows: 33.6 MB in f32, 16.8 MB in 16-bit types.
      TokenPermuteWithRoutingMapTester().tokens(2048).experts(16).topk(2).hidden(H).seed(seed++).Test(dt);
      TokenPermuteWithRoutingMapTester().tokens(2048).experts(16).capacity(256).drop_and_pad(true).hidden(H)
          .seed(seed++).Test(dt);
    }
  }
  // Every thread count splits the rows differently.
  TokenPermuteWithRoutingMapTester().tokens(2048).experts(16).topk(2).hidden(2049).seed(seed++).all_targets(true)
      .Test(DType::kBFloat16);
  // Capacity 64 of the about 256 tokens routed to each expert: most tokens are taken by no expert, in runs of
  // several, and are neither read nor prefetched (8 MiB of f32 output: streamed).
  TokenPermuteWithRoutingMapTester().tokens(2048).experts(16).capacity(64).drop_and_pad(true).hidden(2048)
      .seed(seed++).all_targets(true).Test(DType::kFloat32);
  // Rows are copied token by token, at most 64 destinations per pass over the source row: with 3 tokens and
  // 100 experts of capacity 2, unrouted tokens fill the slots, so a token is copied to up to 100 rows.
  for (double density : {0.0, 0.3}) {
    TokenPermuteWithRoutingMapTester().tokens(3).experts(100).capacity(2).drop_and_pad(true).density(density)
        .hidden(16384).seed(seed++).all_targets(true).Test(DType::kFloat32);
    TokenPermuteWithRoutingMapTester().tokens(3).experts(100).capacity(2).drop_and_pad(true).density(density).hidden(15)
        .seed(seed++).Test(DType::kBFloat16);
  }
}

// The map is counted and scanned a vector at a time (16, 32 or 64 bytes by SIMD target), four vectors of
// experts per counting pass: expert counts around those widths, on every target.
TEST(TokenPermuteWithRoutingMap, WideRoutingMaps) {
  uint64_t seed = 900;
  for (int64_t E : {15, 16, 17, 40, 63, 64, 65, 129, 256, 300}) {
    TokenPermuteWithRoutingMapTester().tokens(70).experts(E).topk(3).hidden(5).seed(seed++).all_targets(true)
        .Test(DType::kFloat32);
    TokenPermuteWithRoutingMapTester().tokens(70).experts(E).capacity(2).drop_and_pad(true).density(0.05).hidden(5)
        .seed(seed++).all_targets(true).Test(DType::kBFloat16);
  }
  // 66000 tokens routed to all 81 experts (a whole 64-byte vector, a 16-byte one and one more): blocks of 258
  // tokens, past the 255 rows a byte counter holds.
  TokenPermuteWithRoutingMapTester().tokens(66000).experts(81).topk(81).hidden(1).seed(seed++).Test(DType::kFloat32);
}

TEST(TokenPermuteWithRoutingMap, TopKCapacityAndDensity) {
  uint64_t seed = 100;
  for (int64_t K : {0, 1, 2, 3, 8, 16}) {
    TokenPermuteWithRoutingMapTester().tokens(9).experts(16).topk(K).hidden(12).seed(seed++).Test(DType::kFloat32);
  }
  for (int64_t C : {0, 1, 2, 5, 9}) {
    for (double density : {0.0, 0.2, 0.7, 1.0}) {
      for (DType map : {DType::kInt8, DType::kBool}) {
        TokenPermuteWithRoutingMapTester().drop_and_pad(true).tokens(9).experts(5).capacity(C).density(density)
            .map_dtype(map).hidden(10).seed(seed++).Test(DType::kBFloat16);
      }
    }
  }
}

TEST(TokenPermuteWithRoutingMap, LayoutsAndApis) {
  uint64_t seed = 300;
  for (Layout in : kLayouts) {
    for (Layout out : kLayouts) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        for (bool dp : {false, true}) {
          for (DType dt : kFloats) {
            TokenPermuteWithRoutingMapTester().drop_and_pad(dp).layout(in, out).api(api).hidden(13).seed(seed++)
                .Test(dt);
          }
        }
      }
    }
  }
}

TEST(TokenPermuteWithRoutingMap, EmptyTensors) {
  for (bool dp : {false, true}) {
    for (Api api : {Api::kCpp, Api::kAclnn}) {
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).tokens(0).capacity(0).api(api)
          .Test(DType::kFloat32);  // T = 0
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).hidden(0).api(api).Test(DType::kFloat16);            // H = 0
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).experts(0).topk(0).capacity(0).api(api)
          .Test(DType::kBFloat16);  // E = 0
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).topk(0).capacity(0).api(api).Test(DType::kFloat32);  // N = 0
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).tokens(0).capacity(0).api(api)
          .Test({DType::kBFloat16, DType::kFloat32});
      TokenPermuteWithRoutingMapTester().drop_and_pad(dp).hidden(0).api(api).Test({DType::kFloat32, DType::kFloat16});
    }
  }
}

TEST(TokenPermuteWithRoutingMap, BitIdenticalAcrossSimdTargetsAndThreads) {
  // 1000 tokens: 16 blocks of the index computation; 4000 / 2000 output rows in several tasks.
  for (DType dt : kFloats) {
    TokenPermuteWithRoutingMapTester().tokens(1000).experts(16).topk(4).hidden(64).all_targets(true).seed(7).Test(dt);
    TokenPermuteWithRoutingMapTester().tokens(1000).experts(16).drop_and_pad(true).capacity(125).density(0.15)
        .hidden(64).map_dtype(DType::kBool).all_targets(true).seed(8).Test(dt);
  }
  // About 20 MiB moved: up to 16-24 chunks of tokens, taken by whichever thread is free (ChunkQueue).
  TokenPermuteWithRoutingMapTester().tokens(512).experts(16).topk(4).hidden(2048).all_targets(true).seed(12)
      .Test(DType::kFloat32);
  TokenPermuteWithRoutingMapTester().tokens(512).experts(16).drop_and_pad(true).capacity(128).hidden(2048)
      .all_targets(true).seed(13).Test(DType::kBFloat16);
  TokenPermuteWithRoutingMapTester().tokens(700).experts(9).topk(3).hidden(33)
      .layout(Layout::kTransposed, Layout::kPadded)
      .all_targets(true).Test(DType::kFloat16);
  // probs in another dtype (width) than the tokens.
  TokenPermuteWithRoutingMapTester().tokens(1000).experts(16).topk(4).hidden(64).all_targets(true).seed(9)
      .Test({DType::kBFloat16, DType::kFloat32});
  TokenPermuteWithRoutingMapTester().tokens(1000).experts(16).drop_and_pad(true).capacity(125).density(0.15)
      .hidden(64).all_targets(true).seed(10).Test({DType::kFloat32, DType::kFloat16});
}

}  // namespace
}  // namespace moegrad::testing
