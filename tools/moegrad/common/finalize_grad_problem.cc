// MoeFinalizeRoutingV2Grad problems.
#include <algorithm>
#include <cmath>

#include "src/ref/reference.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class FinalizeGradProblem final : public Problem {
 public:
  explicit FinalizeGradProblem(const FinalizeGradConfig& c) : c_(c) {
    const int64_t R = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    const int64_t pairs = R * K;
    rows_ = c.mode == 1 ? E * C : (c.active_num > 0 && c.active_num < pairs ? c.active_num : pairs);
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng());
    const std::vector<int64_t> x_shape =
        c.mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows_, H};

    grad_y_ = make.Input(c.dtype, {R, H});
    grad_y_.FillUniform(rng());
    row_idx_ = make.Index(DType::kInt32, {pairs});
    if (c.scales || c.expanded_x_without_scales) {
      expanded_x_ = make.Input(c.dtype, x_shape);
      expanded_x_.FillUniform(rng());
    }
    if (c.scales) {
      scales_ = make.Input(c.dtype, {R, K});
      scales_.FillUniform(rng(), 0.0f, 1.0f);
    }
    if (c.bias) {
      expert_idx_ = make.Index(DType::kInt32, {R, K});
      bias_ = make.Input(c.dtype, {E, H});
      bias_.FillUniform(rng());
    }

    // Index data: expandedRowIdx (and expertIdx) as MoeInitRoutingV2 makes them, or arbitrary valid values.
    if (c.index == IndexData::kRouted) {
      const Routing routing = RandomRouting(R, E, K, rng);
      const std::vector<int32_t> idx = InitRoutingRowIdx(routing, c.mode == 1 ? C : 0);
      for (int64_t i = 0; i < pairs; ++i) row_idx_.SetI(i, idx[static_cast<size_t>(i)]);
      if (c.bias) {
        for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, routing.expert[static_cast<size_t>(i)]);
      }
    } else {
      const int64_t lo = c.mode == 1 ? -1 : 0, hi = c.mode == 1 ? E * C : pairs;
      std::uniform_int_distribution<int64_t> value(lo, std::max(lo, hi - 1));
      for (int64_t i = 0; i < pairs; ++i) row_idx_.SetI(i, value(rng));
      if (c.bias) {
        std::uniform_int_distribution<int64_t> expert(0, E - 1);
        for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, expert(rng));
      }
    }

    grad_expanded_x_ = make.Output(c.dtype, x_shape);
    outputs_.push_back({"gradExpandedX", &grad_expanded_x_, {}, {}, true});
    if (c.scales || c.grad_scales_without_scales) {
      grad_scales_ = make.Output(c.dtype, {R, K});
      outputs_.push_back({"gradScales", &grad_scales_, {}, {}, c.scales});
    }
  }

  const char* op_name() const override { return "MoeFinalizeRoutingV2Grad"; }
  std::string mode_name() const override {
    std::string m = c_.mode == 1 ? "drop-pad" : "dropless";
    if (c_.mode == 0 && rows_ < c_.shape.tokens * c_.shape.topk) m += Format(" active=%lld", (long long)rows_);
    m += c_.scales ? (c_.bias ? " scales+bias" : " scales") : "";
    return m;
  }
  std::string shape_name() const override {
    const Shape& s = c_.shape;
    return ShapeString(s.tokens, s.hidden, s.experts, s.topk, c_.mode == 1 ? s.capacity : 0);
  }
  DType dtype() const override { return c_.dtype; }

  Status Plan(moegrad::Plan* plan) const override { return PlanFinalizeRoutingV2Grad(Args(false), plan); }
  Status Call() const override { return FinalizeRoutingV2Grad(Args(false)); }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype);
    const uint64_t R = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk, E = c_.shape.experts;
    uint64_t bytes = R * H * b + R * K * 4 + static_cast<uint64_t>(rows_) * H * b;
    if (c_.scales) bytes += CountDistinct(row_idx_, 0, rows_) * H * b + 2 * R * K * b;
    if (c_.bias) bytes += R * K * 4 + E * H * b;
    return bytes;
  }

  void RunReference() override {
    PrepareExpected();
    ref::FinalizeRoutingV2Grad(Args(true));
    if (c_.scales) outputs_[1].tolerance = [this](int64_t i) { return DotTolerance(i); };
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = c_.shape.tokens * c_.shape.topk;
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    if (c_.bias && rng() % 3 == 0) {
      const int64_t bad = rng() % 2 ? c_.shape.experts : -1;
      expert_idx_.SetI(i, bad);
      *what = Format("expertIdx[%lld] = %lld", (long long)i, (long long)bad);
      return true;
    }
    const int64_t hi = c_.mode == 1 ? c_.shape.experts * c_.shape.capacity : pairs;
    const int64_t bad = rng() % 2 ? hi + static_cast<int64_t>(rng() % 3) : (c_.mode == 1 ? -2 : -1);
    row_idx_.SetI(i, bad);
    *what = Format("expandedRowIdx[%lld] = %lld", (long long)i, (long long)bad);
    return true;
  }

 private:
  FinalizeRoutingV2GradArgs Args(bool reference) const {
    FinalizeRoutingV2GradArgs a;
    a.grad_y = grad_y_.view();
    a.expanded_row_idx = row_idx_.view();
    if (c_.scales || c_.expanded_x_without_scales) a.expanded_x = expanded_x_.view();
    if (c_.scales) a.scales = scales_.view();
    if (c_.bias) {
      a.expert_idx = expert_idx_.view();
      a.bias = bias_.view();
    }
    a.drop_pad_mode = c_.mode;
    a.active_num = c_.active_num;
    a.expert_num = c_.mode == 1 ? c_.shape.experts : 0;
    a.expert_capacity = c_.mode == 1 ? c_.shape.capacity : 0;
    a.grad_expanded_x = reference ? outputs_[0].expected.view() : grad_expanded_x_.view();
    if (outputs_.size() > 1) a.grad_scales = reference ? outputs_[1].expected.view() : grad_scales_.view();
    if (reference && !c_.scales) a.grad_scales.reset();
    return a;
  }

  // gradScales is a dot product over H whose summation order the spec leaves open. Both results carry a
  // summation error of at most u32 * (sum of |partial sums| of their order); for the reference's sequential
  // order that sum is computed here, and a blocked or tree order (as vector code uses) has smaller partial
  // sums. Allow three times it, plus 2*u32*sum|terms| for short rows, plus one rounding to the dtype each.
  float DotTolerance(int64_t i) const {
    const int64_t K = c_.shape.topk, H = c_.shape.hidden;
    const int64_t v = row_idx_.GetI(i);
    const bool dropped = v < 0 || v >= rows_;
    const int64_t e = c_.bias ? expert_idx_.GetI(i) : 0;
    float partial = 0.0f;
    double partial_sums = 0.0, terms = 0.0;
    for (int64_t j = 0; j < H; ++j) {
      const float x = dropped ? 0.0f : expanded_x_.GetF(v * H + j);  // flat index, also of (E, C, H)
      const float b = c_.bias ? bias_.GetF(e * H + j) : 0.0f;
      const float term = (x + b) * grad_y_.GetF((i / K) * H + j);
      partial = j == 0 ? term : partial + term;
      partial_sums += std::fabs(partial);
      terms += std::fabs(term);
    }
    const double u32 = std::ldexp(1.0, -24);
    const double ref = std::fabs(outputs_[1].expected.GetF(i));
    return static_cast<float>(u32 * (3.0 * partial_sums + 2.0 * terms) + 2.0 * UnitRoundoff(c_.dtype) * ref +
                              1e-30);
  }

  FinalizeGradConfig c_;
  int64_t rows_ = 0;
  HostTensor grad_y_, row_idx_, expanded_x_, scales_, expert_idx_, bias_, grad_expanded_x_, grad_scales_;
};

}  // namespace

std::unique_ptr<Problem> MakeFinalizeGradProblem(const FinalizeGradConfig& c) {
  return std::make_unique<FinalizeGradProblem>(c);
}

}  // namespace moegrad::tool
