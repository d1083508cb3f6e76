#include "tools/moegrad/common/catalog.h"

#include <strings.h>

#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {

const std::vector<BenchRow>& BenchRows() {
  // Routing as training produces it (random top-k, MoeInitRouting / permute-forward indices), every tensor
  // contiguous, the optional inputs a model uses.
  static const std::vector<BenchRow> rows = {
      {"MoeFinalizeRoutingV2Grad", "finalize-grad", "dropless scales+bias",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 0;
         c.scales = c.bias = true;
         c.seed = seed;
         return MakeFinalizeGradProblem(c);
       }},
      {"MoeFinalizeRoutingV2Grad", "finalize-grad", "drop-pad scales",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 1;
         c.scales = true;
         c.seed = seed;
         return MakeFinalizeGradProblem(c);
       }},
      {"MoeTokenPermuteWithRoutingMapGrad", "permute-grad", "dropless probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteGradConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = false;
         c.probs = true;
         c.seed = seed;
         return MakePermuteGradProblem(c);
       }},
      {"MoeTokenPermuteWithRoutingMapGrad", "permute-grad", "drop-pad probs",
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
      {"MoeFinalizeRoutingV2", "finalize", "mode2 dropless scales+bias",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 2;
         c.scales = c.bias = true;
         c.seed = seed;
         return MakeFinalizeProblem(c);
       }},
      {"MoeFinalizeRoutingV2", "finalize", "mode3 drop-pad scales",
       [](const Shape& s, DType dt, uint64_t seed) {
         FinalizeConfig c;
         c.shape = s;
         c.dtype = dt;
         c.mode = 3;
         c.scales = true;
         c.seed = seed;
         return MakeFinalizeProblem(c);
       }},
      {"MoeTokenPermuteWithRoutingMap", "permute", "dropless probs",
       [](const Shape& s, DType dt, uint64_t seed) {
         PermuteConfig c;
         c.shape = s;
         c.dtype = dt;
         c.drop_and_pad = false;
         c.probs = true;
         c.seed = seed;
         return MakePermuteProblem(c);
       }},
      {"MoeTokenPermuteWithRoutingMap", "permute", "drop-pad probs",
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
  return strcasecmp(name.c_str(), "all") == 0 || strcasecmp(name.c_str(), row.op) == 0 ||
         strcasecmp(name.c_str(), row.key) == 0;
}

}  // namespace moegrad::tool
