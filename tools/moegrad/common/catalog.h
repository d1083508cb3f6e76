// The benchmark rows: one per operator and mode, each a recipe for a realistic problem of a given shape.
// `moegrad bench`, the Google Benchmark suite and bench/compare_torch.py (through the JSON) share them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tools/moegrad/common/problem.h"

namespace moegrad::tool {

struct BenchRow {
  const char* op;    // OpInfo<Args>::kName, e.g. "MoeFinalizeRoutingV2Grad"
  const char* key;   // OpInfo<Args>::kKey, for --op, the JSON and benchmark names, e.g. "finalize-routing-v2-grad"
  const char* mode;  // e.g. "dropless scales+bias"
  // Whether the operator has routing weights: one without runs a mixed precision (bf16+f32) as nothing new, so
  // `moegrad bench` and the benchmark suite run it in the token dtypes only.
  bool weights;
  // `dtype`: the tokens' (every float tensor but the routing weights); `weight_dtype`: the weights' (scales,
  // probs and their gradients); `values`: the magnitudes of the float inputs (InputValues).
  std::function<std::unique_ptr<Problem>(const Shape& shape, DType dtype, DType weight_dtype, uint64_t seed,
                                         InputValues values)>
      make;
};

const std::vector<BenchRow>& BenchRows();

// True when the --op value `name` selects `row` (see OpSelected: "all", the CANN name, the key or an older
// spelling of it, case-insensitive).
bool RowMatches(const BenchRow& row, const std::string& name);

}  // namespace moegrad::tool
