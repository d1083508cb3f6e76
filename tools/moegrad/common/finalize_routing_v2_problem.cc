// MoeFinalizeRoutingV2 problems.
#include <algorithm>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

class FinalizeRoutingV2Problem final : public OpProblem<FinalizeRoutingV2Config> {
 public:
  explicit FinalizeRoutingV2Problem(const FinalizeRoutingV2Config& c)
      : OpProblem(c, ref::FinalizeRoutingV2) {
    const int64_t R = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    const int64_t pairs = R * K;
    const bool drop_pad = c.drop_pad();
    rows_ = drop_pad ? E * C : pairs;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    const std::vector<int64_t> x_shape = drop_pad ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{pairs, H};
    expanded_x_ = make.Uniform(c.dtype, x_shape, rng());
    row_idx_ = make.Index(DType::kInt32, {pairs});
    if (c.x1) x1_ = make.Uniform(c.dtype, {R, H}, rng());
    if (c.x2) x2_ = make.Uniform(c.dtype, {R, H}, rng());
    if (c.scales) scales_ = make.Uniform(c.weights(), {R, K}, rng(), 0.0f, 1.0f);
    if (c.bias || c.expert_idx_without_bias) expert_idx_ = make.Index(DType::kInt32, {R, K});
    if (c.bias) bias_ = make.Uniform(c.dtype, {E, H}, rng());

    // Pair (r, k) sits at p = k*R + r in modes 0 and 1, at r*K + k in modes 2 and 3.
    FillFinalizeIndices(c.index, c.shape, drop_pad ? C : 0, c.mode <= 1, drop_pad ? -1 : 0,
                        std::max<int64_t>(rows_ - 1, 0), rng, &row_idx_,
                        expert_idx_.rank() > 0 ? &expert_idx_ : nullptr);
    if (expert_idx_.rank() > 0 && c.bias_experts > 0) RedrawExperts(c.bias_experts, rng, &expert_idx_);

    AddOutput("out", &out_, make.Output(c.dtype, {R, H}));
  }

  std::string mode_name() const override {
    std::string m = Format("mode%lld %s", (long long)c_.mode, c_.drop_pad() ? "drop-pad" : "dropless");
    if (c_.x1) m += " x1";
    if (c_.x2) m += " x2";
    if (c_.scales) m += c_.bias ? " scales+bias" : " scales";
    else if (c_.bias) m += " bias";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t R = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk, E = c_.shape.experts;
    uint64_t bytes = CountDistinct(row_idx_, 0, rows_) * H * b + R * K * 4 + R * H * b;
    if (c_.x1) bytes += R * H * b;
    if (c_.x2) bytes += R * H * b;
    if (c_.scales) bytes += R * K * w;
    if (c_.bias) bytes += R * K * 4 + CountDistinct(expert_idx_, 0, E) * H * b;  // the bias rows named
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = row_idx_.numel();
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    if (c_.bias && rng() % 3 == 0) {
      *what = SetBadIndex(&expert_idx_, "expertIdx", i, rng() % 2 ? c_.shape.experts : -1);
      return true;
    }
    const int64_t bad = rng() % 2 ? rows_ + static_cast<int64_t>(rng() % 3) : (c_.drop_pad() ? -2 : -1);
    *what = SetBadIndex(&row_idx_, "expandedRowIdx", i, bad);
    return true;
  }

 private:
  FinalizeRoutingV2Args CallArgs(bool reference) const override {
    FinalizeRoutingV2Args a;
    a.expanded_x = expanded_x_.view();
    a.expanded_row_idx = row_idx_.view();
    if (c_.x1) a.x1 = x1_.view();
    if (c_.x2) a.x2 = x2_.view();
    if (c_.bias) a.bias = bias_.view();
    if (c_.scales) a.scales = scales_.view();
    if (c_.bias || c_.expert_idx_without_bias) a.expert_idx = expert_idx_.view();
    a.drop_pad_mode = c_.mode;
    a.out = OutputView(0, reference);
    return a;
  }

  int64_t rows_ = 0;
  HostTensor expanded_x_, row_idx_, x1_, x2_, scales_, expert_idx_, bias_, out_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const FinalizeRoutingV2Config& c) {
  return std::make_unique<FinalizeRoutingV2Problem>(c);
}

}  // namespace moegrad::tool
