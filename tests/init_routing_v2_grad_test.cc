// MoeInitRoutingV2Grad against the scalar reference, bit for bit: both modes, activeNum below, at and above L,
// odd hidden sizes, strided views, index data as MoeInitRoutingV2 makes it and arbitrary (duplicates, skipped
// values), every API, every SIMD target and thread count; the spec's worked examples; and the bad-argument
// table (status, message, phase, every tensor untouched).
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad {
namespace {

using testing::AclCall;
using testing::Api;
using testing::ApiName;
using testing::Layout;
using testing::LayoutName;
using testing::OpEntry;
using testing::TestCall;
using testing::TestTensor;

enum class Indices { kForward, kRandom };  // as MoeInitRoutingV2 writes them; any valid values

// expandedRowIdx as MoeInitRoutingV2 writes it for the token-major pairs' experts: the pairs sorted by expert,
// stably (a counting sort). Mode 0: each pair's position in that order; mode 1: e*C + its rank inside expert e,
// -1 from rank C on.
std::vector<int64_t> ForwardRowIdx(const std::vector<int64_t>& expert, int64_t E, int64_t C, bool drop_pad) {
  std::vector<int64_t> count(static_cast<size_t>(E), 0), start(static_cast<size_t>(E), 0), rank;
  for (int64_t e : expert) rank.push_back(count[static_cast<size_t>(e)]++);
  for (int64_t e = 1; e < E; ++e) start[static_cast<size_t>(e)] = start[e - 1] + count[e - 1];
  std::vector<int64_t> idx;
  for (size_t p = 0; p < expert.size(); ++p) {
    const int64_t e = expert[p];
    if (drop_pad) idx.push_back(rank[p] < C ? e * C + rank[p] : -1);
    else idx.push_back(start[static_cast<size_t>(e)] + rank[p]);
  }
  return idx;
}

struct Tensors {
  TestTensor grad, idx, out;
};

class InitRoutingV2GradTester {
 public:
  InitRoutingV2GradTester& tokens(int64_t v) { N_ = v; return *this; }
  InitRoutingV2GradTester& hidden(int64_t v) { H_ = v; return *this; }
  InitRoutingV2GradTester& topk(int64_t v) { K_ = v; return *this; }
  InitRoutingV2GradTester& experts(int64_t v) { E_ = v; return *this; }
  InitRoutingV2GradTester& capacity(int64_t v) { C_ = v; return *this; }
  InitRoutingV2GradTester& mode(int64_t v) { mode_ = v; return *this; }
  InitRoutingV2GradTester& active_num(int64_t v) { active_ = v; return *this; }
  InitRoutingV2GradTester& indices(Indices v) { indices_ = v; return *this; }
  InitRoutingV2GradTester& in_layout(Layout v) { in_layout_ = v; return *this; }
  InitRoutingV2GradTester& out_layout(Layout v) { out_layout_ = v; return *this; }
  InitRoutingV2GradTester& seed(uint64_t v) { seed_ = v; return *this; }
  InitRoutingV2GradTester& api(Api v) { api_ = v; return *this; }
  InitRoutingV2GradTester& runs(int v) { runs_ = v; return *this; }
  InitRoutingV2GradTester& all_targets(bool v) { all_targets_ = v; return *this; }
  // Every expandedRowIdx value forced to this one (duplicates everywhere); INT64_MIN: off.
  InitRoutingV2GradTester& same_index(int64_t v) { same_index_ = v; return *this; }

  int64_t pairs() const { return N_ * K_; }
  // Rows of gradExpandedX in mode 0: A = min(activeNum, L) when activeNum > 0.
  int64_t active_rows() const { return active_ > 0 && active_ < pairs() ? active_ : pairs(); }

  void Test(DType dtype) const {
    Tensors in = Make(dtype);
    Tensors want = in;
    ref::InitRoutingV2Grad(Call(want).CppArgs());
    const auto out_before = in.out.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_, runs_);
      ASSERT_TRUE(s.ok()) << s.message() << Describe(dtype) << where;
      EXPECT_TRUE(got.grad.SameBytes(in.grad.Snapshot()) && got.idx.SameBytes(in.idx.Snapshot()))
          << "an input was written" << Describe(dtype) << where;
      ExpectBitIdentical(got.out, want.out, out_before, "out", Describe(dtype) + where);
    };
    if (!all_targets_) return check("");
    const auto targets =
        testing::ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
    if (dtype == DType::kFloat32) {
      std::string names;
      for (const auto& n : targets) names += " " + n;
      ::testing::Test::RecordProperty("simd_targets", names);
    }
  }

 private:
  Tensors Make(DType dtype) const {
    const bool dp = mode_ == 1;
    const int64_t L = pairs();
    std::mt19937_64 rng(seed_);
    Tensors t;
    t.grad = dp ? TestTensor(dtype, {E_, C_, H_}, in_layout_, seed_ + 1)
                : TestTensor(dtype, {active_rows(), H_}, in_layout_, seed_ + 1);
    t.grad.FillUniform(rng);
    t.idx = TestTensor(DType::kInt32, {L}, in_layout_, seed_ + 2);
    t.out = TestTensor(dtype, {N_, H_}, out_layout_, seed_ + 3);
    std::vector<int64_t> idx(static_cast<size_t>(L), same_index_);  // same_index: E or C may be 0
    if (same_index_ == INT64_MIN && indices_ == Indices::kForward) {
      // Any expert per slot (a token's slots may repeat an expert; experts may get no pair).
      std::vector<int64_t> expert;
      for (int64_t p = 0; p < L; ++p) expert.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(E_)));
      idx = ForwardRowIdx(expert, E_, C_, dp);
    } else if (same_index_ == INT64_MIN) {
      // Any valid value: duplicates, rows nothing reads, and (mode 0) values at or past activeNum, skipped.
      const int64_t lo = dp ? -1 : 0, hi = dp ? E_ * C_ : L;
      std::uniform_int_distribution<int64_t> value(lo, std::max(lo, hi - 1));
      for (auto& v : idx) v = value(rng);
    }
    for (int64_t p = 0; p < L; ++p) t.idx.SetI(p, idx[static_cast<size_t>(p)]);
    return t;
  }

  TestCall<InitRoutingV2GradArgs> Call(Tensors& t) const {
    TestCall<InitRoutingV2GradArgs> c;
    c.tensors = {&t.grad, &t.idx, &t.out};
    c.attrs = {K_, mode_, active_};
    return c;
  }

  std::string Describe(DType dtype) const {
    return std::string(" [") + DTypeName(dtype) + " N=" + std::to_string(N_) + " K=" + std::to_string(K_) +
           " H=" + std::to_string(H_) +
           (mode_ == 1 ? " drop-pad E=" + std::to_string(E_) + " C=" + std::to_string(C_)
                       : " dropless E=" + std::to_string(E_) + " activeNum=" + std::to_string(active_)) +
           " in=" + LayoutName(in_layout_) + " out=" + LayoutName(out_layout_) +
           (indices_ == Indices::kForward ? " forward" : " random") + " seed=" + std::to_string(seed_) + " " +
           ApiName(api_) + " target=" + SimdTarget() + "]";
  }

  int64_t N_ = 5, H_ = 8, K_ = 2, E_ = 3, C_ = 3, mode_ = 0, active_ = 0;
  Indices indices_ = Indices::kForward;
  Layout in_layout_ = Layout::kContiguous, out_layout_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
  int runs_ = 1;
  bool all_targets_ = false;
  int64_t same_index_ = INT64_MIN;
};

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

TEST(InitRoutingV2Grad, HiddenSizes) {
  for (int64_t H : {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1031, 7168}) {
    for (DType dt : kFloats) {
      InitRoutingV2GradTester().tokens(6).topk(3).experts(4).hidden(H).seed(H).Test(dt);
      InitRoutingV2GradTester().mode(1).tokens(6).topk(3).experts(4).capacity(3).hidden(H).seed(H).Test(dt);
      InitRoutingV2GradTester().tokens(6).topk(3).active_num(11).hidden(H).indices(Indices::kRandom).seed(H + 1)
          .Test(dt);
    }
  }
}

TEST(InitRoutingV2Grad, TopK) {
  // Up to 32 terms are summed from row pointers, more a block of columns at a time.
  for (int64_t K : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32, 33, 40}) {
    for (DType dt : kFloats) {
      InitRoutingV2GradTester().tokens(5).topk(K).experts(7).hidden(37).seed(K).Test(dt);
      InitRoutingV2GradTester().tokens(5).topk(K).hidden(37).indices(Indices::kRandom).seed(K).Test(dt);
      InitRoutingV2GradTester().mode(1).tokens(5).topk(K).experts(3).capacity(K + 1).hidden(37).seed(K).Test(dt);
      InitRoutingV2GradTester().mode(1).tokens(4).topk(K).experts(5).capacity(2).hidden(70).indices(Indices::kRandom)
          .seed(K).Test(dt);
    }
  }
}

TEST(InitRoutingV2Grad, ActiveNumBelowAtAndAboveL) {
  const int64_t N = 7, K = 3, L = N * K;
  for (int64_t active : {int64_t{0}, int64_t{1}, int64_t{2}, L / 2, L - 1, L, L + 1, L + 100}) {
    for (DType dt : kFloats) {
      for (Indices ix : {Indices::kForward, Indices::kRandom}) {
        InitRoutingV2GradTester().tokens(N).topk(K).experts(4).hidden(33).active_num(active).indices(ix)
            .seed(static_cast<uint64_t>(active) + 3).Test(dt);
      }
    }
  }
  // Mode 1 ignores activeNum (which must still be >= 0).
  InitRoutingV2GradTester().mode(1).tokens(N).topk(K).experts(4).capacity(3).hidden(33).active_num(5)
      .Test(DType::kBFloat16);
}

TEST(InitRoutingV2Grad, ExpertAndCapacityShapes) {
  for (DType dt : kFloats) {
    for (int64_t E : {1, 2, 8, 64}) {
      for (int64_t C : {1, 2, 5, 40}) {  // C = 40 >= N*K: nothing dropped, rows no pair fills
        InitRoutingV2GradTester().mode(1).tokens(9).topk(4).experts(E).capacity(C).hidden(24)
            .seed(static_cast<uint64_t>(E * 100 + C)).Test(dt);
      }
      InitRoutingV2GradTester().tokens(9).topk(4).experts(E).hidden(24).seed(static_cast<uint64_t>(E)).Test(dt);
    }
  }
}

TEST(InitRoutingV2Grad, DuplicatesAndSkippedValues) {
  for (DType dt : kFloats) {
    // Every pair reads row 2: each token sums K copies of it.
    InitRoutingV2GradTester().tokens(4).topk(6).hidden(33).same_index(2).Test(dt);
    InitRoutingV2GradTester().mode(1).tokens(4).topk(6).experts(2).capacity(3).hidden(33).same_index(5).Test(dt);
    // Every pair skipped: all zeros (mode 1: all -1; mode 0: all at or past activeNum).
    InitRoutingV2GradTester().mode(1).tokens(4).topk(3).experts(2).capacity(3).hidden(33).same_index(-1).Test(dt);
    InitRoutingV2GradTester().tokens(4).topk(3).active_num(5).hidden(33).same_index(5).Test(dt);
    InitRoutingV2GradTester().tokens(4).topk(3).active_num(5).hidden(33).same_index(11).Test(dt);
    // Many drops: capacity 1 for 40 pairs over 2 experts.
    InitRoutingV2GradTester().mode(1).tokens(10).topk(4).experts(2).capacity(1).hidden(19).Test(dt);
  }
}

TEST(InitRoutingV2Grad, LayoutsAndApis) {
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  uint64_t seed = 200;
  for (Layout in : layouts) {
    for (Layout out : layouts) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        for (int64_t mode : {0, 1}) {
          InitRoutingV2GradTester().mode(mode).tokens(7).topk(3).experts(3).capacity(4).hidden(21).active_num(15)
              .in_layout(in).out_layout(out).api(api).seed(++seed).Test(DType::kBFloat16);
          InitRoutingV2GradTester().mode(mode).tokens(7).topk(3).experts(3).capacity(4).hidden(21)
              .indices(Indices::kRandom).in_layout(in).out_layout(out).api(api).seed(++seed).Test(DType::kFloat32);
        }
      }
    }
  }
}

TEST(InitRoutingV2Grad, RepeatedRunsOfOnePlanOrExecutor) {
  for (Api api : {Api::kCppPlan, Api::kAclnn}) {
    InitRoutingV2GradTester().tokens(9).topk(2).hidden(40).api(api).runs(3).Test(DType::kFloat16);
    InitRoutingV2GradTester().mode(1).tokens(9).topk(2).capacity(4).hidden(40).api(api).runs(3).Test(DType::kFloat32);
  }
}

TEST(InitRoutingV2Grad, EmptyTensors) {
  for (DType dt : kFloats) {
    for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
      for (int64_t mode : {0, 1}) {
        // N = 0 (L = 0), H = 0, both; mode 1 with E = 0 or C = 0 (every value -1).
        InitRoutingV2GradTester().mode(mode).tokens(0).topk(3).hidden(9).api(api).Test(dt);
        InitRoutingV2GradTester().mode(mode).tokens(5).topk(2).hidden(0).api(api).Test(dt);
        InitRoutingV2GradTester().mode(mode).tokens(0).topk(1).hidden(0).api(api).Test(dt);
      }
      InitRoutingV2GradTester().mode(1).tokens(4).topk(2).experts(0).capacity(3).hidden(9).same_index(-1).api(api)
          .Test(dt);
      InitRoutingV2GradTester().mode(1).tokens(4).topk(2).experts(3).capacity(0).hidden(9).same_index(-1).api(api)
          .Test(dt);
      InitRoutingV2GradTester().mode(1).tokens(0).topk(2).experts(0).capacity(0).hidden(9).api(api).Test(dt);
    }
  }
}

TEST(InitRoutingV2Grad, EveryTargetAndThreadCountBitIdentical) {
  for (DType dt : kFloats) {
    // Large enough for several threads and (out of 1 MiB and more) streaming stores.
    InitRoutingV2GradTester().tokens(96).topk(8).experts(16).hidden(7168).all_targets(true).Test(dt);
    InitRoutingV2GradTester().mode(1).tokens(96).topk(8).experts(16).capacity(40).hidden(7168).all_targets(true)
        .Test(dt);
    InitRoutingV2GradTester().tokens(96).topk(8).hidden(7168).active_num(500).indices(Indices::kRandom)
        .all_targets(true).Test(dt);
    // Many short rows, strided: many token tasks.
    InitRoutingV2GradTester().tokens(900).topk(3).experts(9).hidden(5).in_layout(Layout::kPadded).all_targets(true)
        .Test(dt);
    InitRoutingV2GradTester().mode(1).tokens(900).topk(3).experts(9).capacity(200).hidden(5)
        .indices(Indices::kRandom).out_layout(Layout::kTransposed).all_targets(true).Test(dt);
    // More than 32 terms per token (the column-block path).
    InitRoutingV2GradTester().tokens(40).topk(40).hidden(3000).indices(Indices::kRandom).all_targets(true).Test(dt);
  }
}

TEST(InitRoutingV2Grad, RandomSweep) {
  std::mt19937_64 rng(2025);
  const int64_t hiddens[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100};
  const Layout layouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
  const Api apis[] = {Api::kCpp, Api::kCppPlan, Api::kAclnn};
  int cases = 0;
  for (; cases < 3000; ++cases) {
    auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
    const int64_t mode = pick(0, 1), N = pick(0, 20), K = pick(1, 9), E = pick(1, 10), C = pick(0, 8);
    const int64_t L = N * K;
    const int64_t active = rng() % 3 == 0 ? pick(0, L + 3) : 0;
    const bool forward = rng() % 3 != 0;
    InitRoutingV2GradTester()
        .mode(mode).tokens(N).topk(K).experts(E).capacity(mode == 1 && C == 0 && forward ? 1 : C)
        .hidden(hiddens[rng() % std::size(hiddens)]).active_num(active)
        .indices(forward ? Indices::kForward : Indices::kRandom)
        .in_layout(layouts[rng() % 3]).out_layout(layouts[rng() % 3]).api(apis[rng() % 3]).seed(rng())
        .Test(kFloats[rng() % 3]);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(cases, 3000);
}

// Realistic model shapes (DeepSeek-V3: H 7168, E 256, K 8; Mixtral: H 4096, E 8, K 2), scaled down in tokens.
TEST(InitRoutingV2Grad, ModelShapes) {
  InitRoutingV2GradTester().tokens(64).topk(8).experts(256).hidden(7168).Test(DType::kBFloat16);
  InitRoutingV2GradTester().mode(1).tokens(64).topk(8).experts(256).capacity(2).hidden(7168).Test(DType::kBFloat16);
  InitRoutingV2GradTester().tokens(64).topk(8).experts(256).hidden(7168).active_num(300).Test(DType::kFloat32);
  InitRoutingV2GradTester().tokens(32).topk(2).experts(8).hidden(4096).Test(DType::kFloat16);
}

// The spec's worked examples: N 3, K 2, E 3, H 1, x = [10, 20, 30], expertIdx = [[2, 0], [0, 1], [2, 2]],
// gradExpandedX = [1, 2, 3, 4, 5, 6] (its first rows with activeNum 4). The forward's expandedX is the spec's
// too, for the adjoint identity <expandedX, g> = <x, out>.
TEST(InitRoutingV2Grad, SpecExamples) {
  struct Example {
    const char* name;
    int64_t mode, active;
    int64_t grad_rows;  // mode 0; mode 1: (3, 2, 1)
    std::vector<int32_t> idx;
    std::vector<float> expanded_x;  // the forward's output for x
    std::vector<float> out;
  };
  const Example examples[] = {
      {"mode 0", 0, 0, 6, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {5, 5, 11}},
      {"mode 0, activeNum 4", 0, 4, 4, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10}, {5, 5, 0}},
      {"mode 1, C 2", 1, 0, 6, {4, 0, 1, 2, 5, -1}, {10, 20, 20, 0, 10, 30}, {6, 5, 6}},
  };
  const float x[3] = {10, 20, 30};
  for (const Example& e : examples) {
    SCOPED_TRACE(e.name);
    float g[6] = {1, 2, 3, 4, 5, 6};
    std::vector<int32_t> idx = e.idx;
    float out[3] = {-1, -1, -1};
    InitRoutingV2GradArgs a;
    a.grad_expanded_x = e.mode == 1 ? TensorView(g, DType::kFloat32, {3, 2, 1})
                                    : TensorView(g, DType::kFloat32, {e.grad_rows, 1});
    a.expanded_row_idx = TensorView(idx.data(), DType::kInt32, {6});
    a.top_k = 2;
    a.drop_pad_mode = e.mode;
    a.active_num = e.active;
    a.out = TensorView(out, DType::kFloat32, {3, 1});
    ASSERT_TRUE(InitRoutingV2Grad(a).ok());
    EXPECT_EQ(std::vector<float>(out, out + 3), e.out);
    float lhs = 0, rhs = 0;
    for (size_t i = 0; i < e.expanded_x.size(); ++i) lhs += e.expanded_x[i] * g[i];
    for (int n = 0; n < 3; ++n) rhs += x[n] * out[n];
    EXPECT_EQ(lhs, rhs);
    EXPECT_EQ(lhs, e.mode == 1 ? 340.0f : e.active == 4 ? 150.0f : 480.0f);
  }
}

// A single term is copied exactly (-0.0 stays -0.0, a NaN stays a NaN); a token without terms gets +0.
TEST(InitRoutingV2Grad, SignedZerosAndNoTerms) {
  for (DType dt : kFloats) {
    TestTensor g(dt, {3, 4}), out(dt, {3, 4}), idx(DType::kInt32, {6});
    for (int64_t i = 0; i < 12; ++i) g.SetF(i, i < 4 ? -0.0f : i < 8 ? NAN : 1.5f);
    const int32_t v[6] = {0, 3, 1, 4, 5, 5};  // activeNum 3: token 0 reads row 0, token 1 row 1, token 2 nothing
    for (int64_t i = 0; i < 6; ++i) idx.SetI(i, v[i]);
    InitRoutingV2GradArgs a;
    a.grad_expanded_x = g;
    a.expanded_row_idx = idx;
    a.top_k = 2;
    a.active_num = 3;
    a.out = out;
    ASSERT_TRUE(InitRoutingV2Grad(a).ok());
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_TRUE(std::signbit(out.GetF(j)) && out.GetF(j) == 0.0f) << DTypeName(dt);
      EXPECT_TRUE(std::isnan(out.GetF(4 + j))) << DTypeName(dt);
      EXPECT_EQ(testing::ElementBits(out, 8 + j), 0u) << DTypeName(dt);
    }
  }
}

// Element offsets past 2^32: row strides of 2^32 + 1 elements in address space reserved but never touched except
// for the few rows the call reads and writes.
TEST(InitRoutingV2Grad, SixtyFourBitOffsets) {
  const int64_t stride = (int64_t{1} << 32) + 1;
  const size_t bytes = static_cast<size_t>(2 * stride + 64) * sizeof(float);
  void* g_mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* o_mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(g_mem, MAP_FAILED);
  ASSERT_NE(o_mem, MAP_FAILED);
  float* g = static_cast<float*>(g_mem);
  float* out = static_cast<float*>(o_mem);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 20; ++j) g[r * stride + j] = static_cast<float>(r * 100 + j);
  }
  int32_t idx[3] = {2, 0, 1};  // mode 0, N 3, K 1
  InitRoutingV2GradArgs a;
  a.grad_expanded_x = TensorView(g, DType::kFloat32, {3, 20}, {stride, 1});
  a.expanded_row_idx = TensorView(idx, DType::kInt32, {3});
  a.top_k = 1;
  a.out = TensorView(out, DType::kFloat32, {3, 20}, {stride, 1});
  ASSERT_TRUE(InitRoutingV2Grad(a).ok());
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t j = 0; j < 20; ++j) ASSERT_EQ(out[n * stride + j], g[idx[n] * stride + j]) << n << " " << j;
  }
  munmap(g_mem, bytes);
  munmap(o_mem, bytes);
}

// --- bad arguments ------------------------------------------------------------------------------------------
// Slots in OpInfo order: gradExpandedX, expandedRowIdx, out; attributes topK, dropPadMode, activeNum.
constexpr int kGrad = 0, kIdx = 1, kOut = 2;
constexpr int kNullptr = 161001, kInvalid = 161002;
constexpr int64_t kN = 4, kK = 2, kH = 5, kE = 2, kC = 3;

struct Case {
  std::array<std::optional<TestTensor>, 3> t;
  std::array<int64_t, 3> attrs{};
  std::function<void(int, TensorView*)> tweak;  // C++ only: edits the view of a slot

  InitRoutingV2GradArgs CppArgs() const {
    std::array<std::optional<TensorView>, 3> views;
    std::array<const TensorView*, 3> p{};
    for (int i = 0; i < 3; ++i) {
      if (!t[i]) continue;
      views[i] = t[i]->view();
      if (tweak) tweak(i, &*views[i]);
      p[i] = &*views[i];
    }
    return testing::MakeArgs<InitRoutingV2GradArgs>(p.data(), attrs.data());
  }
  TestCall<InitRoutingV2GradArgs> Call() {
    TestCall<InitRoutingV2GradArgs> c;
    for (int i = 0; i < 3; ++i) c.tensors[i] = t[i] ? &*t[i] : nullptr;
    c.attrs = attrs;
    return c;
  }
};

// A valid call: mode 0 (L = 8 rows, or activeNum of them) or mode 1 (E 2, C 3), FLOAT32.
Case Base(int64_t mode, int64_t active = 0) {
  Case c;
  const int64_t L = kN * kK;
  const int64_t rows = active > 0 && active < L ? active : L;
  c.t[kGrad] = mode == 1 ? TestTensor(DType::kFloat32, {kE, kC, kH}) : TestTensor(DType::kFloat32, {rows, kH});
  std::mt19937_64 rng(7);
  c.t[kGrad]->FillUniform(rng);
  c.t[kIdx] = TestTensor(DType::kInt32, {L});
  const int32_t mode0[8] = {3, 0, 7, 1, 2, 6, 4, 5}, mode1[8] = {0, 3, 1, -1, 4, 2, -1, 5};
  for (int64_t i = 0; i < L; ++i) c.t[kIdx]->SetI(i, mode == 1 ? mode1[i] : mode0[i]);
  c.t[kOut] = TestTensor(DType::kFloat32, {kN, kH});
  c.attrs = {kK, mode, active};
  return c;
}

enum Where { kBoth, kCppOnly, kAclOnly };

struct ErrorRow {
  const char* name;
  int64_t mode;
  std::function<void(Case&)> mutate;
  int code;
  std::string message;  // a substring of the one-line message
  int phase;            // 1 or 2
  Where where = kBoth;
  int64_t active = 0;   // of the base case
};

struct Outcome {
  int code = 0;
  std::string message;
  int phase = 0;
};

Outcome RunCpp(const Case& c) {
  const Status s = InitRoutingV2Grad(c.CppArgs());
  return {static_cast<int>(s.code()), s.message(), 0};
}

// Phase one, then phase two on a workspace of exactly the reported size; a failed phase one leaves *executor null.
Outcome RunAcl(Case& c) {
  const AclCall<InitRoutingV2GradArgs> call(c.Call());
  uint64_t ws_size = 0;
  aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(&ws_size);  // must be overwritten
  aclnnStatus st = call.PhaseOne(&ws_size, &ex);
  if (st != ACLNN_SUCCESS) {
    EXPECT_EQ(ex, nullptr) << "a failed phase one must leave *executor null";
    return {st, aclGetRecentErrMsg(), 1};
  }
  testing::Workspace ws(ws_size);
  st = OpEntry<InitRoutingV2GradArgs>::kAclnnPhaseTwo(ws_size ? ws.get() : nullptr, ws_size, ex, nullptr);
  if (st != ACLNN_SUCCESS) return {st, aclGetRecentErrMsg(), 2};
  return {0, "", 0};
}

std::vector<ErrorRow> ErrorTable() {
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, i32 = DType::kInt32;
  auto set = [](int slot, TestTensor t) { return [slot, t](Case& c) { c.t[slot] = t; }; };
  auto idx_value = [](int64_t i, int64_t v) { return [i, v](Case& c) { c.t[kIdx]->SetI(i, v); }; };
  auto attr = [](int i, int64_t v) { return [i, v](Case& c) { c.attrs[static_cast<size_t>(i)] = v; }; };
  return {
      // Required tensors (aclnn: a null aclTensor*).
      {"no gradExpandedX", 0, [](Case& c) { c.t[kGrad].reset(); }, kNullptr, "gradExpandedX is required but is null",
       1, kAclOnly},
      {"no expandedRowIdx", 1, [](Case& c) { c.t[kIdx].reset(); }, kNullptr,
       "expandedRowIdx is required but is null", 1, kAclOnly},
      {"no out", 0, [](Case& c) { c.t[kOut].reset(); }, kNullptr, "out is required but is null", 1, kAclOnly},
      // Malformed views (aclCreateTensor refuses them).
      {"null data", 0, [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kGrad) v->data = nullptr; }; },
       kNullptr, "gradExpandedX has shape (8, 5) but its data pointer is null", 1, kCppOnly},
      {"negative stride", 1,
       [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kOut) v->strides[0] = -5; }; }, kInvalid,
       "out has negative stride -5 in dimension 0", 1, kCppOnly},
      {"negative size", 0,
       [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kIdx) v->sizes[0] = -1; }; }, kInvalid,
       "expandedRowIdx has negative size -1 in dimension 0", 1, kCppOnly},
      {"unknown dtype", 0,
       [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kGrad) v->dtype = static_cast<DType>(5); }; },
       kInvalid, "gradExpandedX has unknown dtype 5", 1, kCppOnly},
      {"rank 9", 0, [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kOut) v->rank = 9; }; }, kInvalid,
       "out has rank 9; ranks 0..8 are supported", 1, kCppOnly},
      {"another device", 0,
       [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kIdx) v->device = static_cast<Device>(7); }; },
       static_cast<int>(StatusCode::kUnsupported),
       "expandedRowIdx is on device 7 but gradExpandedX is on device 0; the tensors of a call must share one device",
       1, kCppOnly},
      // Attributes, in the table's order.
      {"dropPadMode 2", 0, attr(1, 2), kInvalid, "MoeInitRoutingV2Grad: dropPadMode = 2 must be 0 (dropless) or 1 "
       "(drop/pad)", 1},
      {"dropPadMode -1", 0, attr(1, -1), kInvalid, "dropPadMode = -1 must be 0 (dropless) or 1 (drop/pad)", 1},
      {"activeNum -1", 0, attr(2, -1), kInvalid, "MoeInitRoutingV2Grad: activeNum = -1 must be >= 0", 1},
      {"activeNum -1 in mode 1", 1, attr(2, -1), kInvalid, "activeNum = -1 must be >= 0", 1},
      {"topK 0", 0, attr(0, 0), kInvalid, "MoeInitRoutingV2Grad: topK = 0 must be > 0", 1},
      {"topK -3", 1, attr(0, -3), kInvalid, "topK = -3 must be > 0", 1},
      {"dropPadMode before topK", 0, [](Case& c) { c.attrs = {0, 5, 0}; }, kInvalid, "dropPadMode = 5", 1},
      // gradExpandedX and expandedRowIdx.
      {"gradExpandedX INT32", 0, set(kGrad, TestTensor(i32, {8, kH})), kInvalid,
       "gradExpandedX has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
      {"gradExpandedX DOUBLE (before its rank)", 1, set(kGrad, TestTensor(DType::kFloat64, {6, kH})), kInvalid,
       "gradExpandedX has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
      {"gradExpandedX 2-D in mode 1", 1, set(kGrad, TestTensor(f32, {6, 4})), kInvalid,
       "MoeInitRoutingV2Grad: gradExpandedX must be 3-D (E, C, H) for dropPadMode 1 but has shape (6, 4)", 1},
      {"gradExpandedX 3-D in mode 0", 0, set(kGrad, TestTensor(f32, {2, 4, kH})), kInvalid,
       "gradExpandedX must be 2-D (rows, H) for dropPadMode 0 but has shape (2, 4, 5)", 1},
      {"gradExpandedX 1-D", 0, set(kGrad, TestTensor(f32, {40})), kInvalid,
       "gradExpandedX must be 2-D (rows, H) for dropPadMode 0 but has shape (40,)", 1},
      {"expandedRowIdx 2-D", 0, set(kIdx, TestTensor(i32, {kN, kK})), kInvalid,
       "expandedRowIdx must be 1-D but has shape (4, 2)", 1},
      {"expandedRowIdx INT64", 1, set(kIdx, TestTensor(DType::kInt64, {8})), kInvalid,
       "expandedRowIdx has dtype INT64 but must be INT32", 1},
      {"expandedRowIdx FLOAT32", 0, set(kIdx, TestTensor(f32, {8})), kInvalid,
       "expandedRowIdx has dtype FLOAT32 but must be INT32", 1},
      // L, out.
      {"L not a multiple of topK", 0, set(kIdx, TestTensor(i32, {7})), kInvalid,
       "expandedRowIdx has 7 elements, not a multiple of topK = 2 (L = N*topK)", 1},
      {"L not a multiple of topK (mode 1)", 1, attr(0, 3), kInvalid,
       "expandedRowIdx has 8 elements, not a multiple of topK = 3", 1},
      {"out rows", 0, set(kOut, TestTensor(f32, {kN + 1, kH})), kInvalid,
       "MoeInitRoutingV2Grad: out has shape (5, 5) but must be (4, 5) = (L/topK, H)", 1},
      {"out columns", 1, set(kOut, TestTensor(f32, {kN, kH - 1})), kInvalid,
       "out has shape (4, 4) but must be (4, 5) = (L/topK, H)", 1},
      {"out 3-D", 0, set(kOut, TestTensor(f32, {kN, kH, 1})), kInvalid,
       "out has shape (4, 5, 1) but must be (4, 5) = (L/topK, H)", 1},
      {"out 1-D", 1, set(kOut, TestTensor(f32, {kN * kH})), kInvalid,
       "out has shape (20,) but must be (4, 5) = (L/topK, H)", 1},
      {"out for another topK", 0, attr(0, 4), kInvalid, "out has shape (4, 5) but must be (2, 5) = (L/topK, H)", 1},
      {"out FLOAT16", 0, set(kOut, TestTensor(f16, {kN, kH})), kInvalid,
       "out is FLOAT16 but gradExpandedX is FLOAT32 (gradExpandedX and out share a dtype)", 1},
      {"out BFLOAT16 (mode 1)", 1, set(kOut, TestTensor(DType::kBFloat16, {kN, kH})), kInvalid,
       "out is BFLOAT16 but gradExpandedX is FLOAT32", 1},
      {"out shape before the rows of gradExpandedX", 0,
       [](Case& c) {
         c.t[kOut] = TestTensor(DType::kFloat32, {1, 1});
         c.t[kGrad] = TestTensor(DType::kFloat32, {3, kH});
       },
       kInvalid, "out has shape (1, 1)", 1},
      // The rows of gradExpandedX in mode 0.
      {"rows != L", 0, set(kGrad, TestTensor(f32, {9, kH})), kInvalid,
       "gradExpandedX has 9 rows but must have L = N*topK = 8 (activeNum 0 is 0 or >= L)", 1},
      {"rows != L (activeNum past L)", 0,
       [](Case& c) {
         c.attrs[2] = 12;
         c.t[kGrad] = TestTensor(DType::kFloat32, {12, kH});
       },
       kInvalid, "gradExpandedX has 12 rows but must have L = N*topK = 8 (activeNum 12 is 0 or >= L)", 1},
      {"rows != activeNum", 0, set(kGrad, TestTensor(f32, {6, kH})), kInvalid,
       "MoeInitRoutingV2Grad: gradExpandedX has 6 rows but must have 4 (activeNum 4)", 1, kBoth, 4},
      {"L rows with activeNum < L", 0, set(kGrad, TestTensor(f32, {8, kH})), kInvalid,
       "gradExpandedX has 8 rows but must have 4 (activeNum 4)", 1, kBoth, 4},
      // Overlaps.
      {"out over gradExpandedX", 0,
       [](Case& c) { c.tweak = [&c](int i, TensorView* v) { if (i == kOut) v->data = c.t[kGrad]->view().data; }; },
       kInvalid, "out overlaps gradExpandedX in memory", 1, kCppOnly},
      {"out over expandedRowIdx", 1,
       [](Case& c) { c.tweak = [&c](int i, TensorView* v) { if (i == kOut) v->data = c.t[kIdx]->view().data; }; },
       kInvalid, "out overlaps expandedRowIdx in memory", 1, kCppOnly},
      {"out overlaps itself", 0,
       [](Case& c) { c.tweak = [](int i, TensorView* v) { if (i == kOut) v->strides[0] = 0; }; },
       kInvalid, "out has elements that share memory (stride 0 in dimension 0", 1, kCppOnly},
      // Index data (phase two), in ascending position, the last one included.
      {"mode 0 value = L", 0, idx_value(2, 8), kInvalid,
       "MoeInitRoutingV2Grad: expandedRowIdx[2] = 8 is outside [0, 8) for dropPadMode 0", 2},
      {"mode 0 value -1", 0, idx_value(7, -1), kInvalid,
       "expandedRowIdx[7] = -1 is outside [0, 8) for dropPadMode 0", 2},
      {"mode 0 the first bad of two", 0, [](Case& c) { c.t[kIdx]->SetI(6, 9); c.t[kIdx]->SetI(3, -4); }, kInvalid,
       "expandedRowIdx[3] = -4 is outside [0, 8)", 2},
      {"mode 0 with activeNum: [0, L), not [0, activeNum)", 0, idx_value(0, 8), kInvalid,
       "expandedRowIdx[0] = 8 is outside [0, 8) for dropPadMode 0", 2, kBoth, 4},
      {"mode 1 value -2", 1, idx_value(4, -2), kInvalid,
       "MoeInitRoutingV2Grad: expandedRowIdx[4] = -2 is outside [-1, 6) for dropPadMode 1", 2},
      {"mode 1 value E*C", 1, idx_value(7, 6), kInvalid,
       "expandedRowIdx[7] = 6 is outside [-1, 6) for dropPadMode 1", 2},
      {"mode 1 INT32_MIN", 1, idx_value(0, INT32_MIN), kInvalid,
       "expandedRowIdx[0] = -2147483648 is outside [-1, 6)", 2},
      {"mode 1 E*C = 0", 1, [](Case& c) { c.t[kGrad] = TestTensor(DType::kFloat32, {kE, 0, kH}); }, kInvalid,
       "expandedRowIdx[0] = 0 is outside [-1, 0) for dropPadMode 1", 2},
  };
}

TEST(InitRoutingV2GradErrors, ValidCallsSucceed) {
  for (int64_t mode : {0, 1}) {
    for (int64_t active : {0, 4}) {
      Case c = Base(mode, active);
      EXPECT_EQ(RunCpp(c).code, 0) << RunCpp(c).message;
      Case d = Base(mode, active);
      EXPECT_EQ(RunAcl(d).code, 0) << RunAcl(d).message;
    }
  }
}

TEST(InitRoutingV2GradErrors, EveryBadArgument) {
  for (const ErrorRow& row : ErrorTable()) {
    for (int api = 0; api < 2; ++api) {
      if ((api == 0 && row.where == kAclOnly) || (api == 1 && row.where == kCppOnly)) continue;
      SCOPED_TRACE(std::string(row.name) + (api == 0 ? " (C++)" : " (aclnn)"));
      Case c = Base(row.mode, row.active);
      row.mutate(c);
      std::vector<std::vector<uint8_t>> before;
      for (const auto& t : c.t) before.push_back(t ? t->Snapshot() : std::vector<uint8_t>());
      const Outcome o = api == 0 ? RunCpp(c) : RunAcl(c);
      EXPECT_EQ(o.code, row.code) << o.message;
      testing::ExpectErrorMessage(o.message, "MoeInitRoutingV2Grad", row.message);
      if (api == 1) {
        EXPECT_EQ(o.phase, row.phase) << o.message;
      }
      for (size_t i = 0; i < c.t.size(); ++i) {
        if (c.t[i]) {
          EXPECT_TRUE(c.t[i]->SameBytes(before[i])) << OpInfo<InitRoutingV2GradArgs>::kTensors[i].name << " changed";
        }
      }
    }
  }
}

// The workspace rules of phase two and the aclnn pointer checks.
TEST(InitRoutingV2GradErrors, WorkspaceAndExecutor) {
  Case c = Base(0);
  const InitRoutingV2GradArgs a = c.CppArgs();
  Plan plan;
  ASSERT_TRUE(PlanInitRoutingV2Grad(a, &plan).ok());
  ASSERT_GT(plan.workspace_size(), 0u);
  const auto before = c.t[kOut]->Snapshot();
  testing::Workspace ws(plan.workspace_size());
  Status s = plan.Run(ws.get(), plan.workspace_size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("MoeInitRoutingV2Grad: workspaceSize"), std::string::npos) << s.message();
  s = plan.Run(nullptr, plan.workspace_size());
  EXPECT_EQ(s.code(), StatusCode::kNullptr);
  EXPECT_TRUE(c.t[kOut]->SameBytes(before));

  const AclCall<InitRoutingV2GradArgs> call(c.Call());
  aclOpExecutor* ex = nullptr;
  EXPECT_EQ(call.PhaseOne(nullptr, &ex), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_STREQ(aclGetRecentErrMsg(),
               "aclnnMoeInitRoutingV2GradGetWorkspaceSize: workspaceSize is required but is null");
  uint64_t size = 0;
  EXPECT_EQ(call.PhaseOne(&size, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_STREQ(aclGetRecentErrMsg(), "aclnnMoeInitRoutingV2GradGetWorkspaceSize: executor is required but is null");
  EXPECT_EQ(aclnnMoeInitRoutingV2Grad(nullptr, 0, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_STREQ(aclGetRecentErrMsg(), "aclnnMoeInitRoutingV2Grad: executor is required but is null");
  EXPECT_TRUE(c.t[kOut]->SameBytes(before));
}

// Phase one never reads index data: values written between the phases are checked (and used) by phase two, on
// every run of a repeatable executor.
TEST(InitRoutingV2GradErrors, IndexDataIsReadInPhaseTwo) {
  Case c = Base(1);
  c.t[kIdx]->SetI(3, 99);  // invalid at phase one: not read there
  const AclCall<InitRoutingV2GradArgs> call(c.Call());
  uint64_t ws_size = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(call.PhaseOne(&ws_size, &ex), ACLNN_SUCCESS);
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  testing::Workspace ws(ws_size);
  const auto before = c.t[kOut]->Snapshot();
  EXPECT_EQ(aclnnMoeInitRoutingV2Grad(ws.get(), ws_size, ex, nullptr), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(c.t[kOut]->SameBytes(before));
  c.t[kIdx]->SetI(3, -1);  // now valid: the same executor runs
  ASSERT_EQ(aclnnMoeInitRoutingV2Grad(ws.get(), ws_size, ex, nullptr), ACLNN_SUCCESS);
  TestTensor want = *c.t[kOut];
  Case w = c;
  w.t[kOut] = want;
  ref::InitRoutingV2Grad(w.CppArgs());
  for (int64_t i = 0; i < kN * kH; ++i) {
    EXPECT_EQ(testing::ElementBits(*c.t[kOut], i), testing::ElementBits(*w.t[kOut], i)) << i;
  }
  EXPECT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
}

}  // namespace
}  // namespace moegrad
