// MoeFinalizeRoutingV2Grad problems.
#include <algorithm>
#include <cmath>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

class FinalizeRoutingV2GradProblem final : public OpProblem<FinalizeRoutingV2GradConfig> {
 public:
  explicit FinalizeRoutingV2GradProblem(const FinalizeRoutingV2GradConfig& c)
      : OpProblem(c, ref::FinalizeRoutingV2Grad) {
    const int64_t R = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    const int64_t pairs = R * K;
    rows_ = c.mode == 1 ? E * C : (c.active_num > 0 && c.active_num < pairs ? c.active_num : pairs);
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);
    const std::vector<int64_t> x_shape =
        c.mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows_, H};

    grad_y_ = make.Uniform(c.dtype, {R, H}, rng());
    row_idx_ = make.Index(DType::kInt32, {pairs});
    if (c.scales || c.expanded_x_without_scales) expanded_x_ = make.Uniform(c.dtype, x_shape, rng());
    if (c.scales) scales_ = make.Uniform(c.weights(), {R, K}, rng(), 0.0f, 1.0f);
    if (c.bias) {
      expert_idx_ = make.Index(DType::kInt32, {R, K});
      bias_ = make.Uniform(c.dtype, {E, H}, rng());
    }

    // Index data: expandedRowIdx (and expertIdx) as MoeInitRoutingV2 makes them, or arbitrary valid values.
    const int64_t lo = c.mode == 1 ? -1 : 0, hi = c.mode == 1 ? E * C : pairs;
    FillFinalizeIndices(c.index, c.shape, c.mode == 1 ? C : 0, false, lo, std::max(lo, hi - 1), rng, &row_idx_,
                        c.bias ? &expert_idx_ : nullptr);
    if (c.bias && c.bias_experts > 0) RedrawExperts(c.bias_experts, rng, &expert_idx_);

    AddOutput("gradExpandedX", &grad_expanded_x_, make.Output(c.dtype, x_shape));
    if (c.scales || c.grad_scales_without_scales) {
      AddOutput("gradScales", &grad_scales_, make.Output(c.weights(), {R, K}), c.scales);
    }
  }

  std::string mode_name() const override {
    std::string m = c_.mode == 1 ? "drop-pad" : "dropless";
    if (c_.mode == 0 && rows_ < c_.shape.tokens * c_.shape.topk) m += Format(" active=%lld", (long long)rows_);
    m += c_.scales ? (c_.bias ? " scales+bias" : " scales") : "";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t R = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk, E = c_.shape.experts;
    uint64_t bytes = R * H * b + R * K * 4 + static_cast<uint64_t>(rows_) * H * b;
    if (c_.scales) bytes += CountDistinct(row_idx_, 0, rows_) * H * b + 2 * R * K * w;
    if (c_.bias) bytes += R * K * 4 + CountDistinct(expert_idx_, 0, E) * H * b;  // the bias rows named
    return bytes;
  }

  void RunReference() override {
    OpProblem::RunReference();
    if (c_.scales) outputs_[1].tolerance = [this](int64_t i) { return DotTolerance(i); };
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = c_.shape.tokens * c_.shape.topk;
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    if (c_.bias && rng() % 3 == 0) {
      *what = SetBadIndex(&expert_idx_, "expertIdx", i, rng() % 2 ? c_.shape.experts : -1);
      return true;
    }
    const int64_t hi = c_.mode == 1 ? c_.shape.experts * c_.shape.capacity : pairs;
    const int64_t bad = rng() % 2 ? hi + static_cast<int64_t>(rng() % 3) : (c_.mode == 1 ? -2 : -1);
    *what = SetBadIndex(&row_idx_, "expandedRowIdx", i, bad);
    return true;
  }

 private:
  FinalizeRoutingV2GradArgs CallArgs(bool reference) const override {
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
    a.grad_expanded_x = OutputView(0, reference);
    if (outputs_.size() > 1 && (c_.scales || !reference)) a.grad_scales = OutputView(1, reference);
    return a;
  }

  // gradScales is a dot product over H whose summation order the spec leaves open. Both results carry a
  // summation error of at most u32 * (sum of |partial sums| of their order); for the reference's sequential
  // order that sum is computed here, and a blocked or tree order (as vector code uses) has smaller partial
  // sums. Allow three times it, plus 2*u32*sum|terms| for short rows, plus one rounding each to gradScales'
  // dtype (the weight group's): relative for normal results, one subnormal spacing of that dtype near zero
  // (two fp32 sums a hair apart may round to adjacent subnormals, e.g. FLOAT16 0x8111 and 0x8112).
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
    const DType w = c_.weights();
    const double subnormal = std::ldexp(1.0, w == DType::kFloat16 ? -24 : w == DType::kBFloat16 ? -133 : -149);
    return static_cast<float>(u32 * (3.0 * partial_sums + 2.0 * terms) + 2.0 * UnitRoundoff(w) * ref + subnormal);
  }

  int64_t rows_ = 0;
  HostTensor grad_y_, row_idx_, expanded_x_, scales_, expert_idx_, bias_, grad_expanded_x_, grad_scales_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const FinalizeRoutingV2GradConfig& c) {
  return std::make_unique<FinalizeRoutingV2GradProblem>(c);
}

}  // namespace moegrad::tool
