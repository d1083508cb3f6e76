#include "tools/moegrad/common/catalog.h"

#include <algorithm>

#include "moegrad/op_info.hpp"
#include "tools/moegrad/common/op_names.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

// The optional inputs a row passes; for MoeInitRoutingV2 the outputs it asks for; kHalfActive: activeNum =
// N*K/2 (the forward materializing half the rows).
enum Inputs : unsigned { kScales = 1, kBias = 2, kProbs = 4, kCumsum = 8, kBeforeCapacity = 16, kHalfActive = 32 };

// The makers: a row's mode (dropPadMode of the finalize operators, dropAndPad 0/1 of the permute operators)
// and optional inputs set on its operator's config. FinalizeRoutingV2GradConfig and FinalizeRoutingV2Config
// share one.
template <typename FinalizeOrGradConfig>
void Set(FinalizeOrGradConfig& c, int64_t mode, unsigned in) {
  c.mode = mode;
  c.scales = in & kScales;
  c.bias = in & kBias;
}
void Set(TokenPermuteWithRoutingMapGradConfig& c, int64_t mode, unsigned in) {
  c.drop_and_pad = mode != 0;
  c.probs = in & kProbs;
}
void Set(TokenPermuteWithRoutingMapConfig& c, int64_t mode, unsigned in) {
  c.drop_and_pad = mode != 0;
  c.probs = in & kProbs;
}
void Set(TokenUnpermuteWithRoutingMapConfig& c, int64_t mode, unsigned in) {
  c.padded_mode = mode != 0;
  c.probs = in & kProbs;
}
// Dropless: the cumsum, and with kHalfActive the first half of the rows (activeNum = N*K / 2); drop/pad: the
// counts before capacity.
void Set(InitRoutingV2Config& c, int64_t mode, unsigned in) {
  c.mode = mode;
  c.flag = in & kCumsum ? 1 : 0;
  c.before_capacity = in & kBeforeCapacity;
  c.active_num = in & kHalfActive ? std::max<int64_t>(1, c.shape.tokens * c.shape.topk / 2) : 0;
}

void Set(TokenUnpermuteWithRoutingMapGradConfig& c, int64_t mode, unsigned in) {
  c.drop_and_pad = mode != 0;
  c.probs = in & kProbs;
}

void Set(InitRoutingV2GradConfig& c, int64_t mode, unsigned in) {
  c.mode = mode;
  c.active_num = (in & kHalfActive) ? c.shape.tokens * c.shape.topk / 2 : 0;
}

// Whether the operator has routing weights (a tensor of the weight dtype group).
template <typename Args>
bool HasWeights() {
  for (const TensorArg<Args>& arg : OpInfo<Args>::kTensors) {
    if (arg.group == DTypeGroup::kWeights) return true;
  }
  return false;
}

// A row of the operator of Config::Args; everything else at the config's defaults (routed index data, every
// tensor contiguous).
template <typename Config>
BenchRow Row(const char* mode_label, int64_t mode, unsigned inputs) {
  using Info = OpInfo<typename Config::Args>;
  auto make = [=](const Shape& shape, DType dtype, DType weight_dtype, uint64_t seed, InputValues values) {
    Config c;
    c.shape = shape;
    c.dtype = dtype;
    c.weight_dtype = weight_dtype;
    c.seed = seed;
    c.values = values;
    Set(c, mode, inputs);
    return MakeProblem(c);
  };
  return {Info::kName, Info::kKey, mode_label, HasWeights<typename Config::Args>(), make};
}

}  // namespace

const std::vector<BenchRow>& BenchRows() {
  // Routing as training produces it (random top-k, MoeInitRouting / permute-forward indices), every tensor
  // contiguous, the optional inputs a model uses.
  static const std::vector<BenchRow> rows = {
      Row<FinalizeRoutingV2GradConfig>("dropless scales+bias", 0, kScales | kBias),
      Row<FinalizeRoutingV2GradConfig>("drop-pad scales", 1, kScales),
      Row<TokenPermuteWithRoutingMapGradConfig>("dropless probs", 0, kProbs),
      Row<TokenPermuteWithRoutingMapGradConfig>("drop-pad probs", 1, kProbs),
      // The forward operators, for scale: their gradients above move the same bytes the other way.
      Row<FinalizeRoutingV2Config>("mode2 dropless scales+bias", 2, kScales | kBias),
      Row<FinalizeRoutingV2Config>("mode3 drop-pad scales", 3, kScales),
      Row<TokenPermuteWithRoutingMapConfig>("dropless probs", 0, kProbs),
      Row<TokenPermuteWithRoutingMapConfig>("drop-pad probs", 1, kProbs),
      // The V2 dispatch (forward of MoeFinalizeRoutingV2's modes 2, 3 and the gradients above).
      Row<InitRoutingV2Config>("dropless cumsum", 0, kCumsum),
      Row<InitRoutingV2Config>("dropless active-half cumsum", 0, kCumsum | kHalfActive),
      Row<InitRoutingV2Config>("drop-pad before-capacity", 1, kBeforeCapacity),
      // The init-routing gradient with the forward's indices: dropless, active-truncated, drop/pad.
      Row<InitRoutingV2GradConfig>("dropless", 0, 0),
      Row<InitRoutingV2GradConfig>("dropless active=N*K/2", 0, kHalfActive),
      Row<InitRoutingV2GradConfig>("drop-pad", 1, 0),
      // The routing-map combine, on the permute's indices: the inverse of its dispatch rows above.
      Row<TokenUnpermuteWithRoutingMapConfig>("dropless probs", 0, kProbs),
      Row<TokenUnpermuteWithRoutingMapConfig>("drop-pad probs", 1, kProbs),
      // The routing-map combine's gradient with the forward's indices.
      Row<TokenUnpermuteWithRoutingMapGradConfig>("dropless probs", 0, kProbs),
      Row<TokenUnpermuteWithRoutingMapGradConfig>("drop-pad probs", 1, kProbs),
  };
  return rows;
}

bool RowMatches(const BenchRow& row, const std::string& name) { return OpSelected(name, OpName{row.op, row.key}); }

}  // namespace moegrad::tool
