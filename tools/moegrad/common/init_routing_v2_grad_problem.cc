// MoeInitRoutingV2Grad problems.
#include <algorithm>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

class InitRoutingV2GradProblem final : public OpProblem<InitRoutingV2GradConfig> {
 public:
  explicit InitRoutingV2GradProblem(const InitRoutingV2GradConfig& c) : OpProblem(c, ref::InitRoutingV2Grad) {
    const int64_t N = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    const int64_t pairs = N * K;
    rows_ = c.mode == 1 ? E * C : (c.active_num > 0 && c.active_num < pairs ? c.active_num : pairs);
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);
    grad_ = make.Uniform(c.dtype, c.mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows_, H}, rng());
    row_idx_ = make.Index(DType::kInt32, {pairs});
    // Index data as MoeInitRoutingV2 makes it from a random top-k routing (its stable sort by expert), or any
    // valid values: duplicates, -1 in mode 1, values past activeNum in mode 0.
    const int64_t lo = c.mode == 1 ? -1 : 0, hi = c.mode == 1 ? E * C : pairs;
    FillFinalizeIndices(c.index, c.shape, c.mode == 1 ? C : 0, false, lo, std::max(lo, hi - 1), rng, &row_idx_,
                        nullptr);
    AddOutput("out", &out_, make.Output(c.dtype, {N, H}));
  }

  // No routing weights: the tokens' dtype is every float tensor's.
  DType weight_dtype() const override { return c_.dtype; }

  std::string mode_name() const override {
    std::string m = c_.mode == 1 ? "drop-pad" : "dropless";
    if (c_.mode == 0 && rows_ < c_.shape.tokens * c_.shape.topk) m += Format(" active=%lld", (long long)rows_);
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype);
    const uint64_t N = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk;
    return CountDistinct(row_idx_, 0, rows_) * H * b + N * K * 4 + N * H * b;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = c_.shape.tokens * c_.shape.topk;
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    const int64_t hi = c_.mode == 1 ? c_.shape.experts * c_.shape.capacity : pairs;
    const int64_t bad = rng() % 2 ? hi + static_cast<int64_t>(rng() % 3) : (c_.mode == 1 ? -2 : -1);
    *what = SetBadIndex(&row_idx_, "expandedRowIdx", i, bad);
    return true;
  }

 private:
  InitRoutingV2GradArgs CallArgs(bool reference) const override {
    InitRoutingV2GradArgs a;
    a.grad_expanded_x = grad_.view();
    a.expanded_row_idx = row_idx_.view();
    a.top_k = c_.shape.topk;
    a.drop_pad_mode = c_.mode;
    a.active_num = c_.active_num;
    a.out = OutputView(0, reference);
    return a;
  }

  int64_t rows_ = 0;
  HostTensor grad_, row_idx_, out_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const InitRoutingV2GradConfig& c) {
  return std::make_unique<InitRoutingV2GradProblem>(c);
}

}  // namespace moegrad::tool
