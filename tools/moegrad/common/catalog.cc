#include "tools/moegrad/common/catalog.h"

#include "moegrad/op_info.hpp"
#include "tools/moegrad/common/op_names.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {

namespace {
using FinalizeGrad = OpInfo<FinalizeRoutingV2GradArgs>;
using PermuteGrad = OpInfo<TokenPermuteWithRoutingMapGradArgs>;
using Finalize = OpInfo<FinalizeRoutingV2Args>;
using Permute = OpInfo<TokenPermuteWithRoutingMapArgs>;
}  // namespace

const std::vector<BenchRow>& BenchRows() {
  // Routing as training produces it (random top-k, MoeInitRouting / permute-forward indices), every tensor
  // contiguous, the optional inputs a model uses.
  static const std::vector<BenchRow> rows = {
      {FinalizeGrad::kName, FinalizeGrad::kKey, "dropless scales+bias",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 0;
         c.scales = c.bias = true;
         c.seed = seed;
         return MakeFinalizeGradProblem(c);
       }},
      {FinalizeGrad::kName, FinalizeGrad::kKey, "drop-pad scales",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 1;
         c.scales = true;
         c.seed = seed;
         return MakeFinalizeGradProblem(c);
       }},
      {PermuteGrad::kName, PermuteGrad::kKey, "dropless probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = false;
         c.probs = true;
         c.seed = seed;
         return MakePermuteGradProblem(c);
       }},
      {PermuteGrad::kName, PermuteGrad::kKey, "drop-pad probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = true;
         c.probs = true;
         c.seed = seed;
         return MakePermuteGradProblem(c);
       }},
      // The forward operators, for scale: their gradients above move the same bytes the other way.
      {Finalize::kName, Finalize::kKey, "mode2 dropless scales+bias",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 2;
         c.scales = c.bias = true;
         c.seed = seed;
         return MakeFinalizeProblem(c);
       }},
      {Finalize::kName, Finalize::kKey, "mode3 drop-pad scales",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 3;
         c.scales = true;
         c.seed = seed;
         return MakeFinalizeProblem(c);
       }},
      {Permute::kName, Permute::kKey, "dropless probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = false;
         c.probs = true;
         c.seed = seed;
         return MakePermuteProblem(c);
       }},
      {Permute::kName, Permute::kKey, "drop-pad probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = true;
         c.probs = true;
         c.seed = seed;
         return MakePermuteProblem(c);
       }},
  };
  return rows;
}

bool RowMatches(const BenchRow& row, const std::string& name) {
  return OpSelected(name, OpName{row.op, row.key});
}

}  // namespace moegrad::tool
