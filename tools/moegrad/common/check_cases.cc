#include "tools/moegrad/common/check_cases.h"

#include <algorithm>
#include <optional>

#include "moegrad/op_info.hpp"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool Chance(std::mt19937_64& rng, int percent) { return Uniform(rng, 0, 99) < percent; }
// Uniform in [lo, min(limit, 6)]: the small sizes (K, C) the cases use.
int64_t Small(std::mt19937_64& rng, int64_t lo, int64_t limit) { return Uniform(rng, lo, std::min<int64_t>(limit, 6)); }

DType RandomDType(std::mt19937_64& rng) {
  const DType all[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  return all[Uniform(rng, 0, 2)];
}
DType RandomMapDType(std::mt19937_64& rng) { return Chance(rng, 50) ? DType::kInt8 : DType::kBool; }

// Hidden sizes below, at and above the vector widths, with odd tails; now and then a long row.
int64_t RandomHidden(std::mt19937_64& rng) {
  static const int64_t sizes[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 129, 257};
  if (Chance(rng, 3)) return Uniform(rng, 1000, 2100);
  return sizes[Uniform(rng, 0, static_cast<int64_t>(std::size(sizes)) - 1)];
}

// Tokens: mostly a handful, sometimes none, sometimes enough to split over threads.
int64_t RandomTokens(std::mt19937_64& rng) {
  if (Chance(rng, 4)) return 0;
  if (Chance(rng, 10)) return Uniform(rng, 40, 300);
  return Uniform(rng, 1, 12);
}

LayoutPolicy RandomLayout(std::mt19937_64& rng) {
  const LayoutPolicy all[] = {LayoutPolicy::kContiguous, LayoutPolicy::kStrided, LayoutPolicy::kMixed};
  return all[Uniform(rng, 0, 2)];
}

const char* PolicyName(LayoutPolicy l) {
  switch (l) {
    case LayoutPolicy::kContiguous: return "contiguous";
    case LayoutPolicy::kStrided: return "strided";
    case LayoutPolicy::kMixed: return "mixed";
  }
  return "?";
}

// Mostly ordinary values; now and then signed zeros and subnormals, or those with infinities and NaNs too
// (the kernels and the reference must agree on every one: which elements are NaN, every other bit).
SpecialValues RandomSpecials(std::mt19937_64& rng) {
  const int64_t u = Uniform(rng, 0, 99);
  return u < 15 ? SpecialValues::kAll : u < 25 ? SpecialValues::kFinite : SpecialValues::kNone;
}

std::string Describe(const Problem& p, IndexData index, LayoutPolicy layout, SpecialValues specials,
                     uint64_t seed) {
  return Format("%s %s %s %s, %s indices, %s layout, %s values, seed %llu", p.op_name(), p.mode_name().c_str(),
                p.precision_name().c_str(), p.shape_name().c_str(),
                index == IndexData::kRouted ? "routed" : "random", PolicyName(layout),
                SpecialValuesName(specials), static_cast<unsigned long long>(seed));
}

// The draws of each operator's own fields, after the shared ones (index kind, T, H, E) and before the dtypes,
// layout and seed. Routed index data needs K distinct experts (K <= E); random index data may use any K.
void Draw(FinalizeRoutingV2GradConfig& c, std::mt19937_64& rng) {
  const bool routed = c.index == IndexData::kRouted;
  c.shape.topk = Small(rng, 1, routed ? c.shape.experts : 6);
  c.mode = Uniform(rng, 0, 1);
  c.shape.capacity = Small(rng, 1, 6);
  const int64_t pairs = c.shape.tokens * c.shape.topk;
  if (c.mode == 0 && pairs > 1 && Chance(rng, 30)) c.active_num = Uniform(rng, 1, pairs - 1);
  if (c.mode == 0 && Chance(rng, 10)) c.active_num = pairs + Uniform(rng, 0, 3);
  c.scales = Chance(rng, 75);
  c.bias = c.scales && Chance(rng, 50);
  c.expanded_x_without_scales = !c.scales && Chance(rng, 50);
  c.grad_scales_without_scales = !c.scales && Chance(rng, 50);
}

void Draw(TokenPermuteWithRoutingMapGradConfig& c, std::mt19937_64& rng) {
  const bool routed = c.index == IndexData::kRouted;
  c.shape.tokens = std::max<int64_t>(c.shape.tokens, 1);  // tokensNum > 0
  c.drop_and_pad = Chance(rng, 50);
  c.probs = Chance(rng, 70);
  // Dropless probs (N routed entries in a T x E map) need K <= E too.
  c.shape.topk = Small(rng, 1, routed || (c.probs && !c.drop_and_pad) ? c.shape.experts : 6);
  // The forward's gather fills at most T slots per expert; random indices may use any capacity.
  c.shape.capacity = Small(rng, 1, routed ? c.shape.tokens : 6);
  c.routing_map = Chance(rng, 30);
  c.probs_grad_without_probs = !c.probs && Chance(rng, 40);
  c.map_dtype = RandomMapDType(rng);
}

void Draw(TokenUnpermuteWithRoutingMapConfig& c, std::mt19937_64& rng) {
  const bool routed = c.index == IndexData::kRouted;
  c.padded_mode = Chance(rng, 50);
  c.probs = Chance(rng, 70);
  // A top-k routing map (dropless probs need exactly K routed entries per row): K <= E.
  c.shape.topk = Small(rng, 1, c.shape.experts);
  // Pad rows name tokens: none without tokens; the permute fills at most T slots per expert.
  c.shape.capacity = c.shape.tokens == 0 ? 0 : Small(rng, 1, routed ? c.shape.tokens : 6);
  c.restore_shape = Chance(rng, 30);
  c.routing_map = Chance(rng, 30);
  c.permute_probs_without_probs = !c.probs && Chance(rng, 40);
  c.map_dtype = RandomMapDType(rng);
}

void Draw(FinalizeRoutingV2Config& c, std::mt19937_64& rng) {
  c.mode = Uniform(rng, 0, 3);
  c.shape.topk = Small(rng, 1, c.index == IndexData::kRouted ? c.shape.experts : 6);
  c.shape.capacity = Small(rng, 1, 6);
  c.x1 = Chance(rng, 50);
  c.x2 = Chance(rng, 50);
  c.scales = Chance(rng, 70);
  c.bias = Chance(rng, 40);
  c.expert_idx_without_bias = !c.bias && Chance(rng, 25);
}

void Draw(TokenPermuteWithRoutingMapConfig& c, std::mt19937_64& rng) {
  c.drop_and_pad = Chance(rng, 50);
  c.shape.topk = Small(rng, 0, c.shape.experts);        // dropless: K routed per row
  c.shape.capacity = Small(rng, 0, c.shape.tokens);     // numOutTokens <= T*E
  c.probs = Chance(rng, 70);
  c.permute_probs_without_probs = !c.probs && Chance(rng, 40);
  c.map_dtype = RandomMapDType(rng);
}

void Draw(InitRoutingV2Config& c, std::mt19937_64& rng) {
  const bool routed = c.index == IndexData::kRouted;
  c.mode = Uniform(rng, 0, 1);
  c.shape.topk = Small(rng, Chance(rng, 5) ? 0 : 1, routed ? c.shape.experts : 6);
  // Capacity below and above the demand (about N*K / E per expert).
  c.shape.capacity = Chance(rng, 20) ? Uniform(rng, 1, 40) : Small(rng, 1, 6);
  c.flag = Uniform(rng, 0, 2);
  c.before_capacity = Chance(rng, 60);
  const int64_t pairs = c.shape.tokens * c.shape.topk;
  if (c.mode == 0 && pairs > 1 && Chance(rng, 30)) c.active_num = Uniform(rng, 1, pairs - 1);
  if (c.mode == 0 && Chance(rng, 10)) c.active_num = pairs + Uniform(rng, 0, 3);
  c.unused_counts = Chance(rng, 30);
}

void Draw(InitRoutingV2GradConfig& c, std::mt19937_64& rng) {
  const bool routed = c.index == IndexData::kRouted;
  c.shape.topk = Small(rng, 1, routed ? c.shape.experts : 6);
  c.mode = Uniform(rng, 0, 1);
  // The forward needs a capacity >= 1; arbitrary index data may also come with no rows at all (E, 0, H).
  c.shape.capacity = Small(rng, routed ? 1 : 0, 6);
  const int64_t pairs = c.shape.tokens * c.shape.topk;
  if (c.mode == 0 && pairs > 1 && Chance(rng, 30)) c.active_num = Uniform(rng, 1, pairs - 1);
  if (c.mode == 0 && Chance(rng, 10)) c.active_num = pairs + Uniform(rng, 0, 3);
  if (c.mode == 1 && Chance(rng, 10)) c.active_num = Uniform(rng, 1, 9);  // ignored in mode 1
}

void Draw(TokenUnpermuteWithRoutingMapGradConfig& c, std::mt19937_64& rng) {
  c.drop_and_pad = Chance(rng, 50);
  c.shape.topk = Small(rng, Chance(rng, 5) ? 0 : 1, c.shape.experts);  // K <= E: the map has K per row
  // Capacity below and above the demand (the forward pads with unrouted tokens, repeats past T).
  c.shape.capacity = Chance(rng, 20) ? Uniform(rng, 0, 2 * c.shape.tokens + 1) : Small(rng, 1, 6);
  if (c.shape.tokens == 0) c.shape.capacity = 0;  // no token to fill a row with
  c.probs = Chance(rng, 70);
  c.extras = !c.probs && Chance(rng, 40);
  c.probs_grad_without_probs = !c.probs && Chance(rng, 40);
  c.mindspeed = Chance(rng, 25);
  c.restore_shape = Chance(rng, 30);
  c.map_dtype = RandomMapDType(rng);
}

// One random case of the operator of Config::Args; `specials` fixes the kind of values instead of drawing it.
template <typename Config>
CheckCase RandomCase(std::mt19937_64& rng, std::optional<SpecialValues> specials) {
  Config c;
  c.index = Chance(rng, 50) ? IndexData::kRouted : IndexData::kRandom;
  c.shape.tokens = RandomTokens(rng);
  c.shape.hidden = RandomHidden(rng);
  c.shape.experts = Uniform(rng, 1, 12);
  Draw(c, rng);
  // The two dtype groups independently: all nine combinations.
  c.dtype = RandomDType(rng);
  c.weight_dtype = RandomDType(rng);
  c.layout = RandomLayout(rng);
  c.specials = specials ? *specials : RandomSpecials(rng);
  c.seed = rng();
  CheckCase k;
  k.problem = MakeProblem(c);
  k.description = Describe(*k.problem, c.index, c.layout, c.specials, c.seed);
  return k;
}

template <typename Config>
CheckOp Op() {
  using Info = OpInfo<typename Config::Args>;
  return {Info::kName, Info::kKey, [](std::mt19937_64& rng) { return RandomCase<Config>(rng, std::nullopt); },
          [](std::mt19937_64& rng, SpecialValues s) { return RandomCase<Config>(rng, s); }};
}

}  // namespace

const std::vector<CheckOp>& CheckOps() {
  static const std::vector<CheckOp> ops = {
      Op<FinalizeRoutingV2GradConfig>(),
      Op<TokenPermuteWithRoutingMapGradConfig>(),
      Op<FinalizeRoutingV2Config>(),
      Op<TokenPermuteWithRoutingMapConfig>(),
      Op<InitRoutingV2Config>(),
      Op<InitRoutingV2GradConfig>(),
      Op<TokenUnpermuteWithRoutingMapConfig>(),
      Op<TokenUnpermuteWithRoutingMapGradConfig>(),
  };
  return ops;
}

}  // namespace moegrad::tool
