// The operator layer: every rule of docs/ops/<op>.md, checked in phase one from metadata, and the plan of a
// call that passes them. One line per operator; the rules are in src/ops/<op>.cc. With `outputs`, Plan is the
// output query (ArgChecker): the outputs of `args` are ignored, `outputs` receives what they must be, and no
// plan is made.
#pragma once

#include <vector>

#include "moegrad/ops.hpp"
#include "src/core/types.h"
#include "src/ops/plan.h"

namespace moegrad::ops {

core::Status Plan(const FinalizeRoutingV2GradArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const TokenPermuteWithRoutingMapGradArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const FinalizeRoutingV2Args& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const TokenPermuteWithRoutingMapArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const InitRoutingV2Args& args, PlanPtr* plan, std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const TokenUnpermuteWithRoutingMapGradArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const InitRoutingV2GradArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);
core::Status Plan(const TokenUnpermuteWithRoutingMapArgs& args, PlanPtr* plan,
                  std::vector<OutputSpec>* outputs = nullptr);

}  // namespace moegrad::ops
