// Random problems for `moegrad check` and the special-value tests: small shapes around the vector widths, every
// mode, pair of token and weight dtypes, optional-input combination, index-data kind, layout policy and kind of
// values of each operator.
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
  // A case with every draw random, the kind of input values included.
  std::function<CheckCase(std::mt19937_64& rng)> random_case;
  // The same with the given kind of special values mixed into every float input.
  std::function<CheckCase(std::mt19937_64& rng, SpecialValues specials)> random_case_with;
};

const std::vector<CheckOp>& CheckOps();

}  // namespace moegrad::tool
