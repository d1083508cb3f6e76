// MoeFinalizeRoutingV2 problems.
#include <algorithm>

#include "src/ref/reference.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class FinalizeProblem final : public Problem {
 public:
  explicit FinalizeProblem(const FinalizeConfig& c) : c_(c) {
    const int64_t R = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    const int64_t pairs = R * K;
    const bool drop_pad = c.mode == 1 || c.mode == 3;
    rows_ = drop_pad ? E * C : pairs;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng());

    expanded_x_ = make.Input(c.dtype, drop_pad ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{pairs, H});
    expanded_x_.FillUniform(rng());
    row_idx_ = make.Index(DType::kInt32, {pairs});
    if (c.x1) {
      x1_ = make.Input(c.dtype, {R, H});
      x1_.FillUniform(rng());
    }
    if (c.x2) {
      x2_ = make.Input(c.dtype, {R, H});
      x2_.FillUniform(rng());
    }
    if (c.scales) {
      scales_ = make.Input(c.dtype, {R, K});
      scales_.FillUniform(rng(), 0.0f, 1.0f);
    }
    if (c.bias || c.expert_idx_without_bias) expert_idx_ = make.Index(DType::kInt32, {R, K});
    if (c.bias) {
      bias_ = make.Input(c.dtype, {E, H});
      bias_.FillUniform(rng());
    }

    // Pair (r, k) sits at p = k*R + r in modes 0 and 1, at r*K + k in modes 2 and 3.
    auto place = [&](int64_t i) { return c.mode <= 1 ? (i % K) * R + i / K : i; };
    if (c.index == IndexData::kRouted) {
      const Routing routing = RandomRouting(R, E, K, rng);
      const std::vector<int32_t> idx = InitRoutingRowIdx(routing, drop_pad ? C : 0);
      for (int64_t i = 0; i < pairs; ++i) row_idx_.SetI(place(i), idx[static_cast<size_t>(i)]);
      if (expert_idx_.rank() > 0) {
        for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, routing.expert[static_cast<size_t>(i)]);
      }
    } else {
      std::uniform_int_distribution<int64_t> value(drop_pad ? -1 : 0, std::max<int64_t>(rows_ - 1, 0));
      for (int64_t p = 0; p < pairs; ++p) row_idx_.SetI(p, value(rng));
      if (expert_idx_.rank() > 0) {
        std::uniform_int_distribution<int64_t> expert(0, E - 1);
        for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, expert(rng));
      }
    }

    out_ = make.Output(c.dtype, {R, H});
    outputs_.push_back({"out", &out_, {}, {}, true});
  }

  const char* op_name() const override { return "MoeFinalizeRoutingV2"; }
  std::string mode_name() const override {
    std::string m = Format("mode%lld %s", (long long)c_.mode, c_.mode == 1 || c_.mode == 3 ? "drop-pad" : "dropless");
    if (c_.x1) m += " x1";
    if (c_.x2) m += " x2";
    if (c_.scales) m += c_.bias ? " scales+bias" : " scales";
    else if (c_.bias) m += " bias";
    return m;
  }
  std::string shape_name() const override {
    const Shape& s = c_.shape;
    return ShapeString(s.tokens, s.hidden, s.experts, s.topk, c_.mode == 1 || c_.mode == 3 ? s.capacity : 0);
  }
  DType dtype() const override { return c_.dtype; }

  Status Plan(moegrad::Plan* plan) const override { return PlanFinalizeRoutingV2(Args(false), plan); }
  Status Call() const override { return FinalizeRoutingV2(Args(false)); }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype);
    const uint64_t R = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk, E = c_.shape.experts;
    uint64_t bytes = CountDistinct(row_idx_, 0, rows_) * H * b + R * K * 4 + R * H * b;
    if (c_.x1) bytes += R * H * b;
    if (c_.x2) bytes += R * H * b;
    if (c_.scales) bytes += R * K * b;
    if (c_.bias) bytes += R * K * 4 + E * H * b;
    return bytes;
  }

  void RunReference() override {
    PrepareExpected();
    ref::FinalizeRoutingV2(Args(true));
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = row_idx_.numel();
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    if (c_.bias && rng() % 3 == 0) {
      const int64_t bad = rng() % 2 ? c_.shape.experts : -1;
      expert_idx_.SetI(i, bad);
      *what = Format("expertIdx[%lld] = %lld", (long long)i, (long long)bad);
      return true;
    }
    const bool drop_pad = c_.mode == 1 || c_.mode == 3;
    const int64_t bad = rng() % 2 ? rows_ + static_cast<int64_t>(rng() % 3) : (drop_pad ? -2 : -1);
    row_idx_.SetI(i, bad);
    *what = Format("expandedRowIdx[%lld] = %lld", (long long)i, (long long)bad);
    return true;
  }

 private:
  FinalizeRoutingV2Args Args(bool reference) const {
    FinalizeRoutingV2Args a;
    a.expanded_x = expanded_x_.view();
    a.expanded_row_idx = row_idx_.view();
    if (c_.x1) a.x1 = x1_.view();
    if (c_.x2) a.x2 = x2_.view();
    if (c_.bias) a.bias = bias_.view();
    if (c_.scales) a.scales = scales_.view();
    if (c_.bias || c_.expert_idx_without_bias) a.expert_idx = expert_idx_.view();
    a.drop_pad_mode = c_.mode;
    a.out = reference ? outputs_[0].expected.view() : out_.view();
    return a;
  }

  FinalizeConfig c_;
  int64_t rows_ = 0;
  HostTensor expanded_x_, row_idx_, x1_, x2_, scales_, expert_idx_, bias_, out_;
};

}  // namespace

std::unique_ptr<Problem> MakeFinalizeProblem(const FinalizeConfig& c) {
  return std::make_unique<FinalizeProblem>(c);
}

}  // namespace moegrad::tool
