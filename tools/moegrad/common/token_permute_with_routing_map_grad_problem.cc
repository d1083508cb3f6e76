// MoeTokenPermuteWithRoutingMapGrad problems.
#include <algorithm>
#include <numeric>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class TokenPermuteWithRoutingMapGradProblem final : public OpProblem<TokenPermuteWithRoutingMapGradConfig> {
 public:
  explicit TokenPermuteWithRoutingMapGradProblem(const TokenPermuteWithRoutingMapGradConfig& c)
      : OpProblem(c, ref::TokenPermuteWithRoutingMapGrad) {
    const int64_t T = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    n_ = c.drop_and_pad ? E * c.shape.capacity : T * K;
    has_map_ = (c.probs && !c.drop_and_pad) || c.routing_map;
    const bool map = has_map_;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    grad_ = make.Uniform(c.dtype, {n_, H}, rng());
    if (c.probs) probs_grad_in_ = make.Uniform(c.weights(), {n_}, rng());
    sorted_ = make.Index(DType::kInt32, {n_});
    if (map) map_ = make.Index(c.map_dtype, {T, E});

    std::vector<uint8_t> routed;
    std::vector<int32_t> sorted;
    if (c.index == IndexData::kRouted) {
      // What the forward produced from a top-k routing (K distinct experts per token).
      routed = RoutingMap(RandomRouting(T, E, K, rng));
      sorted = PermuteSortedIndices(routed, T, E, c.drop_and_pad ? c.shape.capacity : 0);
    } else {
      // Any valid indices (duplicates, tokens never named); a map with N routed entries anywhere (dropless
      // with probs needs exactly N) or at random.
      const int64_t hi = c.drop_and_pad ? T : n_;
      std::uniform_int_distribution<int64_t> value(0, std::max<int64_t>(hi - 1, 0));
      for (int64_t p = 0; p < n_; ++p) sorted.push_back(static_cast<int32_t>(value(rng)));
      routed.assign(static_cast<size_t>(T * E), 0);
      if (map && !c.drop_and_pad && c.probs) {
        std::vector<int64_t> cells(static_cast<size_t>(T * E));
        std::iota(cells.begin(), cells.end(), 0);
        std::shuffle(cells.begin(), cells.end(), rng);
        for (int64_t i = 0; i < n_; ++i) routed[static_cast<size_t>(cells[static_cast<size_t>(i)])] = 1;
      } else {
        for (auto& r : routed) r = rng() % 2;
      }
    }
    for (int64_t p = 0; p < n_; ++p) sorted_.SetI(p, sorted[static_cast<size_t>(p)]);
    if (map) FillRoutingMap(routed, c.map_dtype == DType::kInt8 && c.index == IndexData::kRandom, rng, &map_);

    AddOutput("tokensGrad", &tokens_grad_, make.Output(c.dtype, {T, H}));
    if (c.probs || c.probs_grad_without_probs) {
      AddOutput("probsGrad", &probs_grad_, make.Output(c.weights(), {T, E}), c.probs);
    }
  }

  std::string mode_name() const override {
    std::string m = c_.drop_and_pad ? "drop-pad" : "dropless";
    if (c_.probs) m += " probs";
    if (has_map_) m += c_.map_dtype == DType::kBool ? " map:bool" : " map:int8";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t T = c_.shape.tokens, H = c_.shape.hidden, E = c_.shape.experts, N = n_;
    // Dropless reads the rows the indices name; drop-and-pad every row (each goes to some token).
    const uint64_t rows = c_.drop_and_pad ? N : CountDistinct(sorted_, 0, n_);
    uint64_t bytes = rows * H * b + N * 4 + T * H * b;
    if (c_.probs) bytes += N * w + T * E * w + (c_.drop_and_pad ? 0 : T * E);
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    if (!c_.drop_and_pad && c_.probs && rng() % 3 == 0) {
      // Dropless probs need exactly N routed entries: add or remove one.
      if (map_.numel() > 0) {
        *what = FlipRoutingMapEntry(&map_, rng, "routed count != N");
        return true;
      }
    }
    if (n_ == 0) return false;
    const int64_t p = static_cast<int64_t>(rng() % static_cast<uint64_t>(n_));
    const int64_t hi = c_.drop_and_pad ? c_.shape.tokens : n_;
    *what = SetBadIndex(&sorted_, "sortedIndices", p, OutsideRange(hi, rng));
    return true;
  }

 private:
  TokenPermuteWithRoutingMapGradArgs CallArgs(bool reference) const override {
    TokenPermuteWithRoutingMapGradArgs a;
    a.permuted_token_output_grad = grad_.view();
    if (c_.probs) a.permuted_probs_output_grad = probs_grad_in_.view();
    a.sorted_indices = sorted_.view();
    if (has_map_) a.routing_map = map_.view();
    a.num_experts = c_.shape.experts;
    a.tokens_num = c_.shape.tokens;
    a.drop_and_pad = c_.drop_and_pad;
    a.tokens_grad = OutputView(0, reference);
    if (outputs_.size() > 1 && (c_.probs || !reference)) a.probs_grad = OutputView(1, reference);
    return a;
  }

  int64_t n_ = 0;
  bool has_map_ = false;
  HostTensor grad_, probs_grad_in_, sorted_, map_, tokens_grad_, probs_grad_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const TokenPermuteWithRoutingMapGradConfig& c) {
  return std::make_unique<TokenPermuteWithRoutingMapGradProblem>(c);
}

}  // namespace moegrad::tool
