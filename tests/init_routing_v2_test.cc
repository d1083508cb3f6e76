// MoeInitRoutingV2 against the spec's worked examples and, bit for bit, against the scalar reference (which sorts
// the pairs by (expert, pair) and places every row, as the formulas read): both modes, active truncation,
// capacities below and above demand, every count flag, expert ids with duplicates and empty experts (and any
// id >= 0 without an expert count), dtypes, layouts, hidden sizes, empty tensors, every API, SIMD targets and
// thread counts. Contract: docs/ops/init_routing_v2.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moegrad/ops.hpp"
#include "src/ref/reference.h"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
using InitCall = TestCall<InitRoutingV2Args>;

// The raw bits of element `flat` (row-major over the view's shape): NaN payloads included.
uint32_t RawBits(const TestTensor& t, int64_t flat) {
  const TensorView& v = t.view();
  int64_t offset = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    offset += (flat % v.sizes[d]) * v.strides[d];
    flat /= v.sizes[d];
  }
  uint32_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(v.data) + offset * static_cast<int64_t>(v.element_size()),
              v.element_size());
  return bits;
}
void SetRawBits(TestTensor& t, int64_t flat, uint32_t bits) {
  const TensorView& v = t.view();
  int64_t offset = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    offset += (flat % v.sizes[d]) * v.strides[d];
    flat /= v.sizes[d];
  }
  std::memcpy(static_cast<char*>(v.data) + offset * static_cast<int64_t>(v.element_size()), &bits,
              v.element_size());
}

struct Tensors {
  TestTensor x, expert_idx, expanded_x, row_idx, counts, before;
};

// Where the expert ids come from.
enum class Ids {
  kDistinct,  // K distinct experts per token (a top-k routing; needs K <= E)
  kAny,       // each id uniform in [0, id_range): repeats within a token, experts without a pair
};

class InitRoutingV2Tester {
 public:
  InitRoutingV2Tester& tokens(int64_t v) { N_ = v; return *this; }
  InitRoutingV2Tester& hidden(int64_t v) { H_ = v; return *this; }
  InitRoutingV2Tester& topk(int64_t v) { K_ = v; return *this; }
  InitRoutingV2Tester& experts(int64_t v) { E_ = v; return *this; }
  InitRoutingV2Tester& capacity(int64_t v) { C_ = v; return *this; }
  InitRoutingV2Tester& mode(int64_t v) { mode_ = v; return *this; }
  InitRoutingV2Tester& active_num(int64_t v) { active_ = v; return *this; }
  InitRoutingV2Tester& flag(int64_t v) { flag_ = v; return *this; }  // expertTokensCountOrCumsumFlag
  InitRoutingV2Tester& before_capacity(bool v) { before_ = v; return *this; }
  // Also pass the count output the call does not write; it must stay untouched.
  InitRoutingV2Tester& unused_counts(bool v) { unused_ = v; return *this; }
  InitRoutingV2Tester& ids(Ids v) { ids_ = v; return *this; }
  // kAny: ids in [0, range) (default E); past E only in mode 0 with flag 0, where any id >= 0 is valid.
  InitRoutingV2Tester& id_range(int64_t v) { range_ = v; return *this; }
  // Signed zeros, subnormals, infinities and NaNs with payloads among the x values: rows are bit copies.
  InitRoutingV2Tester& specials(bool v) { specials_ = v; return *this; }
  InitRoutingV2Tester& layout(Layout in, Layout out) { in_ = in; out_ = out; return *this; }
  InitRoutingV2Tester& seed(uint64_t v) { seed_ = v; return *this; }
  InitRoutingV2Tester& api(Api v) { api_ = v; return *this; }
  InitRoutingV2Tester& all_targets(bool v) { all_targets_ = v; return *this; }

  void Test(DType dtype) const {
    const Tensors in = Make(dtype);
    Tensors want = in;
    ref::InitRoutingV2(Call(want).CppArgs());
    const auto x_before = in.expanded_x.Snapshot(), idx_before = in.row_idx.Snapshot();
    const auto counts_before = in.counts.Snapshot(), before_before = in.before.Snapshot();
    auto check = [&](const std::string& where) {
      Tensors got = in;
      const Status s = Call(got).Run(api_, /*runs=*/2);  // a plan or executor runs twice
      const std::string context = Describe(dtype) + where;
      ASSERT_TRUE(s.ok()) << s.message() << context;
      ExpectSame(got.expanded_x, want.expanded_x, x_before, "expandedXOut", context);
      ExpectSame(got.row_idx, want.row_idx, idx_before, "expandedRowIdxOut", context);
      if (writes_counts()) ExpectSame(got.counts, want.counts, counts_before, "expertTokensCountOrCumsumOut", context);
      else EXPECT_TRUE(got.counts.SameBytes(counts_before)) << "expertTokensCountOrCumsumOut written" << context;
      if (writes_before()) ExpectSame(got.before, want.before, before_before, "expertTokensBeforeCapacityOut", context);
      else EXPECT_TRUE(got.before.SameBytes(before_before)) << "expertTokensBeforeCapacityOut written" << context;
      EXPECT_TRUE(got.x.SameBytes(in.x.Snapshot()) && got.expert_idx.SameBytes(in.expert_idx.Snapshot()))
          << "an input was written" << context;
    };
    if (!all_targets_) return check("");
    ForEachThreadCountAndSimdTarget([&](int threads) { check(" threads=" + std::to_string(threads)); });
  }

 private:
  bool writes_counts() const { return mode_ == 0 && (flag_ == 1 || flag_ == 2); }
  bool writes_before() const { return mode_ == 1 && before_; }
  int64_t rows() const {
    const int64_t P = N_ * K_;
    return mode_ == 1 ? E_ * C_ : (active_ > 0 && active_ < P ? active_ : P);
  }

  Tensors Make(DType dtype) const {
    std::mt19937_64 rng(seed_);
    Tensors t;
    t.x = TestTensor(dtype, {N_, H_}, in_, seed_ + 1);
    t.expert_idx = TestTensor(DType::kInt32, {N_, K_}, in_, seed_ + 2);
    t.expanded_x = mode_ == 1 ? TestTensor(dtype, {E_, C_, H_}, out_, seed_ + 3)
                              : TestTensor(dtype, {rows(), H_}, out_, seed_ + 3);
    t.row_idx = TestTensor(DType::kInt32, {N_ * K_}, out_, seed_ + 4);
    t.counts = TestTensor(DType::kInt32, {E_}, out_, seed_ + 5);
    t.before = TestTensor(DType::kInt32, {E_}, out_, seed_ + 6);
    t.x.FillUniform(rng, -4.0f, 4.0f);
    if (specials_) {
      const uint32_t f32[] = {0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                              0xffa5a5a5u, 0x7f812345u};
      const uint32_t f16[] = {0x8000u, 0x0001u, 0x83ffu, 0x7c00u, 0xfc00u, 0x7e01u, 0xfd5au, 0x7c01u};
      for (int64_t i = 0; i < t.x.numel(); i += 3) {
        const size_t k = static_cast<size_t>(rng() % 8);
        SetRawBits(t.x, i, dtype == DType::kFloat32 ? f32[k] : dtype == DType::kFloat16 ? f16[k] : f32[k] >> 16);
      }
    }
    const int64_t range = range_ > 0 ? range_ : E_;
    std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(E_, 0)));
    for (int64_t n = 0; n < N_; ++n) {
      if (ids_ == Ids::kDistinct) {
        for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
        std::shuffle(order.begin(), order.end(), rng);
      }
      for (int64_t k = 0; k < K_; ++k) {
        const int64_t id = ids_ == Ids::kDistinct ? order[static_cast<size_t>(k)]
                                                  : static_cast<int64_t>(rng() % static_cast<uint64_t>(range));
        t.expert_idx.SetI(n * K_ + k, id);
      }
    }
    return t;
  }

  InitCall Call(Tensors& t) const {
    InitCall c;
    c.tensors = {&t.x,
                 &t.expert_idx,
                 &t.expanded_x,
                 &t.row_idx,
                 writes_counts() || unused_ ? &t.counts : nullptr,
                 writes_before() || unused_ ? &t.before : nullptr};
    c.attrs = {active_, C_, E_, mode_, flag_, before_};
    return c;
  }

  // Every element of `got` as in `want` (raw bits for floats, values for INT32), nothing outside its view.
  static void ExpectSame(const TestTensor& got, const TestTensor& want, const std::vector<uint8_t>& before,
                         const std::string& what, const std::string& context) {
    EXPECT_TRUE(got.OutsideViewUnchanged(before)) << what << " written outside its view" << context;
    for (int64_t i = 0; i < got.numel(); ++i) {
      if (RawBits(got, i) != RawBits(want, i)) {
        ADD_FAILURE() << what << "[" << i << "] has bits 0x" << std::hex << RawBits(got, i)
                      << " but the reference gives 0x" << RawBits(want, i) << std::dec << context;
        return;
      }
    }
  }

  std::string Describe(DType dtype) const {
    return std::string(" [") + DTypeName(dtype) + " N=" + std::to_string(N_) + " H=" + std::to_string(H_) +
           " K=" + std::to_string(K_) + " E=" + std::to_string(E_) + " mode=" + std::to_string(mode_) +
           (mode_ == 1 ? " C=" + std::to_string(C_) : " activeNum=" + std::to_string(active_)) +
           " flag=" + std::to_string(flag_) + (before_ ? " before" : "") +
           (ids_ == Ids::kAny ? " ids<" + std::to_string(range_ > 0 ? range_ : E_) : " distinct") +
           " in=" + LayoutName(in_) + " out=" + LayoutName(out_) + " api=" + ApiName(api_) +
           " seed=" + std::to_string(seed_) + " target=" + SimdTarget() + "]";
  }

  int64_t N_ = 7, H_ = 17, K_ = 2, E_ = 5, C_ = 2, mode_ = 0, active_ = 0, flag_ = 0, range_ = 0;
  bool before_ = false, unused_ = false, specials_ = false, all_targets_ = false;
  Ids ids_ = Ids::kAny;
  Layout in_ = Layout::kContiguous, out_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
};

// --- the spec's worked examples ------------------------------------------------------------------------------

// N 3, K 2, E 3, H 1, x = [10, 20, 30], expertIdx = [[2, 0], [0, 1], [2, 2]]: e_p = [2, 0, 0, 1, 2, 2],
// s = [1, 2, 3, 0, 4, 5], r = [3, 0, 1, 2, 4, 5], cnt = [2, 1, 3].
struct Example {
  int64_t mode, active, capacity, flag;
  bool before;
  std::vector<int64_t> row_idx;
  std::vector<float> expanded_x;
  std::vector<int64_t> counts;  // of the output the call writes, if any
};

void RunExample(const Example& ex, DType dtype, Layout layout, Api api) {
  SCOPED_TRACE(::testing::Message() << "mode " << ex.mode << " activeNum " << ex.active << " flag " << ex.flag
                                    << " " << DTypeName(dtype) << " " << LayoutName(layout) << " " << ApiName(api));
  const int64_t E = 3, rows = static_cast<int64_t>(ex.expanded_x.size());
  TestTensor x(dtype, {3, 1}, layout, 1), idx(DType::kInt32, {3, 2}, layout, 2);
  TestTensor out = ex.mode == 1 ? TestTensor(dtype, {E, ex.capacity, 1}, layout, 3)
                                : TestTensor(dtype, {rows, 1}, layout, 3);
  TestTensor row_idx(DType::kInt32, {6}, layout, 4), counts(DType::kInt32, {E}, layout, 5);
  TestTensor before(DType::kInt32, {E}, layout, 6);
  for (int64_t n = 0; n < 3; ++n) x.SetF(n, 10.0f * (n + 1));
  const int64_t ids[] = {2, 0, 0, 1, 2, 2};
  for (int64_t p = 0; p < 6; ++p) idx.SetI(p, ids[p]);
  const auto counts_before = counts.Snapshot(), before_before = before.Snapshot();
  const InitCall c{{&x, &idx, &out, &row_idx, ex.flag != 0 ? &counts : nullptr, &before},
               {ex.active, ex.capacity, E, ex.mode, ex.flag, ex.before}};
  const Status s = c.Run(api);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t p = 0; p < 6; ++p) EXPECT_EQ(row_idx.GetI(p), ex.row_idx[static_cast<size_t>(p)]) << p;
  for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(out.GetF(i), ex.expanded_x[static_cast<size_t>(i)]) << i;
  const TestTensor& written = ex.mode == 1 ? before : counts;
  for (int64_t e = 0; e < static_cast<int64_t>(ex.counts.size()); ++e) {
    EXPECT_EQ(written.GetI(e), ex.counts[static_cast<size_t>(e)]) << e;
  }
  if (ex.mode == 1) {
    EXPECT_TRUE(counts.SameBytes(counts_before)) << "the dropless counts are not written in mode 1";
    if (!ex.before) {
      EXPECT_TRUE(before.SameBytes(before_before));
    }
  } else {
    EXPECT_TRUE(before.SameBytes(before_before)) << "the counts before capacity are not written in mode 0";
    if (ex.flag == 0) {
      EXPECT_TRUE(counts.SameBytes(counts_before));
    }
  }
}

TEST(InitRoutingV2, SpecWorkedExamples) {
  const std::vector<Example> examples = {
      {0, 0, 0, 1, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {2, 3, 6}},
      {0, 0, 0, 2, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {2, 1, 3}},
      {0, 0, 0, 0, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {}},
      // activeNum 4: pairs 4, 5 keep their rows in expandedRowIdx but are not materialized; counts over all.
      {0, 4, 0, 1, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10}, {2, 3, 6}},
      {0, 4, 0, 2, true, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10}, {2, 1, 3}},  // the mode 1 flag is ignored
      {0, 6, 0, 2, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {2, 1, 3}},  // activeNum = N*K
      {0, 9, 0, 2, false, {3, 0, 1, 2, 4, 5}, {10, 20, 20, 10, 30, 30}, {2, 1, 3}},  // activeNum > N*K
      // C 2: pair 5 (expert 2's third) is dropped; row 3 (expert 1's second) is +0.
      {1, 0, 2, 0, true, {4, 0, 1, 2, 5, -1}, {10, 20, 20, 0, 10, 30}, {2, 1, 3}},
      {1, 7, 2, 1, false, {4, 0, 1, 2, 5, -1}, {10, 20, 20, 0, 10, 30}, {}},  // activeNum and the flag ignored
      // C 3, above every expert's demand: nothing dropped.
      {1, 0, 3, 0, true, {6, 0, 1, 3, 7, 8}, {10, 20, 0, 20, 0, 0, 10, 30, 30}, {2, 1, 3}},
  };
  for (const Example& ex : examples) {
    for (DType dt : kFloats) {
      for (Layout layout : kLayouts) {
        for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) RunExample(ex, dt, layout, api);
      }
    }
  }
}

// Without an expert count (mode 0, flag 0) any id >= 0 is valid and expertNum is unused: ids 0, 7, 70000 and
// 2^31 - 1 sort as [p2, p5 | p0, p3 | p4 | p1].
TEST(InitRoutingV2, AnyIdWithoutExpertCount) {
  for (Api api : {Api::kCpp, Api::kAclnn}) {
    TestTensor x(DType::kFloat32, {3, 1}), idx(DType::kInt32, {3, 2}), out(DType::kFloat32, {6, 1});
    TestTensor row_idx(DType::kInt32, {6});
    for (int64_t n = 0; n < 3; ++n) x.SetF(n, 10.0f * (n + 1));
    const int64_t ids[] = {7, 2147483647, 0, 7, 70000, 0};
    for (int64_t p = 0; p < 6; ++p) idx.SetI(p, ids[p]);
    const InitCall c{{&x, &idx, &out, &row_idx, nullptr, nullptr}, {0, 0, /*expertNum=*/2, 0, 0, false}};
    const Status s = c.Run(api);
    ASSERT_TRUE(s.ok()) << s.message();
    const int64_t want_idx[] = {2, 5, 0, 3, 4, 1};
    const float want_x[] = {20, 30, 10, 20, 30, 10};
    for (int64_t p = 0; p < 6; ++p) {
      EXPECT_EQ(row_idx.GetI(p), want_idx[p]) << p;
      EXPECT_EQ(out.GetF(p), want_x[p]) << p;
    }
  }
}

// --- against the reference -----------------------------------------------------------------------------------

TEST(InitRoutingV2, HiddenSizesAndDTypes) {
  uint64_t seed = 1;
  for (int64_t H : {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 129, 1031}) {
    for (DType dt : kFloats) {
      InitRoutingV2Tester().hidden(H).flag(1).seed(seed++).Test(dt);
      InitRoutingV2Tester().hidden(H).mode(1).capacity(2).before_capacity(true).seed(seed++).Test(dt);
      InitRoutingV2Tester().hidden(H).active_num(9).flag(2).specials(true).seed(seed++).Test(dt);
    }
  }
}

TEST(InitRoutingV2, TopKExpertsAndIds) {
  uint64_t seed = 100;
  for (int64_t K : {1, 2, 3, 5, 8, 16}) {
    for (int64_t E : {1, 2, 7, 16, 64, 257, 512}) {
      if (K <= E) {
        InitRoutingV2Tester().tokens(9).topk(K).experts(E).ids(Ids::kDistinct).flag(2).hidden(5).seed(seed++)
            .Test(DType::kFloat32);
      }
      // Repeats within a token; with E > N*K most experts receive nothing.
      InitRoutingV2Tester().tokens(9).topk(K).experts(E).flag(1).hidden(4).seed(seed++).Test(DType::kBFloat16);
      InitRoutingV2Tester().tokens(9).topk(K).experts(E).mode(1).capacity(3).before_capacity(true).hidden(3)
          .seed(seed++).Test(DType::kFloat16);
    }
  }
  // Only a few experts used out of many, so most are empty.
  InitRoutingV2Tester().tokens(40).topk(4).experts(512).id_range(5).flag(1).seed(seed++).Test(DType::kFloat32);
  InitRoutingV2Tester().tokens(40).topk(4).experts(512).id_range(5).mode(1).capacity(7).before_capacity(true)
      .seed(seed++).Test(DType::kFloat32);
}

// Capacity below, at and above demand (the largest expert count), with every flag value.
TEST(InitRoutingV2, CapacityAndFlags) {
  uint64_t seed = 200;
  for (int64_t C : {1, 2, 3, 5, 8, 40}) {
    for (bool before : {false, true}) {
      for (int64_t flag : {0, 1, 2}) {
        InitRoutingV2Tester().tokens(12).topk(3).experts(6).mode(1).capacity(C).before_capacity(before).flag(flag)
            .unused_counts(true).seed(seed++).Test(DType::kBFloat16);
      }
    }
  }
}

// activeNum below, at and above N*K, and 0 (all rows).
TEST(InitRoutingV2, ActiveNum) {
  uint64_t seed = 300;
  for (int64_t active : {0, 1, 5, 20, 35, 36, 37, 1000}) {
    for (int64_t flag : {0, 1, 2}) {
      InitRoutingV2Tester().tokens(12).topk(3).experts(6).active_num(active).flag(flag).unused_counts(true)
          .seed(seed++).Test(DType::kFloat16);
    }
  }
}

// Mode 0 with flag 0: ids up to 2^31 - 1, sorted by one, two or three digits of 11 bits.
TEST(InitRoutingV2, LargeIdsWithoutExpertCount) {
  uint64_t seed = 400;
  for (int64_t range : {int64_t{1}, int64_t{2}, int64_t{2048}, int64_t{2049}, int64_t{1} << 22, int64_t{1} << 23,
                        int64_t{2147483647}}) {
    InitRoutingV2Tester().tokens(300).topk(4).experts(0).id_range(range).active_num(700).seed(seed++)
        .Test(DType::kFloat32);
    InitRoutingV2Tester().tokens(300).topk(4).experts(3).id_range(range).seed(seed++).Test(DType::kBFloat16);
  }
  InitRoutingV2Tester().tokens(700).topk(8).experts(0).id_range(int64_t{1} << 30).hidden(33).all_targets(true)
      .seed(seed++).Test(DType::kFloat16);
}

TEST(InitRoutingV2, LayoutsAndApis) {
  uint64_t seed = 500;
  for (Layout in : kLayouts) {
    for (Layout out : kLayouts) {
      for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
        for (DType dt : kFloats) {
          InitRoutingV2Tester().layout(in, out).api(api).flag(1).active_num(10).hidden(13).seed(seed++).Test(dt);
          InitRoutingV2Tester().layout(in, out).api(api).mode(1).capacity(2).before_capacity(true).hidden(13)
              .seed(seed++).Test(dt);
        }
      }
    }
  }
}

TEST(InitRoutingV2, EmptyTensors) {
  for (Api api : {Api::kCpp, Api::kAclnn}) {
    for (int64_t mode : {0, 1}) {
      // N = 0, H = 0, K = 0: mode 1 still writes its +0 rows, written counts are 0.
      InitRoutingV2Tester().mode(mode).tokens(0).flag(1).before_capacity(true).api(api).Test(DType::kFloat32);
      InitRoutingV2Tester().mode(mode).hidden(0).flag(2).before_capacity(true).api(api).Test(DType::kFloat16);
      InitRoutingV2Tester().mode(mode).topk(0).flag(1).before_capacity(true).api(api).Test(DType::kBFloat16);
      InitRoutingV2Tester().mode(mode).tokens(0).topk(0).hidden(0).api(api).Test(DType::kFloat32);
    }
    InitRoutingV2Tester().tokens(0).experts(0).api(api).Test(DType::kFloat32);  // no expert count at all
    InitRoutingV2Tester().tokens(0).active_num(3).api(api).Test(DType::kFloat32);
  }
}

// Outputs of 8 MiB and more are written with streaming stores, on rows that start at a 16-byte boundary (the
// others take memcpy): H = 2049 puts successive rows at every 4-byte offset; H = 2048 streams every row.
TEST(InitRoutingV2, LargeOutputsStream) {
  uint64_t seed = 600;
  for (int64_t H : {2048, 2049}) {
    for (DType dt : kFloats) {
      InitRoutingV2Tester().tokens(1024).topk(4).experts(16).ids(Ids::kDistinct).hidden(H).flag(1).seed(seed++)
          .Test(dt);
      // Mode 1 with about half the rows zeroed.
      InitRoutingV2Tester().tokens(1024).topk(4).experts(16).mode(1).capacity(512).before_capacity(true).hidden(H)
          .seed(seed++).Test(dt);
    }
  }
  InitRoutingV2Tester().tokens(1024).topk(4).experts(16).hidden(2049).active_num(3000).all_targets(true)
      .seed(seed++).Test(DType::kBFloat16);
  // A quarter of the pairs active: about a third of the tokens are copied nowhere, in runs of several, and are
  // neither read nor prefetched (8 MiB of f32 output: streamed).
  InitRoutingV2Tester().tokens(1024).topk(4).experts(16).hidden(2048).active_num(1024).all_targets(true)
      .seed(seed++).Test(DType::kFloat32);
  // K > 64 destinations per token row: copied in batches of 64.
  InitRoutingV2Tester().tokens(8).topk(100).experts(300).hidden(4096).flag(2).all_targets(true).seed(seed++)
      .Test(DType::kFloat32);
}

TEST(InitRoutingV2, BitIdenticalAcrossSimdTargetsAndThreads) {
  // 5000 pairs: 10 blocks of the counting sort (one task); many output rows split over the threads.
  for (DType dt : kFloats) {
    InitRoutingV2Tester().tokens(1000).topk(5).experts(64).hidden(64).flag(1).all_targets(true).seed(7).Test(dt);
    InitRoutingV2Tester().tokens(1000).topk(5).experts(64).mode(1).capacity(60).before_capacity(true).hidden(64)
        .all_targets(true).seed(8).Test(dt);
  }
  InitRoutingV2Tester().tokens(700).topk(3).experts(9).hidden(33).active_num(1500).flag(2)
      .layout(Layout::kTransposed, Layout::kPadded).all_targets(true).seed(9).Test(DType::kFloat16);
  // About 20 MiB moved: up to 16-24 chunks of tokens, taken by whichever thread is free (ChunkQueue).
  InitRoutingV2Tester().tokens(512).topk(4).experts(16).hidden(2048).flag(1).all_targets(true).seed(12)
      .Test(DType::kFloat32);
  InitRoutingV2Tester().tokens(512).topk(4).experts(16).mode(1).capacity(100).hidden(2048).all_targets(true)
      .seed(13).Test(DType::kBFloat16);
  // Capacity 300 for about 128 pairs per expert: about 11 MiB of padding rows, in chunks from a second queue.
  InitRoutingV2Tester().tokens(512).topk(4).experts(16).mode(1).capacity(300).hidden(2048).all_targets(true)
      .seed(14).Test(DType::kBFloat16);
  // 160000 pairs: the index passes split over up to three threads (2^16 pairs a task), the counting sort
  // and the radix sort of ids without an expert count.
  InitRoutingV2Tester().tokens(20000).topk(8).experts(300).hidden(3).flag(1).all_targets(true).seed(10)
      .Test(DType::kBFloat16);
  InitRoutingV2Tester().tokens(20000).topk(8).experts(0).id_range(int64_t{1} << 30).hidden(2).active_num(100000)
      .all_targets(true).seed(11).Test(DType::kFloat32);
  InitRoutingV2Tester().tokens(20000).topk(8).experts(300).mode(1).capacity(500).before_capacity(true).hidden(2)
      .all_targets(true).seed(12).Test(DType::kFloat16);
}

}  // namespace
}  // namespace moegrad::testing
