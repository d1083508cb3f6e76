// MoeTokenPermuteWithRoutingMapGrad against the scalar reference, bit for bit: both modes, with and without
// probs, INT8 and BOOL maps, odd hidden sizes, strided views, index data as a forward pass makes it and
// arbitrary (duplicates, tokens nothing routes to), every dtype of the tokens and of the probs, both APIs,
// every SIMD target and thread count.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad {
namespace {

using testing::Api;
using testing::ApiName;
using testing::DTypes;
using testing::DTypesName;
using testing::ElementBits;
using testing::kEveryDTypes;
using testing::Layout;
using testing::LayoutName;
using testing::TestCall;
using testing::TestTensor;

enum class Indices { kForward, kRandom };  // as MoeTokenPermuteWithRoutingMap writes them; arbitrary values

struct Tensors {
  TestTensor grad, probs_in, idx, map, tokens_grad, probs_grad;
};

class TokenPermuteWithRoutingMapGradTester {
 public:
  TokenPermuteWithRoutingMapGradTester& tokens(int64_t v) { T_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& experts(int64_t v) { E_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& hidden(int64_t v) { H_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& topk(int64_t v) { K_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& capacity(int64_t v) { C_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& drop_and_pad(bool v) { dp_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& probs(bool v) { probs_ = v; return *this; }
  // Without probs: pass a probsGradOut anyway (it must stay untouched) and a routing map (shape-checked only).
  TokenPermuteWithRoutingMapGradTester& extras(bool v) { extras_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& map_dtype(DType v) { map_dtype_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& in_layout(Layout v) { in_layout_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& out_layout(Layout v) { out_layout_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& indices(Indices v) { indices_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& seed(uint64_t v) { seed_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& api(Api v) { api_ = v; return *this; }
  TokenPermuteWithRoutingMapGradTester& all_targets(bool v) { all_targets_ = v; return *this; }
  // Every sortedIndices value forced to this one (duplicates everywhere); -1: off.
  TokenPermuteWithRoutingMapGradTester& same_index(int64_t v) { same_index_ = v; return *this; }

  int64_t rows() const { return dp_ ? E_ * C_ : T_ * K_; }

  // Tokens and probs (with their gradients) in one dtype, or each in its own.
  void Test(DType dtype) const { Test(DTypes{dtype, dtype}); }
  void Test(DTypes dtype) const {
    Tensors in = Make(dtype);
    Tensors want = in;
    ref::TokenPermuteWithRoutingMapGrad(Call(want).CppArgs());
    const auto tokens_before = in.tokens_grad.Snapshot();
    const auto probs_before = in.probs_grad.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_);
      ASSERT_TRUE(s.ok()) << s.message() << " " << Describe(dtype) << where;
      EXPECT_TRUE(got.grad.SameBytes(in.grad.Snapshot()) && got.probs_in.SameBytes(in.probs_in.Snapshot()) &&
                  got.idx.SameBytes(in.idx.Snapshot()) && got.map.SameBytes(in.map.Snapshot()))
          << "an input was written" << Describe(dtype) << where;
      const std::string context = Describe(dtype) + where;
      ExpectBitIdentical(got.tokens_grad, want.tokens_grad, tokens_before, "tokensGrad", context);
      if (probs_) ExpectBitIdentical(got.probs_grad, want.probs_grad, probs_before, "probsGrad", context);
      else EXPECT_TRUE(got.probs_grad.SameBytes(probs_before)) << "probsGradOut written " << Describe(dtype) << where;
    };
    if (!all_targets_) return check("");
    const auto targets =
        testing::ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
    if (dtype.tokens == DType::kFloat32 && dtype.weights == DType::kFloat32) {
      std::string names;
      for (const auto& n : targets) names += " " + n;
      ::testing::Test::RecordProperty("simd_targets", names);
    }
  }

 private:
  Tensors Make(DTypes dtype) const {
    const int64_t N = rows();
    std::mt19937_64 rng(seed_);
    Tensors t;
    t.grad = TestTensor(dtype.tokens, {N, H_}, in_layout_, seed_ + 1);
    t.grad.FillUniform(rng);
    t.probs_in = TestTensor(dtype.weights, {N}, in_layout_, seed_ + 2);
    t.probs_in.FillUniform(rng);
    t.idx = TestTensor(DType::kInt32, {N}, in_layout_, seed_ + 3);
    t.map = TestTensor(map_dtype_, {T_, E_}, in_layout_, seed_ + 4);
    t.tokens_grad = TestTensor(dtype.tokens, {T_, H_}, out_layout_, seed_ + 5);
    t.probs_grad = TestTensor(dtype.weights, {T_, E_}, out_layout_, seed_ + 6);
    std::vector<uint8_t> routed(static_cast<size_t>(T_ * E_), 0);
    std::vector<int64_t> order(static_cast<size_t>(std::max(T_, E_)));
    if (!dp_ && indices_ == Indices::kForward) {
      // K distinct experts per token; rows numbered expert-major; a token's slots in ascending expert order.
      for (int64_t r = 0; r < T_; ++r) {
        std::iota(order.begin(), order.begin() + E_, 0);
        std::shuffle(order.begin(), order.begin() + E_, rng);
        for (int64_t k = 0; k < K_; ++k) routed[static_cast<size_t>(r * E_ + order[static_cast<size_t>(k)])] = 1;
      }
      std::vector<int64_t> row_of(routed.size(), -1);
      int64_t next = 0;
      for (int64_t e = 0; e < E_; ++e) {
        for (int64_t r = 0; r < T_; ++r) {
          if (routed[static_cast<size_t>(r * E_ + e)]) row_of[static_cast<size_t>(r * E_ + e)] = next++;
        }
      }
      for (int64_t r = 0, slot = 0; r < T_; ++r) {
        for (int64_t e = 0; e < E_; ++e) {
          if (routed[static_cast<size_t>(r * E_ + e)]) t.idx.SetI(slot++, row_of[static_cast<size_t>(r * E_ + e)]);
        }
      }
    } else if (!dp_) {
      // Arbitrary rows (duplicates, rows no token reads); N routed entries anywhere when they fit.
      std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(N - 1, 0));
      for (int64_t p = 0; p < N; ++p) t.idx.SetI(p, row(rng));
      std::vector<int64_t> cells(routed.size());
      std::iota(cells.begin(), cells.end(), 0);
      std::shuffle(cells.begin(), cells.end(), rng);
      const int64_t count = probs_ ? N : static_cast<int64_t>(rng() % (cells.size() + 1));
      for (int64_t i = 0; i < std::min<int64_t>(count, static_cast<int64_t>(cells.size())); ++i) {
        routed[static_cast<size_t>(cells[static_cast<size_t>(i)])] = 1;
      }
    } else {
      for (auto& r : routed) r = static_cast<uint8_t>(rng() % 3 == 0);
      if (indices_ == Indices::kForward) {
        // Expert e takes its routed tokens in ascending id, then the unrouted ones, the first C of them.
        for (int64_t e = 0; e < E_; ++e) {
          int64_t c = 0;
          for (int pass = 1; pass >= 0; --pass) {
            for (int64_t r = 0; r < T_ && c < C_; ++r) {
              if (routed[static_cast<size_t>(r * E_ + e)] == pass) t.idx.SetI(e * C_ + c++, r);
            }
          }
          for (; c < C_; ++c) t.idx.SetI(e * C_ + c, static_cast<int64_t>(rng() % T_));  // C > T: repeats
        }
      } else {
        std::uniform_int_distribution<int64_t> token(0, T_ - 1);
        for (int64_t p = 0; p < N; ++p) t.idx.SetI(p, token(rng));
      }
    }
    if (same_index_ >= 0) {
      for (int64_t p = 0; p < N; ++p) t.idx.SetI(p, same_index_);
    }
    SetRoutingMap(t.map, routed);
    return t;
  }

  // The call over `t`: probs, routingMap and probsGradOut as configured.
  TestCall<TokenPermuteWithRoutingMapGradArgs> Call(Tensors& t) const {
    TestCall<TokenPermuteWithRoutingMapGradArgs> c;
    c.tensors = {&t.grad,
                 probs_ ? &t.probs_in : nullptr,
                 &t.idx,
                 probs_ || extras_ ? &t.map : nullptr,
                 &t.tokens_grad,
                 probs_ || extras_ ? &t.probs_grad : nullptr};
    c.attrs = {E_, T_, dp_};
    return c;
  }

  std::string Describe(DTypes dtype) const {
    return std::string(" [") + DTypesName(dtype) + " T=" + std::to_string(T_) + " E=" + std::to_string(E_) +
           " H=" + std::to_string(H_) + (dp_ ? " dropAndPad C=" + std::to_string(C_) : " K=" + std::to_string(K_)) +
           (probs_ ? " probs" : "") + (extras_ ? " extras" : "") + " map=" + DTypeName(map_dtype_) +
           " in=" + LayoutName(in_layout_) + " out=" + LayoutName(out_layout_) +
           (indices_ == Indices::kForward ? " forward" : " random") + " seed=" + std::to_string(seed_) +
           " " + ApiName(api_) + " target=" + SimdTarget() + "]";
  }

  int64_t T_ = 4, E_ = 3, H_ = 8, K_ = 2, C_ = 2;
  bool dp_ = false, probs_ = true, extras_ = false, all_targets_ = false;
  DType map_dtype_ = DType::kInt8;
  Layout in_layout_ = Layout::kContiguous, out_layout_ = Layout::kContiguous;
  Indices indices_ = Indices::kForward;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
  int64_t same_index_ = -1;
};

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

TEST(TokenPermuteWithRoutingMapGrad, HiddenSizes) {
  for (int64_t H : {1, 3, 8, 17, 64, 100, 1031, 7168}) {
    for (DType dt : kFloats) {
      TokenPermuteWithRoutingMapGradTester().tokens(5).experts(4).topk(2).hidden(H).seed(H).Test(dt);
      TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(5).experts(4).capacity(3).hidden(H).seed(H)
          .Test(dt);
      TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(3).experts(2).capacity(5).hidden(H)
          .indices(Indices::kRandom).seed(H + 1).Test(dt);
    }
  }
}

// Every (tokens, probs) dtype combination: both modes, forward and arbitrary indices, strided views, several
// probsGrad blocks, no probs (probsGradOut untouched), both APIs.
TEST(TokenPermuteWithRoutingMapGrad, EveryDTypeCombination) {
  uint64_t seed = 70;
  for (const DTypes& d : kEveryDTypes) {
    TokenPermuteWithRoutingMapGradTester().tokens(9).experts(6).topk(3).hidden(100).seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().tokens(8).experts(5).topk(2).hidden(17).indices(Indices::kRandom)
        .in_layout(Layout::kPadded).out_layout(Layout::kTransposed).seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(7).experts(4).capacity(3).hidden(33)
        .map_dtype(DType::kBool).api(Api::kAclnn).seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(5).experts(3).capacity(7).hidden(8)
        .indices(Indices::kRandom).in_layout(Layout::kTransposed).seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().tokens(300).experts(70).topk(4).hidden(3).seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(300).experts(9).capacity(40).hidden(3)
        .seed(++seed).Test(d);
    TokenPermuteWithRoutingMapGradTester().tokens(6).experts(4).topk(2).hidden(21).probs(false).extras(true)
        .seed(++seed).Test(d);
  }
}

TEST(TokenPermuteWithRoutingMapGrad, TopK) {
  for (int64_t K : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 40}) {
    for (DType dt : kFloats) {
      TokenPermuteWithRoutingMapGradTester().tokens(6).experts(40).topk(K).hidden(37).seed(K).Test(dt);
      TokenPermuteWithRoutingMapGradTester().tokens(6).experts(40).topk(K).hidden(37).indices(Indices::kRandom).seed(K)
          .Test(dt);
      // More slots than experts: only without probs.
      TokenPermuteWithRoutingMapGradTester().tokens(3).experts(2).topk(K + 2).hidden(19).probs(false)
          .indices(Indices::kRandom).seed(K).Test(dt);
    }
  }
}

TEST(TokenPermuteWithRoutingMapGrad, LayoutsMapsAndApis) {
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  uint64_t seed = 100;
  for (Layout in : layouts) {
    for (Layout out : layouts) {
      for (DType map : {DType::kInt8, DType::kBool}) {
        for (bool dp : {false, true}) {
          for (Api api : {Api::kCpp, Api::kAclnn}) {
            TokenPermuteWithRoutingMapGradTester().drop_and_pad(dp).tokens(7).experts(5).topk(3).capacity(4).hidden(21)
                .map_dtype(map).in_layout(in).out_layout(out).api(api).seed(++seed).Test(DType::kBFloat16);
            TokenPermuteWithRoutingMapGradTester().drop_and_pad(dp).tokens(7).experts(5).topk(3).capacity(4).hidden(21)
                .map_dtype(map)
                .in_layout(in).out_layout(out).api(api).probs(false).extras(true).seed(++seed).Test(DType::kFloat32);
          }
        }
      }
    }
  }
}

TEST(TokenPermuteWithRoutingMapGrad, DuplicatesAndTokensNothingRoutesTo) {
  for (DType dt : kFloats) {
    // Every permuted row belongs to token 2: the others get zero rows, probsGrad sums per expert.
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(6).experts(3).capacity(4).hidden(33).same_index(2)
        .Test(dt);
    // Dropless: every slot reads row 5, so each token sums K copies of it.
    TokenPermuteWithRoutingMapGradTester().tokens(4).experts(8).topk(6).hidden(33).same_index(5).Test(dt);
    // Capacity beyond the token count (a token twice under one expert) and few rows (tokens left out).
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(3).experts(2).capacity(7).hidden(18)
        .indices(Indices::kRandom).Test(dt);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(40).experts(3).capacity(2).hidden(18).Test(dt);
  }
}

TEST(TokenPermuteWithRoutingMapGrad, EmptyTensors) {
  for (const DTypes& dt : kEveryDTypes) {
    for (bool dp : {false, true}) {
      for (Api api : {Api::kCpp, Api::kAclnn}) {
        TokenPermuteWithRoutingMapGradTester().drop_and_pad(dp).tokens(5).experts(3).topk(2).capacity(2).hidden(0)
            .api(api).Test(dt);
        // No permuted rows: tokensGrad (and probsGrad) all zeros.
        TokenPermuteWithRoutingMapGradTester().drop_and_pad(dp).tokens(5).experts(3).topk(0).capacity(0).hidden(9)
            .api(api).Test(dt);
        TokenPermuteWithRoutingMapGradTester().drop_and_pad(dp).tokens(5).experts(3).topk(0).capacity(0).hidden(0)
            .api(api).Test(dt);
      }
    }
  }
}

TEST(TokenPermuteWithRoutingMapGrad, EveryTargetAndThreadCountBitIdentical) {
  for (DType dt : kFloats) {
    TokenPermuteWithRoutingMapGradTester().tokens(40).experts(16).topk(3).hidden(7168).all_targets(true).Test(dt);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(40).experts(16).capacity(6).hidden(7168)
        .all_targets(true).Test(dt);
    // Many short rows: several probsGrad blocks and row tasks.
    TokenPermuteWithRoutingMapGradTester().tokens(700).experts(9).topk(2).hidden(5).in_layout(Layout::kPadded)
        .all_targets(true).Test(dt);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(700).experts(9).capacity(90).hidden(5)
        .indices(Indices::kRandom).out_layout(Layout::kTransposed).all_targets(true).Test(dt);
  }
  // Probs in another dtype than the tokens: the probsGrad passes are typed by the probs' width.
  for (const DTypes& d : kEveryDTypes) {
    if (d.tokens == d.weights) continue;
    TokenPermuteWithRoutingMapGradTester().tokens(700).experts(9).topk(2).hidden(5).in_layout(Layout::kPadded)
        .all_targets(true).Test(d);
    TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(700).experts(9).capacity(90).hidden(5)
        .indices(Indices::kRandom).out_layout(Layout::kTransposed).all_targets(true).Test(d);
  }
  TokenPermuteWithRoutingMapGradTester().tokens(40).experts(16).topk(3).hidden(7168).all_targets(true)
      .Test({DType::kBFloat16, DType::kFloat32});
  TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(40).experts(16).capacity(6).hidden(7168)
      .all_targets(true).Test({DType::kFloat16, DType::kBFloat16});
}

// Decode sizes in drop-and-pad mode: every slot belongs to one or two tokens, so the threads split the columns
// of the token rows instead of the tokens (rows on and off 64-byte lines).
TEST(TokenPermuteWithRoutingMapGrad, FewTokensSplitColumns) {
  for (int64_t T : {1, 2}) {
    for (int64_t H : {4096, 2085}) {
      for (const DTypes& d : {DTypes{DType::kFloat32, DType::kFloat32}, DTypes{DType::kBFloat16, DType::kBFloat16},
                              DTypes{DType::kBFloat16, DType::kFloat32}}) {
        TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(T).experts(64).capacity(1).hidden(H)
            .seed(T * H).all_targets(true).Test(d);
      }
    }
  }
}

TEST(TokenPermuteWithRoutingMapGrad, WideAndTallRoutingMaps) {
  // Dropless probsGrad reads the map in vectors of up to 64 bytes, four at a time, with byte counters flushed
  // every 255 rows: expert counts around and past those widths, and blocks of more than 255 token rows.
  for (DType dt : kFloats) {
    for (int64_t E : {63, 64, 65, 130, 257, 300}) {
      TokenPermuteWithRoutingMapGradTester().tokens(33).experts(E).topk(5).hidden(3).seed(E).all_targets(true).Test(dt);
    }
    TokenPermuteWithRoutingMapGradTester().tokens(9).experts(300).topk(7).hidden(3).in_layout(Layout::kTransposed)
        .out_layout(Layout::kTransposed).seed(3).Test(dt);
  }
  // Probs in their own dtype, 16-bit tokens with fp32 probs and the reverse.
  TokenPermuteWithRoutingMapGradTester().tokens(33).experts(65).topk(5).hidden(3).seed(7).all_targets(true)
      .Test({DType::kBFloat16, DType::kFloat32});
  TokenPermuteWithRoutingMapGradTester().tokens(33).experts(130).topk(5).hidden(3).seed(8).all_targets(true)
      .Test({DType::kFloat32, DType::kFloat16});
  // 66000 tokens, each routed to every expert: blocks of 258 rows, each counting 258 entries per expert.
  TokenPermuteWithRoutingMapGradTester().tokens(66000).experts(65).topk(65).hidden(1).seed(5).all_targets(true)
      .Test(DType::kFloat32);
}

TEST(TokenPermuteWithRoutingMapGrad, RandomSweep) {
  std::mt19937_64 rng(2024);
  const int64_t hiddens[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100};
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  int cases = 0;
  for (; cases < 3000; ++cases) {
    auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
    const bool dp = rng() & 1;
    const int64_t T = pick(1, 24), E = pick(1, 12);
    const bool forward = rng() % 3 != 0;
    const int64_t K = pick(0, std::min<int64_t>(E, 9));
    const int64_t C = forward ? pick(0, T) : pick(0, 2 * T + 1);
    const bool probs = rng() % 4 != 0;
    TokenPermuteWithRoutingMapGradTester()
        .drop_and_pad(dp).tokens(T).experts(E).topk(K).capacity(C).hidden(hiddens[rng() % 12])
        .probs(probs).extras(!probs && (rng() & 1)).map_dtype(rng() & 1 ? DType::kInt8 : DType::kBool)
        .in_layout(layouts[rng() % 3]).out_layout(layouts[rng() % 3])
        .indices(forward ? Indices::kForward : Indices::kRandom).api(rng() % 4 == 0 ? Api::kAclnn : Api::kCpp)
        .seed(rng()).Test(DTypes{kFloats[rng() % 3], kFloats[rng() % 3]});  // each group's dtype drawn apart
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(cases, 3000);
}

// Realistic model shapes (DeepSeek-V3: H 7168, E 256, K 8), scaled down in tokens.
TEST(TokenPermuteWithRoutingMapGrad, ModelShapes) {
  TokenPermuteWithRoutingMapGradTester().tokens(64).experts(256).topk(8).hidden(7168).Test(DType::kBFloat16);
  TokenPermuteWithRoutingMapGradTester().drop_and_pad(true).tokens(64).experts(256).capacity(2).hidden(7168)
      .Test(DType::kBFloat16);
  TokenPermuteWithRoutingMapGradTester().tokens(32).experts(8).topk(2).hidden(4096).map_dtype(DType::kBool)
      .Test(DType::kFloat16);
  // Training's usual mix: bf16 tokens, fp32 probs.
  TokenPermuteWithRoutingMapGradTester().tokens(64).experts(256).topk(8).hidden(7168)
      .Test({DType::kBFloat16, DType::kFloat32});
}

// A worked example from the formulas, with small integers so every sum is exact.
TEST(TokenPermuteWithRoutingMapGrad, SpecExample) {
  // Dropless, T 2, K 2, E 3. Routing: token 0 -> experts 0, 2; token 1 -> experts 1, 2. Expert-major rows:
  // (t0, e0) = 0, (t1, e1) = 1, (t0, e2) = 2, (t1, e2) = 3, so sortedIndices = [0, 2, 1, 3].
  float g[4 * 2] = {1, 10, 2, 20, 3, 30, 4, 40};
  float pg[4] = {0.5f, 0.25f, 2, 8};
  int32_t idx[4] = {0, 2, 1, 3};
  int8_t map[2 * 3] = {1, 0, 1, 0, 1, 1};
  float tg[2 * 2] = {-1, -1, -1, -1};
  float prg[2 * 3] = {-1, -1, -1, -1, -1, -1};
  TokenPermuteWithRoutingMapGradArgs a;
  a.permuted_token_output_grad = TensorView(g, DType::kFloat32, {4, 2});
  a.permuted_probs_output_grad = TensorView(pg, DType::kFloat32, {4});
  a.sorted_indices = TensorView(idx, DType::kInt32, {4});
  a.routing_map = TensorView(map, DType::kInt8, {2, 3});
  a.num_experts = 3;
  a.tokens_num = 2;
  a.tokens_grad = TensorView(tg, DType::kFloat32, {2, 2});
  a.probs_grad = TensorView(prg, DType::kFloat32, {2, 3});
  ASSERT_TRUE(TokenPermuteWithRoutingMapGrad(a).ok());
  EXPECT_EQ(std::vector<float>(tg, tg + 4), (std::vector<float>{1 + 3, 10 + 30, 2 + 4, 20 + 40}));
  EXPECT_EQ(std::vector<float>(prg, prg + 6), (std::vector<float>{0.5f, 0, 2, 0, 0.25f, 8}));

  // Drop-and-pad, E 2, C 2: sortedIndices = [1, 0, 1, 1] (token 1 twice under expert 1), T 3.
  int32_t idx2[4] = {1, 0, 1, 1};
  float tg2[3 * 2], prg2[3 * 2];
  std::fill(tg2, tg2 + 6, -1.0f);
  std::fill(prg2, prg2 + 6, -1.0f);
  a.sorted_indices = TensorView(idx2, DType::kInt32, {4});
  a.routing_map.reset();
  a.num_experts = 2;
  a.tokens_num = 3;
  a.drop_and_pad = true;
  a.tokens_grad = TensorView(tg2, DType::kFloat32, {3, 2});
  a.probs_grad = TensorView(prg2, DType::kFloat32, {3, 2});
  ASSERT_TRUE(TokenPermuteWithRoutingMapGrad(a).ok());
  EXPECT_EQ(std::vector<float>(tg2, tg2 + 6), (std::vector<float>{2, 20, 1 + 3 + 4, 10 + 30 + 40, 0, 0}));
  EXPECT_EQ(std::vector<float>(prg2, prg2 + 6), (std::vector<float>{0.25f, 0, 0.5f, 2 + 8, 0, 0}));
}

TEST(TokenPermuteWithRoutingMapGrad, RepeatableExecutorRunsAgain) {
  std::vector<float> g(6 * 4), pg(6), tg(3 * 4), prg(3 * 2);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  for (size_t i = 0; i < pg.size(); ++i) pg[i] = static_cast<float>(i) + 0.5f;
  std::vector<int32_t> idx = {0, 2, 1, 1, 0, 2};  // E 2, C 3
  const int64_t gd[] = {6, 4}, pd[] = {6}, td[] = {3, 4}, rd[] = {3, 2};
  aclTensor* tg_t = aclCreateTensor(td, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, td, 2, tg.data());
  aclTensor* prg_t = aclCreateTensor(rd, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, rd, 2, prg.data());
  aclTensor* g_t = aclCreateTensor(gd, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, gd, 2, g.data());
  aclTensor* pg_t = aclCreateTensor(pd, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, pd, 1, pg.data());
  aclTensor* idx_t = aclCreateTensor(pd, 1, ACL_INT32, nullptr, 0, ACL_FORMAT_ND, pd, 1, idx.data());
  uint64_t ws_size = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(g_t, pg_t, idx_t, nullptr, 2, 3, true, tg_t,
                                                                    prg_t, &ws_size, &ex), ACLNN_SUCCESS);
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  std::vector<int64_t> ws(ws_size / 8 + 1);
  for (int run = 0; run < 3; ++run) {
    std::fill(tg.begin(), tg.end(), -7.0f);
    ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGrad(ws.data(), ws_size, ex, nullptr), ACLNN_SUCCESS);
    // Token 0: rows 0 and 4; token 1: rows 2, 3; token 2: rows 1, 5.
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(tg[j], g[0 * 4 + j] + g[4 * 4 + j]);
      EXPECT_EQ(tg[4 + j], g[2 * 4 + j] + g[3 * 4 + j]);
      EXPECT_EQ(tg[8 + j], g[1 * 4 + j] + g[5 * 4 + j]);
    }
    EXPECT_EQ(prg, (std::vector<float>{pg[0], pg[4], pg[2] , pg[3], pg[1], pg[5]}));
  }
  EXPECT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
  for (aclTensor* x : {tg_t, prg_t, g_t, pg_t, idx_t}) aclDestroyTensor(x);
}

// Element offsets past 2^32: row strides of 2^32 + 1 elements in address space reserved but never touched
// except for the few rows the call reads and writes.
TEST(TokenPermuteWithRoutingMapGrad, SixtyFourBitOffsets) {
  const int64_t stride = (int64_t{1} << 32) + 1;
  const size_t bytes = static_cast<size_t>(2 * stride + 64) * sizeof(float);
  void* g_mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* t_mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(g_mem, MAP_FAILED);
  ASSERT_NE(t_mem, MAP_FAILED);
  float* g = static_cast<float*>(g_mem);
  float* tg = static_cast<float*>(t_mem);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 20; ++j) g[r * stride + j] = static_cast<float>(r * 100 + j);
  }
  int32_t idx[3] = {2, 0, 1};  // dropless, T 3, K 1
  TokenPermuteWithRoutingMapGradArgs a;
  a.permuted_token_output_grad = TensorView(g, DType::kFloat32, {3, 20}, {stride, 1});
  a.sorted_indices = TensorView(idx, DType::kInt32, {3});
  a.num_experts = 4;
  a.tokens_num = 3;
  a.tokens_grad = TensorView(tg, DType::kFloat32, {3, 20}, {stride, 1});
  ASSERT_TRUE(TokenPermuteWithRoutingMapGrad(a).ok());
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t j = 0; j < 20; ++j) ASSERT_EQ(tg[t * stride + j], g[idx[t] * stride + j]) << t << " " << j;
  }
  munmap(g_mem, bytes);
  munmap(t_mem, bytes);
}

}  // namespace
}  // namespace moegrad
