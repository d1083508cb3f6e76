// MoeInitRoutingV2 problems.
#include <algorithm>
#include <utility>
#include <vector>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class InitRoutingV2Problem final : public OpProblem<InitRoutingV2Config> {
 public:
  explicit InitRoutingV2Problem(const InitRoutingV2Config& c) : OpProblem(c, ref::InitRoutingV2) {
    const int64_t N = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity, pairs = N * K;
    rows_ = c.mode == 1 ? E * C : (c.active_num > 0 && c.active_num < pairs ? c.active_num : pairs);
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    x_ = make.Uniform(c.dtype, {N, H}, rng());
    expert_idx_ = make.Index(DType::kInt32, {N, K});
    // Routed: K distinct experts per token, as a top-k router picks them. Random: any valid ids, repeats within
    // a token and experts without a pair; without an expert count (mode 0, flag 0) now and then any id >= 0.
    if (c.index == IndexData::kRouted) {
      const Routing routing = RandomRouting(N, E, K, rng);
      for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, routing.expert[static_cast<size_t>(i)]);
    } else {
      const bool any_id = !bounded() && rng() % 2 == 0;
      const uint64_t range = any_id ? uint64_t{1} << (rng() % 32) : static_cast<uint64_t>(std::max<int64_t>(E, 1));
      for (int64_t i = 0; i < pairs; ++i) expert_idx_.SetI(i, static_cast<int64_t>(rng() % range));
    }

    AddOutput("expandedX", &expanded_x_,
              make.Output(c.dtype, c.mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows_, H}));
    AddOutput("expandedRowIdx", &row_idx_, make.Output(DType::kInt32, {pairs}));
    if (writes_counts() || c.unused_counts) {
      AddOutput("expertTokensCountOrCumsum", &counts_, make.Output(DType::kInt32, {E}), writes_counts());
    }
    if (writes_before() || c.unused_counts) {
      AddOutput("expertTokensBeforeCapacity", &before_, make.Output(DType::kInt32, {E}), writes_before());
    }
  }

  std::string mode_name() const override {
    std::string m = c_.mode == 1 ? "drop-pad" : "dropless";
    if (c_.mode == 0 && rows_ < c_.shape.tokens * c_.shape.topk) m += Format(" active=%lld", (long long)rows_);
    if (writes_counts()) m += c_.flag == 1 ? " cumsum" : " count";
    if (writes_before()) m += " before-capacity";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype);
    const uint64_t N = c_.shape.tokens, H = c_.shape.hidden, K = c_.shape.topk, E = c_.shape.experts;
    // The x rows some output row copies, each read once; expertIdx; every output element written once. A pair
    // is copied when its sorted position is below A (mode 0) or its rank in its expert below C (mode 1).
    std::vector<std::pair<int64_t, int64_t>> sorted;  // (id, pair)
    for (int64_t i = 0; i < expert_idx_.numel(); ++i) sorted.push_back({expert_idx_.GetI(i), i});
    std::sort(sorted.begin(), sorted.end());
    std::vector<bool> used(static_cast<size_t>(N), false);
    int64_t rank = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      rank = i > 0 && sorted[i - 1].first == sorted[i].first ? rank + 1 : 0;
      const bool copied = c_.mode == 1 ? rank < c_.shape.capacity : static_cast<int64_t>(i) < rows_;
      if (copied) used[static_cast<size_t>(sorted[i].second / static_cast<int64_t>(K))] = true;
    }
    const uint64_t read_rows = static_cast<uint64_t>(std::count(used.begin(), used.end(), true));
    uint64_t bytes = read_rows * H * b + N * K * 4 + static_cast<uint64_t>(rows_) * H * b + N * K * 4;
    if (writes_counts() || writes_before()) bytes += E * 4;
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    const int64_t pairs = c_.shape.tokens * c_.shape.topk;
    if (pairs == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(pairs));
    const int64_t bad = bounded() && rng() % 2 ? c_.shape.experts + static_cast<int64_t>(rng() % 3) : -1;
    *what = SetBadIndex(&expert_idx_, "expertIdx", i, bad);
    return true;
  }

 private:
  bool writes_counts() const { return c_.mode == 0 && (c_.flag == 1 || c_.flag == 2); }
  bool writes_before() const { return c_.mode == 1 && c_.before_capacity; }
  // The ids are bounded by E (mode 1, or the counts), else any id >= 0 is valid.
  bool bounded() const { return c_.mode == 1 || c_.flag != 0; }

  InitRoutingV2Args CallArgs(bool reference) const override {
    InitRoutingV2Args a;
    a.x = x_.view();
    a.expert_idx = expert_idx_.view();
    a.active_num = c_.active_num;
    a.expert_capacity = c_.mode == 1 ? c_.shape.capacity : 0;
    a.expert_num = c_.shape.experts;
    a.drop_pad_mode = c_.mode;
    a.expert_tokens_count_or_cumsum_flag = c_.flag;
    a.expert_tokens_before_capacity_flag = c_.before_capacity;
    a.expanded_x = OutputView(0, reference);
    a.expanded_row_idx = OutputView(1, reference);
    size_t next = 2;
    if (writes_counts() || c_.unused_counts) {
      if (writes_counts() || !reference) a.expert_tokens_count_or_cumsum = OutputView(next, reference);
      ++next;
    }
    if (writes_before() || c_.unused_counts) {
      if (writes_before() || !reference) a.expert_tokens_before_capacity = OutputView(next, reference);
    }
    return a;
  }

  int64_t rows_ = 0;
  HostTensor x_, expert_idx_, expanded_x_, row_idx_, counts_, before_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const InitRoutingV2Config& c) {
  return std::make_unique<InitRoutingV2Problem>(c);
}

}  // namespace moegrad::tool
