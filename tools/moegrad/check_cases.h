// Random problems for `moegrad check`: small shapes around the vector widths, every mode, dtype,
// optional-input combination, index-data kind and layout policy of each operator.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tools/moegrad/common/problem.h"

namespace moegrad::tool {

struct CheckCase {
  std::unique_ptr<Problem> problem;
  std::string description;  // the config, enough to see what failed
};

struct CheckOp {
  const char* op;   // OpInfo<Args>::kName
  const char* key;  // OpInfo<Args>::kKey
  std::function<CheckCase(std::mt19937_64& rng)> random_case;
};

const std::vector<CheckOp>& CheckOps();

}  // namespace moegrad::tool
