// The C++ API of every operator (moegrad/ops.hpp): Plan<Op> runs phase one, <Op> plans, allocates the
// workspace and runs, Infer<Op>Outputs runs phase one as the output query. One line per operator.
#include "moegrad/ops.hpp"

#include <utility>
#include <vector>

#include "src/entry/public_types.h"
#include "src/ops/ops.h"

namespace moegrad {
namespace {

template <typename Args>
Status MakePlan(const Args& args, Plan* plan) {
  ops::PlanPtr impl;
  const core::Status status = ops::Plan(args, &impl);
  if (status.ok() && plan != nullptr) *plan = Plan(std::move(impl));
  return entry::ToPublic(status);
}

template <typename Args>
Status PlanAndRun(const Args& args) {
  Plan plan;
  const Status status = MakePlan(args, &plan);
  return status.ok() ? plan.Run() : status;
}

template <typename Args>
Status InferOutputs(const Args& args, std::vector<OutputSpec>* outputs) {
  std::vector<OutputSpec> report;
  ops::PlanPtr none;
  const core::Status status = ops::Plan(args, &none, &report);
  if (status.ok() && outputs != nullptr) *outputs = std::move(report);
  return entry::ToPublic(status);
}

}  // namespace

#define MOEGRAD_CPP_OPERATOR(Op)                                                                         \
  Status Plan##Op(const Op##Args& args, Plan* plan) { return MakePlan(args, plan); }                   \
  Status Op(const Op##Args& args) { return PlanAndRun(args); }                                         \
  Status Infer##Op##Outputs(const Op##Args& args, std::vector<OutputSpec>* outputs) {                  \
    return InferOutputs(args, outputs);                                                                \
  }

MOEGRAD_CPP_OPERATOR(FinalizeRoutingV2Grad)
MOEGRAD_CPP_OPERATOR(TokenPermuteWithRoutingMapGrad)
MOEGRAD_CPP_OPERATOR(FinalizeRoutingV2)
MOEGRAD_CPP_OPERATOR(TokenPermuteWithRoutingMap)
MOEGRAD_CPP_OPERATOR(InitRoutingV2)
MOEGRAD_CPP_OPERATOR(InitRoutingV2Grad)
MOEGRAD_CPP_OPERATOR(TokenUnpermuteWithRoutingMap)
MOEGRAD_CPP_OPERATOR(TokenUnpermuteWithRoutingMapGrad)

}  // namespace moegrad
