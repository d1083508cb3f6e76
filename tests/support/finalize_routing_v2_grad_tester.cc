#include "tests/support/finalize_routing_v2_grad_tester.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "acl/acl.h"
#include "moegrad/plan.hpp"
#include "src/ref/reference.h"

namespace moegrad::testing {
namespace {

// Whole-storage bytes of an optional tensor (empty when absent).
std::vector<uint8_t> Bytes(const std::optional<TestTensor>& t) { return t ? t->Snapshot() : std::vector<uint8_t>(); }

}  // namespace

std::array<std::optional<TestTensor>*, 8> FinalizeRoutingV2GradCase::Tensors() {
  return {&grad_y, &expanded_row_idx, &expanded_x, &scales, &expert_idx, &bias, &grad_expanded_x, &grad_scales};
}
std::array<const std::optional<TestTensor>*, 8> FinalizeRoutingV2GradCase::Tensors() const {
  return {&grad_y, &expanded_row_idx, &expanded_x, &scales, &expert_idx, &bias, &grad_expanded_x, &grad_scales};
}

TestCall<FinalizeRoutingV2GradArgs> FinalizeRoutingV2GradCase::Call() {
  TestCall<FinalizeRoutingV2GradArgs> call;
  const auto all = Tensors();
  for (size_t k = 0; k < all.size(); ++k) call.tensors[k] = *all[k] ? &**all[k] : nullptr;
  call.attrs = {drop_pad_mode, active_num, expert_num, expert_capacity};
  return call;
}

FinalizeRoutingV2GradArgs FinalizeRoutingV2GradCase::Args() const {
  std::array<const TensorView*, 8> views{};
  const auto all = Tensors();
  for (size_t k = 0; k < all.size(); ++k) views[k] = *all[k] ? &(*all[k])->view() : nullptr;
  const int64_t attrs[] = {drop_pad_mode, active_num, expert_num, expert_capacity};
  return MakeArgs<FinalizeRoutingV2GradArgs>(views.data(), attrs);
}

int64_t FinalizeRoutingV2GradTester::rows() const {
  if (mode_ == 1) return experts_ * capacity_;
  const int64_t pairs = tokens_ * topk_;
  return active_num_ > 0 && active_num_ < pairs ? active_num_ : pairs;
}

std::string FinalizeRoutingV2GradTester::Describe(DTypes dtypes) const {
  std::ostringstream s;
  s << "R=" << tokens_ << " H=" << hidden_ << " K=" << topk_ << " mode=" << mode_ << " E=" << experts_
    << " C=" << capacity_ << " activeNum=" << active_num_ << " scales=" << scales_ << " bias=" << bias_
    << " dup=" << duplicates_ << " in=" << LayoutName(in_layout_) << " out=" << LayoutName(out_layout_)
    << " x=" << pass_expanded_x_ << " gs=" << pass_grad_scales_ << " eidx=" << pass_expert_idx_ << " seed=" << seed_
    << " api=" << ApiName(api_) << " dtype=" << DTypesName(dtypes);
  return s.str();
}

FinalizeRoutingV2GradCase FinalizeRoutingV2GradTester::Build(DTypes dtypes) const {
  const DType dtype = dtypes.tokens, wdtype = dtypes.weights;
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ull + 17);
  const int64_t R = tokens_, H = hidden_, K = topk_, E = experts_, C = capacity_;
  const int64_t pairs = R * K;
  const int64_t rows = this->rows();
  uint64_t tensor_seed = seed_ * 64;
  auto make = [&](DType t, std::vector<int64_t> sizes, Layout layout) {
    return TestTensor(t, std::move(sizes), layout, ++tensor_seed);
  };
  const std::vector<int64_t> row_shape = mode_ == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows, H};

  FinalizeRoutingV2GradCase c;
  c.dtype = dtype;
  c.weight_dtype = wdtype;
  c.drop_pad_mode = mode_;
  c.active_num = active_num_;
  c.expert_num = mode_ == 1 ? E : 0;
  c.expert_capacity = mode_ == 1 ? C : 0;

  // Expert of every pair: bias rows in both modes, the slot's expert in mode 1.
  std::vector<int64_t> expert(static_cast<size_t>(pairs));
  for (auto& e : expert) e = E > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(E)) : 0;
  std::vector<int64_t> idx(static_cast<size_t>(pairs));
  if (mode_ == 0 && !duplicates_) {
    // The forward's layout: a permutation of [0, R*K); values >= activeNum are the dropped pairs.
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
  } else if (mode_ == 0) {
    for (auto& v : idx) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
  } else if (!duplicates_) {
    // The forward's layout: pairs fill their expert's slots in pair order; past capacity (and one in eight at
    // random) they are dropped.
    std::vector<int64_t> used(static_cast<size_t>(E), 0);
    for (int64_t i = 0; i < pairs; ++i) {
      int64_t& n = used[static_cast<size_t>(expert[i])];
      idx[i] = (n < C && rng() % 8 != 0) ? expert[i] * C + n++ : -1;
    }
  } else {
    for (auto& v : idx) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(E * C + 1)) - 1;
  }

  c.grad_y = make(dtype, {R, H}, in_layout_);
  c.grad_y->FillUniform(rng);
  c.expanded_row_idx = make(DType::kInt32, {pairs}, in_layout_);
  for (int64_t i = 0; i < pairs; ++i) c.expanded_row_idx->SetI(i, idx[i]);
  if (scales_ || pass_expanded_x_) {
    c.expanded_x = make(dtype, row_shape, in_layout_);
    c.expanded_x->FillUniform(rng);
  }
  if (scales_) {
    c.scales = make(wdtype, {R, K}, in_layout_);
    c.scales->FillUniform(rng);
  }
  if (bias_ || pass_expert_idx_) {
    c.expert_idx = make(DType::kInt32, {R, K}, in_layout_);
    // Without bias expertIdx is not read: values far outside any range prove it.
    for (int64_t i = 0; i < pairs; ++i) c.expert_idx->SetI(i, bias_ ? expert[i] : (i % 2 ? -7 : 1 << 30));
  }
  if (bias_) {
    c.bias = make(dtype, {E, H}, in_layout_);
    c.bias->FillUniform(rng);
  }
  c.grad_expanded_x = make(dtype, row_shape, out_layout_);
  if (scales_ || pass_grad_scales_) c.grad_scales = make(wdtype, {R, K}, out_layout_);
  return c;
}

int FinalizeRoutingV2GradTester::Run(FinalizeRoutingV2GradCase& c, std::string* message) const {
  const Status s = c.Call().Run(api_);
  *message = s.message();
  return static_cast<int>(s.code());
}

void FinalizeRoutingV2GradTester::Test(DTypes dtypes) const {
  SCOPED_TRACE(Describe(dtypes));
  ASSERT_TRUE(scales_ || !bias_) << "bias needs scales";
  FinalizeRoutingV2GradCase c = Build(dtypes);
  const FinalizeRoutingV2GradCase before = c;
  std::string message;
  ASSERT_EQ(Run(c, &message), 0) << message;
  Check(c, before);
}

void FinalizeRoutingV2GradTester::TestDeterminism(DTypes dtypes) const {
  SCOPED_TRACE(Describe(dtypes));
  ASSERT_TRUE(scales_ || !bias_) << "bias needs scales";
  const FinalizeRoutingV2GradCase before = Build(dtypes);
  std::vector<uint8_t> gx_first, gs_first;
  std::string first_run;
  const std::vector<std::string> targets = ForEachSimdTarget([&] {
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      FinalizeRoutingV2GradCase c = before;
      std::string message;
      ASSERT_EQ(Run(c, &message), 0) << message;
      const std::string run = std::string(SimdTarget()) + " x " + std::to_string(threads) + " threads";
      if (first_run.empty()) {
        Check(c, before);
        first_run = run;
        gx_first = Bytes(c.grad_expanded_x);
        gs_first = Bytes(c.grad_scales);
        continue;
      }
      EXPECT_TRUE(c.grad_expanded_x->SameBytes(gx_first))
          << "gradExpandedX of " << run << " differs from " << first_run;
      if (c.grad_scales) {
        EXPECT_TRUE(c.grad_scales->SameBytes(gs_first)) << "gradScales of " << run << " differs from " << first_run;
      }
    }
  });
  SetNumThreads(0);
  EXPECT_GE(targets.size(), 1u);
}

void FinalizeRoutingV2GradTester::Check(const FinalizeRoutingV2GradCase& c,
                                        const FinalizeRoutingV2GradCase& before) const {
  const DType dtype = c.dtype, wdtype = c.weight_dtype;
  const int64_t R = tokens_, H = hidden_, K = topk_, pairs = R * K;
  const int64_t rows = this->rows();

  // Inputs are never written.
  const auto now = c.Tensors();
  const auto then = before.Tensors();
  for (size_t k = 0; k < now.size(); ++k) {
    if (OpInfo<FinalizeRoutingV2GradArgs>::kTensors[k].role == ArgRole::kInput && *now[k]) {
      EXPECT_TRUE((*now[k])->SameBytes((*then[k])->Snapshot()))
          << "input " << OpInfo<FinalizeRoutingV2GradArgs>::kTensors[k].name << " was written";
    }
  }

  // The reference, on separate contiguous outputs.
  TestTensor ref_gx(dtype, c.grad_expanded_x->sizes_vector());
  TestTensor ref_gs(wdtype, {R, K});
  FinalizeRoutingV2GradArgs ra = c.Args();
  ra.grad_expanded_x = ref_gx.view();
  ra.grad_scales = scales_ ? std::optional<TensorView>(ref_gs.view()) : std::nullopt;
  ref::FinalizeRoutingV2Grad(ra);

  // gradExpandedX: the sum order is fixed, so every bit must match; rows nobody writes are zero.
  std::vector<int> writers(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t v = c.expanded_row_idx->GetI(i);
    if (v >= 0 && v < rows) ++writers[static_cast<size_t>(v)];
  }
  int bad = 0;
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t e = v * H + j;
      const uint32_t got = ElementBits(*c.grad_expanded_x, e), want = ElementBits(ref_gx, e);
      const bool zero_ok = writers[static_cast<size_t>(v)] > 0 || c.grad_expanded_x->GetF(e) == 0.0f;
      if ((got != want || !zero_ok) && bad++ < 5) {
        ADD_FAILURE() << "gradExpandedX row " << v << " col " << j << " (" << writers[static_cast<size_t>(v)]
                      << " writers): got " << c.grad_expanded_x->GetF(e) << " (0x" << std::hex << got << ") want "
                      << ref_gx.GetF(e) << " (0x" << want << std::dec << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << "gradExpandedX elements differing from the reference";
  EXPECT_TRUE(c.grad_expanded_x->OutsideViewUnchanged(before.grad_expanded_x->Snapshot()))
      << "gradExpandedX storage outside the view was written";

  if (!scales_) {
    if (c.grad_scales) {
      EXPECT_TRUE(c.grad_scales->SameBytes(before.grad_scales->Snapshot())) << "gradScalesOut written without scales";
    }
    return;
  }
  EXPECT_TRUE(c.grad_scales->OutsideViewUnchanged(before.grad_scales->Snapshot()))
      << "gradScales storage outside the view was written";
  // gradScales: the same fp32 products p_j in both, summed in different orders. Recursive summation of n
  // terms is within gamma_n * sum |p_j| of the exact sum (gamma_n = n u / (1 - n u), u = 2^-24); the kernel's
  // 16 partial sums plus a 4-level tree have at most H/16 + 4 <= H + 16 terms in any chain. Then one rounding
  // to the weights' dtype (unit roundoff ud), plus half an fp16 subnormal step.
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(H + 16);
  const double gamma = n * u / (1.0 - n * u);
  const double ud = wdtype == DType::kFloat32 ? 0.0 : Epsilon(wdtype) / 2.0;
  const double tiny = wdtype == DType::kFloat16 ? std::ldexp(1.0, -25) : 0.0;
  bad = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t v = c.expanded_row_idx->GetI(i);
    const bool dropped = v < 0 || v >= rows;
    double exact = 0.0, abs_sum = 0.0;
    for (int64_t j = 0; j < H; ++j) {
      const float x = dropped ? 0.0f : c.expanded_x->GetF(v * H + j);
      const float b = c.bias ? c.bias->GetF(c.expert_idx->GetI(i) * H + j) : 0.0f;
      const float p = (x + b) * c.grad_y->GetF((i / K) * H + j);
      exact += p;
      abs_sum += std::fabs(p);
    }
    const double got = c.grad_scales->GetF(i), want = ref_gs.GetF(i);
    const double tol_exact = gamma * abs_sum + ud * (std::fabs(exact) + gamma * abs_sum) + tiny;
    const double tol_ref = 2.0 * gamma * abs_sum + ud * (std::fabs(got) + std::fabs(want)) + 2.0 * tiny;
    const bool ok = std::fabs(got - exact) <= tol_exact && std::fabs(got - want) <= tol_ref;
    if (!ok && bad++ < 5) {
      ADD_FAILURE() << "gradScales[" << i << "] = " << got << ", reference " << want << ", exact " << exact
                    << " (tolerances " << tol_ref << ", " << tol_exact << ")";
    }
  }
  EXPECT_EQ(bad, 0) << "gradScales elements outside the bound";
}

}  // namespace moegrad::testing
