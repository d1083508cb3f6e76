// MoeTokenUnpermuteWithRoutingMapGrad against the scalar reference, bit for bit (both compute d_i as the
// canonical 16-lane dot product): both modes, with and without probs, INT8 and BOOL maps, odd hidden sizes,
// strided views, index data as the forward makes it and arbitrary (duplicate rows, tokens routed nowhere),
// every dtype of the tokens and of the probs, every API, every SIMD target and thread count; the worked
// examples of the spec and MindSpeed's call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"
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
using testing::kEveryDTypes;
using testing::Layout;
using testing::LayoutName;
using testing::TestCall;
using testing::TestTensor;
using Args = TokenUnpermuteWithRoutingMapGradArgs;

enum class Indices { kForward, kRandom };  // as MoeTokenUnpermuteWithRoutingMap writes them; arbitrary values

struct Tensors {
  TestTensor grad, out_index, token_id, map, perm, probs, perm_grad, probs_grad;
};

class TokenUnpermuteWithRoutingMapGradTester {
 public:
  TokenUnpermuteWithRoutingMapGradTester& tokens(int64_t v) { T_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& experts(int64_t v) { E_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& hidden(int64_t v) { H_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& topk(int64_t v) { K_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& capacity(int64_t v) { C_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& drop_and_pad(bool v) { dp_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& probs(bool v) { probs_ = v; return *this; }
  // Without probs: pass permutedTokens, a routing map and a probsGradOut anyway (checked, never read or written).
  TokenUnpermuteWithRoutingMapGradTester& extras(bool v) { extras_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& map_dtype(DType v) { map_dtype_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& in_layout(Layout v) { in_layout_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& out_layout(Layout v) { out_layout_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& indices(Indices v) { indices_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& seed(uint64_t v) { seed_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& api(Api v) { api_ = v; return *this; }
  TokenUnpermuteWithRoutingMapGradTester& all_targets(bool v) { all_targets_ = v; return *this; }
  // Dropless: permuteTokenId = outIndex (MindSpeed passes sortedIndices as both).
  TokenUnpermuteWithRoutingMapGradTester& mindspeed(bool v) { mindspeed_ = v; return *this; }
  // Every outIndex value forced to this one (every pair on one row); -1: off.
  TokenUnpermuteWithRoutingMapGradTester& same_row(int64_t v) { same_row_ = v; return *this; }
  // Pad mode: the fraction of the map routed.
  TokenUnpermuteWithRoutingMapGradTester& density(double v) { density_ = v; return *this; }

  int64_t rows() const { return dp_ ? E_ * C_ : T_ * K_; }

  void Test(DType dtype) const { Test(DTypes{dtype, dtype}); }
  void Test(DTypes dtype) const {
    const Tensors in = Make(dtype);
    Tensors want = in;
    ref::TokenUnpermuteWithRoutingMapGrad(Call(want).CppArgs());
    const auto grad_before = in.perm_grad.Snapshot();
    const auto probs_before = in.probs_grad.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_);
      const std::string context = Describe(dtype) + where;
      ASSERT_TRUE(s.ok()) << s.message() << context;
      for (auto [t, u] : {std::pair{&got.grad, &in.grad}, {&got.out_index, &in.out_index},
                          {&got.token_id, &in.token_id}, {&got.map, &in.map}, {&got.perm, &in.perm},
                          {&got.probs, &in.probs}}) {
        EXPECT_TRUE(t->SameBytes(u->Snapshot())) << "an input was written" << context;
      }
      ExpectBitIdentical(got.perm_grad, want.perm_grad, grad_before, "permutedTokensGrad", context);
      if (probs_) ExpectBitIdentical(got.probs_grad, want.probs_grad, probs_before, "probsGrad", context);
      else EXPECT_TRUE(got.probs_grad.SameBytes(probs_before)) << "probsGradOut written" << context;
    };
    if (!all_targets_) return check("");
    testing::ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
  }

 private:
  Tensors Make(DTypes dtype) const {
    const int64_t N = rows();
    std::mt19937_64 rng(seed_);
    Tensors t;
    t.grad = TestTensor(dtype.tokens, {T_, H_}, in_layout_, seed_ + 1);
    t.grad.FillUniform(rng);
    t.out_index = TestTensor(DType::kInt32, {N}, in_layout_, seed_ + 2);
    t.token_id = TestTensor(DType::kInt32, {N}, in_layout_, seed_ + 3);
    t.map = TestTensor(map_dtype_, {T_, E_}, in_layout_, seed_ + 4);
    t.perm = TestTensor(dtype.tokens, {N, H_}, in_layout_, seed_ + 5);
    t.perm.FillUniform(rng);
    t.probs = TestTensor(dtype.weights, {T_, E_}, in_layout_, seed_ + 6);
    t.probs.FillUniform(rng);
    t.perm_grad = TestTensor(dtype.tokens, {N, H_}, out_layout_, seed_ + 7);
    t.probs_grad = TestTensor(dtype.weights, {T_, E_}, out_layout_, seed_ + 8);
    std::vector<uint8_t> routed = testing::RandomRouting(T_, E_, dp_, std::min(K_, E_), density_, rng);
    auto at = [&](int64_t r, int64_t e) { return static_cast<size_t>(r * E_ + e); };
    if (!dp_) {
      // The permute's sortedIndices: slot t*K + k (token t's k-th routed expert) holds its expert-major row.
      std::vector<int64_t> row_of(routed.size(), -1);
      int64_t next = 0;
      for (int64_t e = 0; e < E_; ++e) {
        for (int64_t r = 0; r < T_; ++r) {
          if (routed[at(r, e)]) row_of[at(r, e)] = next++;
        }
      }
      for (int64_t r = 0, slot = 0; r < T_; ++r) {
        for (int64_t e = 0; e < E_ && slot < N; ++e) {
          if (routed[at(r, e)]) t.out_index.SetI(slot++, row_of[at(r, e)]);
        }
      }
      std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(N - 1, 0));
      for (int64_t i = 0; i < N; ++i) {
        if (indices_ == Indices::kRandom) t.out_index.SetI(i, row(rng));
        t.token_id.SetI(i, mindspeed_ ? t.out_index.GetI(i) : i / K_);
      }
    } else {
      // The permute's sortedIndices q -> token: expert e takes its routed tokens in ascending id, then the
      // unrouted ones, the first C of them (C > T repeats tokens). The forward's outputs sort it stably.
      std::vector<int64_t> sorted(static_cast<size_t>(N));
      for (int64_t e = 0; e < E_; ++e) {
        int64_t c = 0;
        for (int pass = 1; pass >= 0; --pass) {
          for (int64_t r = 0; r < T_ && c < C_; ++r) {
            if (routed[at(r, e)] == pass) sorted[static_cast<size_t>(e * C_ + c++)] = r;
          }
        }
        for (; c < C_; ++c) sorted[static_cast<size_t>(e * C_ + c)] = static_cast<int64_t>(rng() % T_);
      }
      std::vector<int64_t> order(static_cast<size_t>(N));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return sorted[static_cast<size_t>(a)] < sorted[static_cast<size_t>(b)];
      });
      std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(N - 1, 0));
      std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(T_ - 1, 0));
      for (int64_t i = 0; i < N; ++i) {
        const bool fwd = indices_ == Indices::kForward;
        t.out_index.SetI(i, fwd ? order[static_cast<size_t>(i)] : row(rng));
        t.token_id.SetI(i, fwd ? sorted[static_cast<size_t>(order[static_cast<size_t>(i)])] : token(rng));
      }
    }
    if (same_row_ >= 0) {
      for (int64_t i = 0; i < N; ++i) t.out_index.SetI(i, same_row_);
    }
    SetRoutingMap(t.map, routed);
    return t;
  }

  TestCall<Args> Call(Tensors& t) const {
    const bool with = probs_ || extras_;
    TestCall<Args> c;
    c.tensors = {&t.grad, &t.out_index, &t.token_id, with ? &t.map : nullptr, with ? &t.perm : nullptr,
                 probs_ ? &t.probs : nullptr, &t.perm_grad, with ? &t.probs_grad : nullptr};
    c.attrs = {dp_};
    return c;
  }

  std::string Describe(DTypes dtype) const {
    return std::string(" [") + DTypesName(dtype) + " T=" + std::to_string(T_) + " E=" + std::to_string(E_) +
           " H=" + std::to_string(H_) + (dp_ ? " dropAndPad C=" + std::to_string(C_) : " K=" + std::to_string(K_)) +
           (probs_ ? " probs" : "") + (extras_ ? " extras" : "") + (mindspeed_ ? " mindspeed" : "") +
           " map=" + DTypeName(map_dtype_) + " in=" + LayoutName(in_layout_) + " out=" + LayoutName(out_layout_) +
           (indices_ == Indices::kForward ? " forward" : " random") + " seed=" + std::to_string(seed_) + " " +
           ApiName(api_) + " target=" + SimdTarget() + "]";
  }

  int64_t T_ = 4, E_ = 3, H_ = 8, K_ = 2, C_ = 2;
  bool dp_ = false, probs_ = true, extras_ = false, all_targets_ = false, mindspeed_ = false;
  DType map_dtype_ = DType::kInt8;
  Layout in_layout_ = Layout::kContiguous, out_layout_ = Layout::kContiguous;
  Indices indices_ = Indices::kForward;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
  int64_t same_row_ = -1;
  double density_ = 0.4;
};

using Tester = TokenUnpermuteWithRoutingMapGradTester;
constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

TEST(TokenUnpermuteWithRoutingMapGrad, HiddenSizes) {
  for (int64_t H : {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 129, 1031, 7168}) {
    for (DType dt : kFloats) {
      Tester().tokens(5).experts(4).topk(2).hidden(H).seed(H).Test(dt);
      Tester().drop_and_pad(true).tokens(5).experts(4).capacity(3).hidden(H).seed(H).Test(dt);
      Tester().drop_and_pad(true).tokens(3).experts(2).capacity(5).hidden(H).indices(Indices::kRandom).seed(H + 1)
          .Test(dt);
      Tester().tokens(5).experts(4).topk(2).hidden(H).probs(false).seed(H).Test(dt);
    }
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, TopKAndExperts) {
  for (int64_t K = 1; K <= 16; ++K) {
    Tester().tokens(6).experts(std::max<int64_t>(K, 16)).topk(K).hidden(37).seed(K).Test(DType::kFloat32);
    Tester().tokens(6).experts(K).topk(K).hidden(20).seed(K).Test(DType::kBFloat16);  // every token everywhere
    Tester().tokens(6).experts(40).topk(K).hidden(19).indices(Indices::kRandom).seed(K).Test(DType::kFloat16);
  }
  // Many experts, most of them empty.
  for (int64_t E : {1, 2, 63, 64, 65, 256, 512}) {
    Tester().tokens(9).experts(E).topk(1).hidden(24).seed(E).Test(DType::kFloat32);
    Tester().tokens(9).experts(E).topk(std::min<int64_t>(E, 8)).hidden(5).seed(E).Test(DType::kBFloat16);
    Tester().drop_and_pad(true).tokens(9).experts(E).capacity(2).hidden(17).seed(E).Test(DType::kFloat16);
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, CapacityBelowAndAboveDemand) {
  for (DType dt : kFloats) {
    for (int64_t C : {1, 2, 5, 9, 20}) {
      Tester().drop_and_pad(true).tokens(9).experts(4).capacity(C).hidden(33).density(0.6).seed(C).Test(dt);
    }
    // Tokens routed nowhere (density 0: every row is padding) and everywhere.
    Tester().drop_and_pad(true).tokens(7).experts(3).capacity(4).hidden(18).density(0.0).Test(dt);
    Tester().drop_and_pad(true).tokens(7).experts(3).capacity(4).hidden(18).density(1.0).Test(dt);
    Tester().drop_and_pad(true).tokens(40).experts(3).capacity(2).hidden(18).density(0.1).Test(dt);
  }
}

// Every (tokens, probs) dtype pair: both modes, forward and arbitrary indices, strided views, no probs.
TEST(TokenUnpermuteWithRoutingMapGrad, EveryDTypeCombination) {
  uint64_t seed = 70;
  for (const DTypes& d : kEveryDTypes) {
    Tester().tokens(9).experts(6).topk(3).hidden(100).seed(++seed).Test(d);
    Tester().tokens(8).experts(5).topk(2).hidden(17).indices(Indices::kRandom).in_layout(Layout::kPadded)
        .out_layout(Layout::kTransposed).seed(++seed).Test(d);
    Tester().drop_and_pad(true).tokens(7).experts(4).capacity(3).hidden(33).map_dtype(DType::kBool)
        .api(Api::kAclnn).seed(++seed).Test(d);
    Tester().drop_and_pad(true).tokens(5).experts(3).capacity(7).hidden(8).indices(Indices::kRandom)
        .in_layout(Layout::kTransposed).api(Api::kCppPlan).seed(++seed).Test(d);
    Tester().tokens(300).experts(70).topk(4).hidden(3).seed(++seed).Test(d);
    Tester().tokens(6).experts(4).topk(2).hidden(21).probs(false).extras(true).seed(++seed).Test(d);
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, LayoutsMapsAndApis) {
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  uint64_t seed = 100;
  for (Layout in : layouts) {
    for (Layout out : layouts) {
      for (DType map : {DType::kInt8, DType::kBool}) {
        for (bool dp : {false, true}) {
          for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
            Tester().drop_and_pad(dp).tokens(7).experts(5).topk(3).capacity(4).hidden(21).map_dtype(map)
                .in_layout(in).out_layout(out).api(api).seed(++seed).Test(DType::kBFloat16);
            Tester().drop_and_pad(dp).tokens(7).experts(5).topk(3).capacity(4).hidden(21).map_dtype(map)
                .in_layout(in).out_layout(out).api(api).probs(false).extras(true).seed(++seed).Test(DType::kFloat32);
          }
        }
      }
    }
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, DuplicateRowsAndUnreferencedRows) {
  for (DType dt : kFloats) {
    // Every pair on row 2: the other rows are +0, row 2 sums all pairs in ascending i.
    Tester().drop_and_pad(true).tokens(6).experts(3).capacity(4).hidden(33).same_row(2).Test(dt);
    Tester().tokens(4).experts(8).topk(6).hidden(33).same_row(5).Test(dt);
    Tester().tokens(4).experts(8).topk(6).hidden(40).same_row(0).probs(false).Test(dt);
    // Arbitrary tokens in pad mode: one token twice under one expert sums its d_i.
    Tester().drop_and_pad(true).tokens(3).experts(2).capacity(7).hidden(18).indices(Indices::kRandom).Test(dt);
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, MindSpeedSortedIndicesAsBothIndexInputs) {
  for (const DTypes& d : kEveryDTypes) {
    Tester().tokens(11).experts(8).topk(3).hidden(40).mindspeed(true).seed(5).Test(d);
    Tester().tokens(11).experts(8).topk(3).hidden(40).mindspeed(true).probs(false).seed(6).Test(d);
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, EmptyTensors) {
  for (const DTypes& dt : kEveryDTypes) {
    for (bool dp : {false, true}) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        Tester().drop_and_pad(dp).tokens(5).experts(3).topk(2).capacity(2).hidden(0).api(api).Test(dt);
        // No pairs: nothing to write but probsGrad, all +0.
        Tester().drop_and_pad(dp).tokens(5).experts(3).topk(0).capacity(0).hidden(9).api(api).Test(dt);
        Tester().drop_and_pad(dp).tokens(5).experts(0).topk(0).capacity(0).hidden(9).api(api).Test(dt);
        Tester().drop_and_pad(dp).tokens(0).experts(3).topk(0).capacity(0).hidden(9).api(api).Test(dt);
      }
    }
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, EveryTargetAndThreadCountBitIdentical) {
  for (DType dt : kFloats) {
    Tester().tokens(40).experts(16).topk(3).hidden(7168).all_targets(true).Test(dt);
    Tester().drop_and_pad(true).tokens(40).experts(16).capacity(6).hidden(7168).all_targets(true).Test(dt);
    Tester().tokens(700).experts(9).topk(2).hidden(5).in_layout(Layout::kPadded).all_targets(true).Test(dt);
    Tester().drop_and_pad(true).tokens(700).experts(9).capacity(90).hidden(5).indices(Indices::kRandom)
        .out_layout(Layout::kTransposed).all_targets(true).Test(dt);
    Tester().tokens(300).experts(8).topk(2).hidden(300).probs(false).all_targets(true).Test(dt);
  }
  for (const DTypes& d : kEveryDTypes) {
    if (d.tokens == d.weights) continue;
    Tester().tokens(200).experts(9).topk(2).hidden(33).all_targets(true).Test(d);
    Tester().drop_and_pad(true).tokens(200).experts(9).capacity(30).hidden(17).all_targets(true).Test(d);
  }
}

// Decode sizes in drop-and-pad mode: one or two tokens own every pair, so the threads take the row walk, split
// by rows, instead of the token walk (the same bits; rows on and off 64-byte lines).
TEST(TokenUnpermuteWithRoutingMapGrad, FewTokensSplitRows) {
  for (int64_t T : {1, 2}) {
    for (int64_t H : {4096, 2085}) {
      for (const DTypes& d : {DTypes{DType::kFloat32, DType::kFloat32}, DTypes{DType::kBFloat16, DType::kBFloat16},
                              DTypes{DType::kBFloat16, DType::kFloat32}}) {
        Tester().drop_and_pad(true).tokens(T).experts(64).capacity(1).hidden(H).seed(T * H).all_targets(true)
            .Test(d);
      }
    }
    // Dropless, 8 pairs a token at DeepSeek-V3 width: 16-bit rows with probs count double for the thread count,
    // so a one-token call runs on two threads (rows on 64-byte lines and off them).
    for (int64_t H : {7168, 7000}) {
      for (const DTypes& d : {DTypes{DType::kBFloat16, DType::kBFloat16}, DTypes{DType::kFloat16, DType::kFloat16},
                              DTypes{DType::kBFloat16, DType::kFloat32}}) {
        Tester().tokens(T).experts(64).topk(8).hidden(H).seed(T + H).all_targets(true).Test(d);
      }
    }
  }
}

TEST(TokenUnpermuteWithRoutingMapGrad, RandomSweep) {
  std::mt19937_64 rng(2026);
  const int64_t hiddens[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100};
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  int cases = 0;
  for (; cases < 1500; ++cases) {
    auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
    const bool dp = rng() & 1;
    const int64_t T = pick(1, 24), E = pick(1, 12);
    const bool forward = rng() % 3 != 0;
    const bool probs = rng() % 4 != 0;
    Tester().drop_and_pad(dp).tokens(T).experts(E).topk(pick(0, E)).capacity(pick(0, 2 * T + 1))
        .hidden(hiddens[rng() % 13]).probs(probs).extras(!probs && (rng() & 1))
        .map_dtype(rng() & 1 ? DType::kInt8 : DType::kBool).in_layout(layouts[rng() % 3])
        .out_layout(layouts[rng() % 3]).indices(forward ? Indices::kForward : Indices::kRandom)
        .density(static_cast<double>(rng() % 5) / 4.0).mindspeed(!dp && rng() % 5 == 0)
        .api(rng() % 4 == 0 ? Api::kAclnn : Api::kCpp).seed(rng())
        .Test(DTypes{kFloats[rng() % 3], kFloats[rng() % 3]});
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(cases, 1500);
}

// DeepSeek-V3 (H 7168, E 256, K 8) scaled down in tokens; training's bf16 tokens with fp32 probs.
TEST(TokenUnpermuteWithRoutingMapGrad, ModelShapes) {
  Tester().tokens(64).experts(256).topk(8).hidden(7168).Test({DType::kBFloat16, DType::kFloat32});
  Tester().drop_and_pad(true).tokens(64).experts(256).capacity(2).hidden(7168)
      .Test({DType::kBFloat16, DType::kFloat32});
  Tester().tokens(32).experts(8).topk(2).hidden(4096).map_dtype(DType::kBool).Test(DType::kFloat16);
}

// The spec's worked examples (fp32, T 3, E 3, H 2; permuted rows {1,2} {3,4} ... {11,12}), through the aclnn API
// with restoreShape given.
struct Example {
  bool drop_and_pad;
  std::vector<int8_t> map;
  std::vector<float> probs, grad;
  std::vector<int32_t> out_index, token_id;
  std::vector<float> want_perm_grad, want_probs_grad;
};

void RunExample(const Example& x, bool with_probs) {
  std::vector<float> perm = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> perm_grad(12, -7.0f), probs_grad(9, -7.0f);
  std::vector<float> grad = x.grad, probs = x.probs;
  std::vector<int8_t> map = x.map;
  std::vector<int32_t> out_index = x.out_index, token_id = x.token_id;
  const int64_t g_dims[] = {3, 2}, p_dims[] = {6, 2}, m_dims[] = {3, 3}, i_dims[] = {6};
  auto make = [](const int64_t* dims, uint64_t rank, aclDataType dt, void* data) {
    return aclCreateTensor(dims, rank, dt, nullptr, 0, ACL_FORMAT_ND, dims, rank, data);
  };
  aclTensor* g_t = make(g_dims, 2, ACL_FLOAT, grad.data());
  aclTensor* oi_t = make(i_dims, 1, ACL_INT32, out_index.data());
  aclTensor* ti_t = make(i_dims, 1, ACL_INT32, token_id.data());
  aclTensor* m_t = make(m_dims, 2, ACL_INT8, map.data());
  aclTensor* x_t = make(p_dims, 2, ACL_FLOAT, perm.data());
  aclTensor* pr_t = make(m_dims, 2, ACL_FLOAT, probs.data());
  aclTensor* pg_t = make(p_dims, 2, ACL_FLOAT, perm_grad.data());
  aclTensor* prg_t = make(m_dims, 2, ACL_FLOAT, probs_grad.data());
  const int64_t shape[] = {3, 2};
  aclIntArray* restore = aclCreateIntArray(shape, 2);
  uint64_t ws_size = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize(
                g_t, oi_t, ti_t, with_probs ? m_t : nullptr, with_probs ? x_t : nullptr, with_probs ? pr_t : nullptr,
                x.drop_and_pad, restore, pg_t, with_probs ? prg_t : nullptr, &ws_size, &ex),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  std::vector<int64_t> ws(ws_size / 8 + 1);
  for (int run = 0; run < 2; ++run) {
    std::fill(perm_grad.begin(), perm_grad.end(), -7.0f);
    ASSERT_EQ(aclnnMoeTokenUnpermuteWithRoutingMapGrad(ws.data(), ws_size, ex, nullptr), ACLNN_SUCCESS);
    if (with_probs) {
      EXPECT_EQ(perm_grad, x.want_perm_grad);
      EXPECT_EQ(probs_grad, x.want_probs_grad);
    } else {
      EXPECT_EQ(probs_grad, std::vector<float>(9, -7.0f));
    }
  }
  EXPECT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
  aclDestroyIntArray(restore);
  for (aclTensor* t : {g_t, oi_t, ti_t, m_t, x_t, pr_t, pg_t, prg_t}) aclDestroyTensor(t);
}

TEST(TokenUnpermuteWithRoutingMapGrad, SpecExamples) {
  const Example dropless = {false,
                            {1, 0, 1, 1, 1, 0, 0, 1, 1},
                            {0.5f, 0, 0.25f, 1, 2, 0, 0, 4, 0.5f},
                            {1, 0, 0, 1, 1, 1},
                            {0, 4, 1, 2, 3, 5},
                            {0, 0, 1, 1, 2, 2},
                            {0.5f, 0, 0, 1, 0, 2, 4, 4, 0.25f, 0, 0.5f, 0.5f},
                            {1, 0, 9, 4, 6, 0, 0, 15, 23}};
  RunExample(dropless, true);
  const Example pad = {true,
                       {1, 1, 1, 1, 0, 0, 1, 0, 0},
                       {0.5f, 0.25f, 0.25f, 1, 0, 0, 1, 0, 0},
                       {1, 0, 0, 1, 5, 5},
                       {0, 2, 4, 1, 3, 5},
                       {0, 0, 0, 1, 1, 1},
                       {0.5f, 0, 0, 1, 0.25f, 0, 0, 0, 0.25f, 0, 0, 0},
                       {1, 5, 9, 4, 8, 12, 0, 0, 0}};
  RunExample(pad, true);
  RunExample(dropless, false);
  RunExample(pad, false);
}

// Each term is one multiply, never skipped: a zero weight against Inf gives NaN, against a negative value -0.
TEST(TokenUnpermuteWithRoutingMapGrad, ZeroWeightsAreNotSkipped) {
  const float inf = std::numeric_limits<float>::infinity();
  float grad[2] = {inf, -3.0f};  // T 1, H 2
  float perm[2] = {1.0f, 1.0f};  // N 1
  float probs[1] = {0.0f};
  int8_t map[1] = {1};
  int32_t out_index[1] = {0}, token_id[1] = {0};
  float perm_grad[2] = {7, 7}, probs_grad[1] = {7};
  Args a;
  a.unpermuted_tokens_grad = TensorView(grad, DType::kFloat32, {1, 2});
  a.out_index = TensorView(out_index, DType::kInt32, {1});
  a.permute_token_id = TensorView(token_id, DType::kInt32, {1});
  a.routing_map = TensorView(map, DType::kInt8, {1, 1});
  a.permuted_tokens = TensorView(perm, DType::kFloat32, {1, 2});
  a.probs = TensorView(probs, DType::kFloat32, {1, 1});
  a.restore_shape = std::vector<int64_t>{1, 2};
  a.permuted_tokens_grad = TensorView(perm_grad, DType::kFloat32, {1, 2});
  a.probs_grad = TensorView(probs_grad, DType::kFloat32, {1, 1});
  ASSERT_TRUE(TokenUnpermuteWithRoutingMapGrad(a).ok());
  EXPECT_TRUE(std::isnan(perm_grad[0]));
  EXPECT_EQ(perm_grad[1], 0.0f);
  EXPECT_TRUE(std::signbit(perm_grad[1]));
  EXPECT_EQ(probs_grad[0], inf);  // 1 * inf + 1 * -3
}

}  // namespace
}  // namespace moegrad
