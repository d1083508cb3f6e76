// MoeTokenUnpermuteWithRoutingMap against the spec's worked examples and, bit for bit, against the scalar
// reference: dropless and pad, with and without probs (zero weights kept), INT8 and BOOL maps, every token x
// weight dtype pair, layouts, hidden sizes around the vector widths, repeated and unreferenced indices, empty
// tensors, every API, SIMD targets and thread counts. Contract: docs/ops/token_unpermute_with_routing_map.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

using Args = TokenUnpermuteWithRoutingMapArgs;
constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
struct Tensors {
  TestTensor permuted, sorted, map, probs, out, out_index, token_id, out_probs;
};

class TokenUnpermuteWithRoutingMapTester {
 public:
  TokenUnpermuteWithRoutingMapTester& tokens(int64_t v) { T_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& experts(int64_t v) { E_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& hidden(int64_t v) { H_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& topk(int64_t v) { K_ = v; return *this; }      // dropless
  TokenUnpermuteWithRoutingMapTester& capacity(int64_t v) { C_ = v; return *this; }  // pad
  TokenUnpermuteWithRoutingMapTester& padded(bool v) { pad_ = v; return *this; }
  // Pad mode: the share of routed entries (a demand of about density * T per expert against capacity C).
  TokenUnpermuteWithRoutingMapTester& density(double v) { density_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& probs(bool v) { probs_ = v; return *this; }
  // Without probs: pass a permuteProbs anyway; it must stay untouched.
  TokenUnpermuteWithRoutingMapTester& unused_probs_out(bool v) { unused_probs_out_ = v; return *this; }
  // Pass restoreShape (always passed without probs), and a routing map without probs.
  TokenUnpermuteWithRoutingMapTester& restore(bool v) { restore_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& map_without_probs(bool v) { map_always_ = v; return *this; }
  // sortedIndices drawn at random in its range (repeats, unreferenced rows) instead of a permutation.
  TokenUnpermuteWithRoutingMapTester& random_indices(bool v) { random_ = v; return *this; }
  // A share of the probs set to 0 (and, in fp32 tokens, some permuted values to inf: 0 * inf is NaN).
  TokenUnpermuteWithRoutingMapTester& zero_weights(double v) { zeros_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& map_dtype(DType v) { map_dtype_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& layout(Layout in, Layout out) { in_ = in; out_ = out; return *this; }
  TokenUnpermuteWithRoutingMapTester& seed(uint64_t v) { seed_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& api(Api v) { api_ = v; return *this; }
  TokenUnpermuteWithRoutingMapTester& all_targets(bool v) { all_targets_ = v; return *this; }

  int64_t rows() const { return pad_ ? E_ * C_ : T_ * K_; }

  void Test(DType dtype) const { Test(DTypes{dtype, dtype}); }
  void Test(DTypes dtype) const {
    const Tensors in = Make(dtype);
    Tensors want = in;
    ref::TokenUnpermuteWithRoutingMap(Call(want).CppArgs());
    const auto out_before = in.out.Snapshot(), probs_before = in.out_probs.Snapshot();
    const auto index_before = in.out_index.Snapshot(), id_before = in.token_id.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_, /*runs=*/2);  // a plan or executor runs twice
      const std::string context = Describe(dtype) + where;
      ASSERT_TRUE(s.ok()) << s.message() << context;
      ExpectBitIdentical(got.out, want.out, out_before, "unpermutedTokens", context);
      if (probs_) ExpectBitIdentical(got.out_probs, want.out_probs, probs_before, "permuteProbs", context);
      else EXPECT_TRUE(got.out_probs.SameBytes(probs_before)) << "permuteProbs written" << context;
      EXPECT_TRUE(got.out_index.OutsideViewUnchanged(index_before)) << "outIndex outside view" << context;
      EXPECT_TRUE(got.token_id.OutsideViewUnchanged(id_before)) << "permuteTokenId outside view" << context;
      for (int64_t i = 0; i < got.out_index.numel(); ++i) {
        if (got.out_index.GetI(i) != want.out_index.GetI(i) || got.token_id.GetI(i) != want.token_id.GetI(i)) {
          ADD_FAILURE() << "outIndex / permuteTokenId [" << i << "] = " << got.out_index.GetI(i) << " / "
                        << got.token_id.GetI(i) << " but the reference gives " << want.out_index.GetI(i) << " / "
                        << want.token_id.GetI(i) << context;
          break;
        }
      }
      EXPECT_TRUE(got.permuted.SameBytes(in.permuted.Snapshot()) && got.sorted.SameBytes(in.sorted.Snapshot()) &&
                  got.map.SameBytes(in.map.Snapshot()) && got.probs.SameBytes(in.probs.Snapshot()))
          << "an input was written" << context;
    };
    if (!all_targets_) return check("");
    ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
  }

 private:
  Tensors Make(DTypes dtype) const {
    std::mt19937_64 rng(seed_);
    const int64_t N = rows();
    Tensors t;
    t.permuted = TestTensor(dtype.tokens, {N, H_}, in_, seed_ + 1);
    t.sorted = TestTensor(DType::kInt32, {N}, in_, seed_ + 2);
    t.map = TestTensor(map_dtype_, {T_, E_}, in_, seed_ + 3);
    t.probs = TestTensor(dtype.weights, {T_, E_}, in_, seed_ + 4);
    t.out = TestTensor(dtype.tokens, {T_, H_}, out_, seed_ + 5);
    t.out_index = TestTensor(DType::kInt32, {N}, out_, seed_ + 6);
    t.token_id = TestTensor(DType::kInt32, {N}, out_, seed_ + 7);
    t.out_probs = TestTensor(dtype.weights, {N}, out_, seed_ + 8);
    t.permuted.FillUniform(rng);
    t.probs.FillUniform(rng, 0.0f, 1.0f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (zeros_ > 0) {
      for (int64_t i = 0; i < t.probs.numel(); ++i) {
        if (u(rng) < zeros_) t.probs.SetF(i, u(rng) < 0.5 ? 0.0f : -0.0f);
      }
      if (dtype.tokens == DType::kFloat32 && N * H_ > 0) {
        for (int r = 0; r < 3; ++r) t.permuted.SetF(static_cast<int64_t>(rng() % (N * H_)), r ? -INFINITY : INFINITY);
      }
    }
    const std::vector<uint8_t> routed = RandomRouting(T_, E_, pad_, K_, density_, rng);
    SetRoutingMap(t.map, routed);
    std::vector<int64_t> idx(static_cast<size_t>(N));
    if (random_) {
      const int64_t hi = pad_ ? T_ : N;
      for (auto& v : idx) v = hi > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(hi)) : 0;
    } else if (!pad_) {
      // A permutation of the rows, as the permute writes it.
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), rng);
    } else {
      // Expert e keeps its first C routed tokens, ascending, and pads the rest with unrouted ones, as the permute.
      for (int64_t e = 0; e < E_; ++e) {
        int64_t c = 0;
        for (int64_t tok = 0; tok < T_ && c < C_; ++tok) {
          if (routed[static_cast<size_t>(tok * E_ + e)] != 0) idx[static_cast<size_t>(e * C_ + c++)] = tok;
        }
        for (int64_t tok = 0; tok < T_ && c < C_; ++tok) {
          if (routed[static_cast<size_t>(tok * E_ + e)] == 0) idx[static_cast<size_t>(e * C_ + c++)] = tok;
        }
        for (; c < C_; ++c) idx[static_cast<size_t>(e * C_ + c)] = static_cast<int64_t>(rng() % T_);
      }
    }
    for (int64_t i = 0; i < N; ++i) t.sorted.SetI(i, idx[static_cast<size_t>(i)]);
    return t;
  }

  TestCall<Args> Call(Tensors& t) const {
    TestCall<Args> c;
    c.tensors = {&t.permuted, &t.sorted,     probs_ || map_always_ ? &t.map : nullptr, probs_ ? &t.probs : nullptr,
                 &t.out,      &t.out_index, &t.token_id, probs_ || unused_probs_out_ ? &t.out_probs : nullptr};
    c.attrs = {pad_};
    if (restore_ || !probs_) c.arrays[0] = std::vector<int64_t>{T_, H_};
    return c;
  }

  std::string Describe(DTypes dtype) const {
    return std::string(" [") + DTypesName(dtype) + " T=" + std::to_string(T_) + " E=" + std::to_string(E_) +
           " H=" + std::to_string(H_) + (pad_ ? " padded C=" + std::to_string(C_) : " K=" + std::to_string(K_)) +
           (probs_ ? " probs" : "") + (random_ ? " random-indices" : "") + " map=" + DTypeName(map_dtype_) +
           " in=" + LayoutName(in_) + " out=" + LayoutName(out_) + " api=" + ApiName(api_) +
           " seed=" + std::to_string(seed_) + " target=" + SimdTarget() + "]";
  }

  int64_t T_ = 6, E_ = 4, H_ = 17, K_ = 2, C_ = 3;
  bool pad_ = false, probs_ = true, unused_probs_out_ = false, restore_ = false, map_always_ = false;
  bool random_ = false, all_targets_ = false;
  double density_ = 0.4, zeros_ = 0.0;
  DType map_dtype_ = DType::kInt8;
  Layout in_ = Layout::kContiguous, out_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
};

// The spec's worked examples (fp32, T = 3, E = 3, H = 2; permuted rows {1,2} {3,4} ... {11,12}), through every
// API and in every dtype pair (every value is exact in each).
TEST(TokenUnpermuteWithRoutingMap, SpecExamples) {
  for (const DTypes& d : kEveryDTypes) {
    for (bool pad : {false, true}) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        SCOPED_TRACE(DTypesName(d) + (pad ? " pad " : " dropless ") + ApiName(api));
        TestTensor permuted(d.tokens, {6, 2}), sorted(DType::kInt32, {6}), map(DType::kInt8, {3, 3});
        TestTensor probs(d.weights, {3, 3}), out(d.tokens, {3, 2}), out_index(DType::kInt32, {6});
        TestTensor token_id(DType::kInt32, {6}), out_probs(d.weights, {6});
        for (int64_t i = 0; i < 12; ++i) permuted.SetF(i, static_cast<float>(i + 1));
        const std::vector<int> m = pad ? std::vector<int>{1, 1, 1, 1, 0, 0, 1, 0, 0}
                                       : std::vector<int>{1, 0, 1, 1, 1, 0, 0, 1, 1};
        const std::vector<float> p = pad ? std::vector<float>{0.5f, 0.25f, 0.25f, 1, 0, 0, 1, 0, 0}
                                         : std::vector<float>{0.5f, 0, 0.25f, 1, 2, 0, 0, 4, 0.5f};
        const std::vector<int> s = pad ? std::vector<int>{0, 1, 0, 1, 0, 1} : std::vector<int>{0, 4, 1, 2, 3, 5};
        for (int64_t i = 0; i < 9; ++i) {
          map.SetI(i, m[static_cast<size_t>(i)]);
          probs.SetF(i, p[static_cast<size_t>(i)]);
        }
        for (int64_t i = 0; i < 6; ++i) sorted.SetI(i, s[static_cast<size_t>(i)]);
        const TestCall<Args> call{{&permuted, &sorted, &map, &probs, &out, &out_index, &token_id, &out_probs}, {pad}};
        const Status st = call.Run(api);
        ASSERT_TRUE(st.ok()) << st.message();
        const std::vector<float> want_out = pad ? std::vector<float>{4, 5, 3, 4, 0, 0}
                                                : std::vector<float>{2.75f, 3.5f, 13, 16, 33.5f, 38};
        const std::vector<int> want_index = pad ? std::vector<int>{0, 2, 4, 1, 3, 5} : s;
        const std::vector<int> want_id = pad ? std::vector<int>{0, 0, 0, 1, 1, 1} : std::vector<int>{0, 0, 1, 1, 2, 2};
        const std::vector<float> want_probs = pad ? std::vector<float>{0.5f, 1, 0.25f, 0, 0.25f, 0}
                                                  : std::vector<float>{0.5f, 0.25f, 1, 2, 4, 0.5f};
        for (int64_t i = 0; i < 6; ++i) {
          EXPECT_EQ(out.GetF(i), want_out[static_cast<size_t>(i)]) << "unpermutedTokens " << i;
          EXPECT_EQ(out_index.GetI(i), want_index[static_cast<size_t>(i)]) << "outIndex " << i;
          EXPECT_EQ(token_id.GetI(i), want_id[static_cast<size_t>(i)]) << "permuteTokenId " << i;
          EXPECT_EQ(out_probs.GetF(i), want_probs[static_cast<size_t>(i)]) << "permuteProbs " << i;
        }
      }
    }
  }
}

// Zero weights are multiplied, not skipped: 0 * inf = NaN and 0 * -x = -0 reach the output.
TEST(TokenUnpermuteWithRoutingMap, ZeroWeightsAreNotSkipped) {
  TestTensor permuted(DType::kFloat32, {2, 2}), sorted(DType::kInt32, {2}), map(DType::kBool, {1, 2});
  TestTensor probs(DType::kFloat32, {1, 2}), out(DType::kFloat32, {1, 2}), out_index(DType::kInt32, {2});
  TestTensor token_id(DType::kInt32, {2}), out_probs(DType::kFloat32, {2});
  permuted.SetF(0, INFINITY);
  permuted.SetF(1, -3.0f);
  permuted.SetF(2, 1.0f);
  permuted.SetF(3, -0.0f);
  map.SetI(0, 1);
  map.SetI(1, 1);
  probs.SetF(0, 0.0f);
  probs.SetF(1, 0.0f);
  sorted.SetI(0, 0);
  sorted.SetI(1, 1);
  const TestCall<Args> call{{&permuted, &sorted, &map, &probs, &out, &out_index, &token_id, &out_probs}, {false}};
  ASSERT_TRUE(call.Run(Api::kCpp).ok());
  EXPECT_TRUE(std::isnan(out.GetF(0)));                              // 0 * inf + 0 * 1
  EXPECT_EQ(ElementBits(out, 1), 0x80000000u);                        // 0 * -3 + 0 * -0 = -0 + -0 = -0
}

TEST(TokenUnpermuteWithRoutingMap, HiddenSizesAroundVectorWidths) {
  uint64_t seed = 1;
  for (int64_t H : {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1031}) {
    for (DType dt : kFloats) {
      TokenUnpermuteWithRoutingMapTester().hidden(H).seed(seed++).Test(dt);
      TokenUnpermuteWithRoutingMapTester().hidden(H).padded(true).seed(seed++).Test(dt);
      TokenUnpermuteWithRoutingMapTester().hidden(H).probs(false).unused_probs_out(true).seed(seed++).Test(dt);
      TokenUnpermuteWithRoutingMapTester().hidden(H).padded(true).probs(false).map_dtype(DType::kBool)
          .map_without_probs(true).seed(seed++).Test(dt);
    }
  }
}

// K 1..16 against E up to 512 (most experts empty), dropless, with probs and without.
TEST(TokenUnpermuteWithRoutingMap, TopKAndExperts) {
  uint64_t seed = 100;
  for (int64_t K = 1; K <= 16; ++K) {
    for (int64_t E : {16, 64, 512}) {
      TokenUnpermuteWithRoutingMapTester().tokens(11).experts(E).topk(K).hidden(12).seed(seed++)
          .Test(K % 2 ? DType::kFloat32 : DType::kBFloat16);
    }
    TokenUnpermuteWithRoutingMapTester().tokens(9).experts(K).topk(K).hidden(5).seed(seed++).map_dtype(DType::kBool)
        .Test({DType::kFloat16, DType::kFloat32});
    TokenUnpermuteWithRoutingMapTester().tokens(9).experts(K).topk(K).hidden(5).probs(false).random_indices(true)
        .seed(seed++).Test(DType::kFloat32);
  }
  for (int64_t E : {1, 2, 5, 100, 512}) {
    TokenUnpermuteWithRoutingMapTester().tokens(13).experts(E).topk(1).hidden(9).seed(seed++).Test(DType::kFloat32);
  }
}

// Pad mode: capacity below and above the demand (tokens dropped, slots padded), tokens routed nowhere, many
// empty experts, random token ids (repeats and unreferenced tokens).
TEST(TokenUnpermuteWithRoutingMap, PadCapacityAndDensity) {
  uint64_t seed = 200;
  for (int64_t C : {0, 1, 2, 5, 9, 20}) {
    for (double density : {0.0, 0.1, 0.5, 1.0}) {
      for (DType map : {DType::kInt8, DType::kBool}) {
        TokenUnpermuteWithRoutingMapTester().padded(true).tokens(9).experts(5).capacity(C).density(density)
            .map_dtype(map).hidden(10).seed(seed++).Test(DType::kBFloat16);
      }
    }
  }
  for (int64_t E : {1, 3, 64, 512}) {
    TokenUnpermuteWithRoutingMapTester().padded(true).tokens(40).experts(E).capacity(3).density(0.02).hidden(7)
        .random_indices(true).seed(seed++).Test({DType::kFloat32, DType::kBFloat16});
  }
}

// Pad mode's padding tokens of more than 16 contributions (every expert pads its slots with the first unrouted
// tokens: tokens 0 and 1 collect up to 40) on rows at and past 16384 columns, where the kernel's whole-row fp32
// accumulator ends and column tiles take over; every SIMD target and thread count for the wider rows.
TEST(TokenUnpermuteWithRoutingMap, ManyContributionsOnWideRows) {
  uint64_t seed = 900;
  for (int64_t H : {16384, 16384 + 37, 3 * 512 + 16384}) {
    for (double density : {0.0, 0.5}) {
      for (const DTypes& d : {DTypes{DType::kFloat32, DType::kFloat32}, DTypes{DType::kBFloat16, DType::kFloat32},
                              DTypes{DType::kFloat16, DType::kFloat16}}) {
        TokenUnpermuteWithRoutingMapTester().padded(true).tokens(3).experts(40).capacity(2).density(density)
            .hidden(H).all_targets(H > 16384 && density > 0).seed(seed++).Test(d);
      }
    }
  }
}

// Every token x weight dtype pair: both modes, with and without probs, zero weights, strided views, every API,
// on every SIMD target and thread count for the larger ones.
TEST(TokenUnpermuteWithRoutingMap, EveryDTypePair) {
  uint64_t seed = 700;
  for (const DTypes& d : kEveryDTypes) {
    TokenUnpermuteWithRoutingMapTester().hidden(17).zero_weights(0.3).seed(seed++).Test(d);
    TokenUnpermuteWithRoutingMapTester().hidden(100).padded(true).zero_weights(0.3).map_dtype(DType::kBool)
        .seed(seed++).Test(d);
    TokenUnpermuteWithRoutingMapTester().hidden(13).layout(Layout::kTransposed, Layout::kPadded).api(Api::kAclnn)
        .restore(true).seed(seed++).Test(d);
    TokenUnpermuteWithRoutingMapTester().hidden(9).probs(false).unused_probs_out(true).seed(seed++).Test(d);
    TokenUnpermuteWithRoutingMapTester().tokens(300).experts(70).topk(3).hidden(40).seed(seed++).all_targets(true)
        .Test(d);
    TokenUnpermuteWithRoutingMapTester().tokens(300).experts(9).capacity(40).padded(true).density(0.2).hidden(35)
        .layout(Layout::kPadded, Layout::kTransposed).seed(seed++).all_targets(true).Test(d);
  }
}

TEST(TokenUnpermuteWithRoutingMap, LayoutsAndApis) {
  uint64_t seed = 300;
  for (Layout in : kLayouts) {
    for (Layout out : kLayouts) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        for (bool pad : {false, true}) {
          for (bool probs : {false, true}) {
            const DType dt = kFloats[seed % 3];
            TokenUnpermuteWithRoutingMapTester().padded(pad).probs(probs).layout(in, out).api(api).hidden(13)
                .seed(seed++).Test(dt);
          }
        }
      }
    }
  }
}

TEST(TokenUnpermuteWithRoutingMap, EmptyTensors) {
  for (bool pad : {false, true}) {
    for (bool probs : {false, true}) {
      for (Api api : {Api::kCpp, Api::kAclnn}) {
        auto t = [&] { return TokenUnpermuteWithRoutingMapTester().padded(pad).probs(probs).api(api); };
        t().tokens(0).capacity(0).Test(DType::kFloat32);                           // T = 0
        t().hidden(0).Test(DType::kFloat16);                                       // H = 0
        t().experts(0).topk(0).capacity(0).Test(DType::kBFloat16);                 // E = 0
        t().topk(0).capacity(0).Test({DType::kFloat32, DType::kBFloat16});         // N = 0, tokens zeroed
        t().tokens(0).capacity(0).hidden(0).Test({DType::kBFloat16, DType::kFloat32});
      }
    }
  }
}

TEST(TokenUnpermuteWithRoutingMap, BitIdenticalAcrossSimdTargetsAndThreads) {
  for (DType dt : kFloats) {
    TokenUnpermuteWithRoutingMapTester().tokens(1000).experts(16).topk(4).hidden(64).all_targets(true).seed(7)
        .Test(dt);
    TokenUnpermuteWithRoutingMapTester().tokens(1000).experts(16).padded(true).capacity(125).density(0.15)
        .hidden(64).map_dtype(DType::kBool).all_targets(true).seed(8).Test(dt);
    TokenUnpermuteWithRoutingMapTester().tokens(500).experts(8).topk(2).hidden(2049).probs(false).all_targets(true)
        .seed(9).Test(dt);
  }
  TokenUnpermuteWithRoutingMapTester().tokens(700).experts(9).topk(3).hidden(33)
      .layout(Layout::kTransposed, Layout::kPadded).all_targets(true).Test(DType::kFloat16);
  TokenUnpermuteWithRoutingMapTester().tokens(1000).experts(16).topk(4).hidden(64).all_targets(true).seed(10)
      .Test({DType::kBFloat16, DType::kFloat32});
  TokenUnpermuteWithRoutingMapTester().tokens(1000).experts(16).padded(true).capacity(125).density(0.15)
      .hidden(64).random_indices(true).all_targets(true).seed(11).Test({DType::kFloat32, DType::kFloat16});
}

// Decode sizes in the pad mode: one or two tokens collect every contribution, so the threads split the columns
// of the token rows instead of the tokens (rows on and off 64-byte lines; with and without probs). At H = 4096
// every slot's row is a multiple of 4 KiB from the others, and the kernel sums them in smaller groups.
TEST(TokenUnpermuteWithRoutingMap, FewTokensSplitColumns) {
  uint64_t seed = 1400;
  for (int64_t T : {1, 2}) {
    for (int64_t H : {4096, 2085}) {
      for (const DTypes& d : {DTypes{DType::kFloat32, DType::kFloat32}, DTypes{DType::kBFloat16, DType::kBFloat16},
                              DTypes{DType::kBFloat16, DType::kFloat32}}) {
        for (bool probs : {true, false}) {
          TokenUnpermuteWithRoutingMapTester().padded(true).tokens(T).experts(64).capacity(1).hidden(H)
              .probs(probs).seed(seed++).all_targets(true).Test(d);
        }
      }
    }
  }
}

// Outputs of 1 MiB and more in calls that move 8 MiB take streaming stores (no probs: the gather sums).
TEST(TokenUnpermuteWithRoutingMap, LargeOutputsStream) {
  uint64_t seed = 500;
  for (int64_t H : {2048, 2049}) {
    TokenUnpermuteWithRoutingMapTester().tokens(1024).experts(16).topk(2).hidden(H).probs(false).seed(seed++)
        .Test(DType::kFloat32);
    TokenUnpermuteWithRoutingMapTester().tokens(1024).experts(16).capacity(128).padded(true).hidden(H)
        .probs(false).seed(seed++).Test(DType::kBFloat16);
    TokenUnpermuteWithRoutingMapTester().tokens(1024).experts(16).topk(2).hidden(H).seed(seed++)
        .Test(DType::kBFloat16);
  }
}

}  // namespace
}  // namespace moegrad::testing
