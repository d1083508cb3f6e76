// MoeTokenUnpermuteWithRoutingMap problems.
#include <algorithm>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class TokenUnpermuteWithRoutingMapProblem final : public OpProblem<TokenUnpermuteWithRoutingMapConfig> {
 public:
  explicit TokenUnpermuteWithRoutingMapProblem(const TokenUnpermuteWithRoutingMapConfig& c)
      : OpProblem(c, ref::TokenUnpermuteWithRoutingMap) {
    const int64_t T = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    n_ = c.padded_mode ? E * c.shape.capacity : T * K;
    has_map_ = (c.probs && !c.padded_mode) || c.routing_map;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    permuted_ = make.Uniform(c.dtype, {n_, H}, rng());
    sorted_ = make.Index(DType::kInt32, {n_});
    if (has_map_) map_ = make.Index(c.map_dtype, {T, E});
    if (c.probs) probs_ = make.Uniform(c.weights(), {T, E}, rng(), 0.0f, 1.0f);

    // A top-k routing (K distinct experts per token): dropless probs need exactly K routed entries per row.
    const std::vector<uint8_t> routed = RoutingMap(RandomRouting(T, E, std::min(K, E), rng));
    std::vector<int32_t> sorted;
    if (c.index == IndexData::kRouted) {
      sorted = PermuteSortedIndices(routed, T, E, c.padded_mode ? c.shape.capacity : 0);
    } else {
      const int64_t hi = c.padded_mode ? T : n_;
      std::uniform_int_distribution<int64_t> value(0, std::max<int64_t>(hi - 1, 0));
      for (int64_t p = 0; p < n_; ++p) sorted.push_back(static_cast<int32_t>(value(rng)));
    }
    for (int64_t p = 0; p < n_; ++p) sorted_.SetI(p, sorted[static_cast<size_t>(p)]);
    if (has_map_) FillRoutingMap(routed, c.map_dtype == DType::kInt8 && c.index == IndexData::kRandom, rng, &map_);

    AddOutput("unpermutedTokens", &out_, make.Output(c.dtype, {T, H}));
    AddOutput("outIndex", &out_index_, make.Output(DType::kInt32, {n_}));
    AddOutput("permuteTokenId", &token_id_, make.Output(DType::kInt32, {n_}));
    if (c.probs || c.permute_probs_without_probs) {
      AddOutput("permuteProbs", &out_probs_, make.Output(c.weights(), {n_}), c.probs);
    }
  }

  std::string mode_name() const override {
    std::string m = c_.padded_mode ? "pad" : "dropless";
    if (c_.probs) m += " probs";
    if (has_map_) m += c_.map_dtype == DType::kBool ? " map:bool" : " map:int8";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t T = c_.shape.tokens, H = c_.shape.hidden, E = c_.shape.experts, N = n_;
    // Dropless reads the rows the indices name; pad every row (each belongs to some token).
    const uint64_t rows = c_.padded_mode ? N : CountDistinct(sorted_, 0, n_);
    uint64_t bytes = rows * H * b + N * 4 + T * H * b + 2 * N * 4;
    if (c_.probs) bytes += 2 * N * w + (c_.padded_mode ? 0 : T * E);
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    if (!c_.padded_mode && c_.probs && rng() % 3 == 0 && map_.numel() > 0) {
      // Dropless probs need exactly K routed entries per row: add or remove one.
      *what = FlipRoutingMapEntry(&map_, rng, "routed count != K");
      return true;
    }
    if (n_ == 0) return false;
    const int64_t p = static_cast<int64_t>(rng() % static_cast<uint64_t>(n_));
    const int64_t hi = c_.padded_mode ? c_.shape.tokens : n_;
    *what = SetBadIndex(&sorted_, "sortedIndices", p, OutsideRange(hi, rng));
    return true;
  }

 private:
  TokenUnpermuteWithRoutingMapArgs CallArgs(bool reference) const override {
    TokenUnpermuteWithRoutingMapArgs a;
    a.permuted_tokens = permuted_.view();
    a.sorted_indices = sorted_.view();
    if (has_map_) a.routing_map = map_.view();
    if (c_.probs) a.probs = probs_.view();
    a.padded_mode = c_.padded_mode;
    if (!c_.probs || c_.restore_shape) a.restore_shape = std::vector<int64_t>{c_.shape.tokens, c_.shape.hidden};
    a.unpermuted_tokens = OutputView(0, reference);
    a.out_index = OutputView(1, reference);
    a.permute_token_id = OutputView(2, reference);
    if (outputs_.size() > 3 && (c_.probs || !reference)) a.permute_probs = OutputView(3, reference);
    return a;
  }

  int64_t n_ = 0;
  bool has_map_ = false;
  HostTensor permuted_, sorted_, map_, probs_, out_, out_index_, token_id_, out_probs_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const TokenUnpermuteWithRoutingMapConfig& c) {
  return std::make_unique<TokenUnpermuteWithRoutingMapProblem>(c);
}

}  // namespace moegrad::tool
