// MoeTokenPermuteWithRoutingMap problems.
#include <algorithm>

#include "src/ref/reference.h"
#include "tools/moegrad/common/problems.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {
namespace {

class TokenPermuteWithRoutingMapProblem final : public OpProblem<TokenPermuteWithRoutingMapConfig> {
 public:
  explicit TokenPermuteWithRoutingMapProblem(const TokenPermuteWithRoutingMapConfig& c)
      : OpProblem(c, ref::TokenPermuteWithRoutingMap) {
    const int64_t T = c.shape.tokens, H = c.shape.hidden, E = c.shape.experts, K = c.shape.topk;
    n_ = c.drop_and_pad ? E * c.shape.capacity : T * K;
    std::mt19937_64 rng(c.seed);
    TensorMaker make(c.layout, rng(), c.specials, c.values);

    tokens_ = make.Uniform(c.dtype, {T, H}, rng());
    map_ = make.Index(c.map_dtype, {T, E});
    if (c.probs) probs_ = make.Uniform(c.weights(), {T, E}, rng(), 0.0f, 1.0f);
    // Dropless needs exactly K routed entries per row: a top-k routing. Drop-and-pad takes any map.
    std::vector<uint8_t> routed;
    if (c.drop_and_pad && c.index == IndexData::kRandom) {
      routed.resize(static_cast<size_t>(T * E));
      const uint64_t density = rng() % 4 + 1;  // a quarter to all of the entries
      for (auto& r : routed) r = rng() % 4 < density;
    } else {
      routed = RoutingMap(RandomRouting(T, E, K, rng));
    }
    FillRoutingMap(routed, c.map_dtype == DType::kInt8 && c.index == IndexData::kRandom, rng, &map_);

    AddOutput("permuteTokens", &permuted_, make.Output(c.dtype, {n_, H}));
    AddOutput("sortedIndices", &sorted_, make.Output(DType::kInt32, {n_}));
    if (c.probs || c.permute_probs_without_probs) {
      AddOutput("permuteProbs", &permuted_probs_, make.Output(c.weights(), {n_}), c.probs);
    }
  }

  std::string mode_name() const override {
    std::string m = c_.drop_and_pad ? "drop-pad" : "dropless";
    if (c_.probs) m += " probs";
    m += c_.map_dtype == DType::kBool ? " map:bool" : " map:int8";
    return m;
  }

  uint64_t MinBytes() const override {
    const uint64_t b = ElementSize(c_.dtype), w = ElementSize(c_.weights());
    const uint64_t T = c_.shape.tokens, H = c_.shape.hidden, E = c_.shape.experts, N = n_;
    // Token rows the output copies (each read once): those with a routed entry (dropless), or those the
    // drop-and-pad gather names.
    std::vector<uint8_t> routed(static_cast<size_t>(T * E));
    for (uint64_t i = 0; i < T * E; ++i) routed[i] = map_.GetI(static_cast<int64_t>(i)) != 0;
    std::vector<bool> used(static_cast<size_t>(T), false);
    if (c_.drop_and_pad && c_.shape.capacity > 0) {
      for (int32_t t : PermuteSortedIndices(routed, c_.shape.tokens, c_.shape.experts, c_.shape.capacity)) {
        used[static_cast<size_t>(t)] = true;
      }
    } else {
      for (uint64_t i = 0; i < T * E; ++i) used[i / E] = used[i / E] || routed[i];
    }
    const uint64_t rows = static_cast<uint64_t>(std::count(used.begin(), used.end(), true));
    uint64_t bytes = rows * H * b + T * E + N * H * b + N * 4;
    if (c_.probs) bytes += 2 * N * w;
    return bytes;
  }

  bool CorruptIndex(std::mt19937_64& rng, std::string* what) override {
    // Only dropless mode has index rules: every map row holds exactly K entries. Break one row.
    const int64_t T = c_.shape.tokens, E = c_.shape.experts;
    if (c_.drop_and_pad || T == 0 || E == 0) return false;
    const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(T));
    const int64_t e = static_cast<int64_t>(rng() % static_cast<uint64_t>(E));
    const int64_t v = map_.GetI(t * E + e) != 0 ? 0 : 1;
    map_.SetI(t * E + e, v);
    *what = Format("routingMap[%lld][%lld] = %lld (row no longer holds K entries)", (long long)t, (long long)e,
                   (long long)v);
    return true;
  }

 private:
  TokenPermuteWithRoutingMapArgs CallArgs(bool reference) const override {
    TokenPermuteWithRoutingMapArgs a;
    a.tokens = tokens_.view();
    a.routing_map = map_.view();
    if (c_.probs) a.probs = probs_.view();
    a.num_out_tokens = n_;
    a.drop_and_pad = c_.drop_and_pad;
    a.permute_tokens = OutputView(0, reference);
    a.sorted_indices = OutputView(1, reference);
    if (outputs_.size() > 2 && (c_.probs || !reference)) a.permute_probs = OutputView(2, reference);
    return a;
  }

  int64_t n_ = 0;
  HostTensor tokens_, map_, probs_, permuted_, sorted_, permuted_probs_;
};

}  // namespace

std::unique_ptr<Problem> MakeProblem(const TokenPermuteWithRoutingMapConfig& c) {
  return std::make_unique<TokenPermuteWithRoutingMapProblem>(c);
}

}  // namespace moegrad::tool
