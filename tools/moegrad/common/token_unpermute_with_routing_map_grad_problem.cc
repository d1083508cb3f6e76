// MoeTokenUnpermuteWithRoutingMapGrad problems.
#include <algorithm>
#include <numeric>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class TokenUnpermuteWithRoutingMapGradProblem final : public OpProblem<TokenUnpermuteWithRoutingMapGradConfig> {
 public:
  explicit TokenUnpermuteWithRoutingMapGradProblem(const TokenUnpermuteWithRoutingMapGradConfig& c)
      : OpProblem(c, ref::TokenUnpermuteWithRoutingMapGrad) {
    const int64_t T = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    const int64_t C = c.shape.capacity;
    n_ = c.drop_and_pad ? E * C : T * K;
    has_map_ = c.probs || c.extras;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    grad_ = make.Uniform(c.dtype, {T, H}, rng());
    out_index_ = make.Index(DType::kInt32, {n_});
    token_id_ = make.Index(DType::kInt32, {n_});
    if (has_map_) {
      map_ = make.Index(c.map_dtype, {T, E});
      perm_ = make.Uniform(c.dtype, {n_, H}, rng());
    }
    if (c.probs) probs_ = make.Uniform(c.weights(), {T, E}, rng());

    // A top-k map (K distinct experts per token; dropless with probs needs exactly K per row).
    const std::vector<uint8_t> routed = RoutingMap(RandomRouting(T, E, std::min(K, E), rng));
    std::vector<int32_t> rows(static_cast<size_t>(n_)), tokens(static_cast<size_t>(n_));
    if (c.index == IndexData::kRouted) {
      // What the forward writes from the permute's sortedIndices: dropless outIndex = sortedIndices,
      // permuteTokenId[i] = i / K; drop-and-pad the stable sort of sortedIndices (token ids) with its positions.
      std::vector<int32_t> sorted;
      if (!c.drop_and_pad || C > 0) sorted = PermuteSortedIndices(routed, T, E, c.drop_and_pad ? C : 0);
      // The permute fills at most T rows per expert; a capacity past T repeats tokens.
      for (int64_t e = 0; c.drop_and_pad && e < E && T > 0; ++e) {
        for (int64_t r = std::min(C, T); r < C; ++r) {
          sorted.insert(sorted.begin() + e * C + r, static_cast<int32_t>(rng() % static_cast<uint64_t>(T)));
        }
      }
      if (!c.drop_and_pad) {
        for (int64_t i = 0; i < n_; ++i) {
          rows[static_cast<size_t>(i)] = sorted[static_cast<size_t>(i)];
          tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i / K);
        }
      } else {
        std::vector<int32_t> order(static_cast<size_t>(n_));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return sorted[static_cast<size_t>(a)] < sorted[static_cast<size_t>(b)];
        });
        for (int64_t i = 0; i < n_; ++i) {
          rows[static_cast<size_t>(i)] = order[static_cast<size_t>(i)];
          tokens[static_cast<size_t>(i)] = sorted[static_cast<size_t>(order[static_cast<size_t>(i)])];
        }
      }
    } else {
      std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(n_ - 1, 0));
      std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(T - 1, 0));
      for (int64_t i = 0; i < n_; ++i) {
        rows[static_cast<size_t>(i)] = static_cast<int32_t>(row(rng));
        tokens[static_cast<size_t>(i)] =
            static_cast<int32_t>(c.drop_and_pad ? token(rng) : i / std::max<int64_t>(K, 1));
      }
    }
    for (int64_t i = 0; i < n_; ++i) {
      out_index_.SetI(i, rows[static_cast<size_t>(i)]);
      const bool both = c.mindspeed && !c.drop_and_pad;  // MindSpeed: sortedIndices as both (never read here)
      token_id_.SetI(i, both ? rows[static_cast<size_t>(i)] : tokens[static_cast<size_t>(i)]);
    }
    if (has_map_) FillRoutingMap(routed, c.map_dtype == DType::kInt8 && c.index == IndexData::kRandom, rng, &map_);

    AddOutput("permutedTokensGrad", &perm_grad_, make.Output(c.dtype, {n_, H}));
    if (c.probs || c.probs_grad_without_probs) {
      AddOutput("probsGrad", &probs_grad_, make.Output(c.weights(), {T, E}), c.probs);
    }
  }

  std::string mode_name() const override {
    std::string m = c_.drop_and_pad ? "drop-pad" : "dropless";
    if (c_.probs) m += " probs";
    if (has_map_) m += c_.map_dtype == DType::kBool ? " map:bool" : " map:int8";
    if (c_.mindspeed && !c_.drop_and_pad) m += " mindspeed";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t T = c_.shape.tokens, H = c_.shape.hidden, E = c_.shape.experts, N = n_;
    const uint64_t tokens = c_.drop_and_pad ? CountDistinct(token_id_, 0, c_.shape.tokens) : (N > 0 ? T : 0);
    uint64_t bytes = tokens * H * b + N * 4 + (c_.drop_and_pad ? N * 4 : 0) + N * H * b;
    if (c_.probs) {
      bytes += CountDistinct(out_index_, 0, n_) * H * b + 2 * T * E * w + (c_.drop_and_pad ? 0 : T * E);
    }
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    if (!c_.drop_and_pad && c_.probs && map_.numel() > 0 && rng() % 3 == 0) {
      // Dropless probs need exactly K routed entries per row: add or remove one.
      *what = FlipRoutingMapEntry(&map_, rng, "a row without K routed entries");
      return true;
    }
    if (n_ == 0) return false;
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(n_));
    const bool token = c_.drop_and_pad && rng() % 2 == 0;
    const int64_t hi = token ? c_.shape.tokens : n_;
    const int64_t bad = OutsideRange(hi, rng);
    *what = token ? SetBadIndex(&token_id_, "permuteTokenId", i, bad) : SetBadIndex(&out_index_, "outIndex", i, bad);
    return true;
  }

 private:
  TokenUnpermuteWithRoutingMapGradArgs CallArgs(bool reference) const override {
    TokenUnpermuteWithRoutingMapGradArgs a;
    a.unpermuted_tokens_grad = grad_.view();
    a.out_index = out_index_.view();
    a.permute_token_id = token_id_.view();
    if (has_map_) {
      a.routing_map = map_.view();
      a.permuted_tokens = perm_.view();
    }
    if (c_.probs) a.probs = probs_.view();
    a.drop_and_pad = c_.drop_and_pad;
    if (c_.restore_shape) a.restore_shape = std::vector<int64_t>{c_.shape.tokens, c_.shape.hidden};
    a.permuted_tokens_grad = OutputView(0, reference);
    if (outputs_.size() > 1 && (c_.probs || !reference)) a.probs_grad = OutputView(1, reference);
    return a;
  }

  int64_t n_ = 0;
  bool has_map_ = false;
  HostTensor grad_, out_index_, token_id_, map_, perm_, probs_, perm_grad_, probs_grad_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const TokenUnpermuteWithRoutingMapGradConfig& c) {
  return std::make_unique<TokenUnpermuteWithRoutingMapGradProblem>(c);
}

}  // namespace moegrad::tool
