// Shared by the C++ API entry points: optional views to the operator layer's null-means-absent pointers.
#pragma once

#include <memory>
#include <optional>

#include "moegrad/plan.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

namespace moegrad::cpp {

inline const TensorView* Opt(const std::optional<TensorView>& t) { return t ? &*t : nullptr; }

// Phase one through `planner`, then wraps the result in a Plan.
template <typename Params, typename Planner>
Status MakePlan(const Params& params, Planner planner, Plan* plan) {
  std::unique_ptr<internal::PlanBase> impl;
  Status status = planner(params, &impl);
  if (status.ok() && plan != nullptr) *plan = Plan(std::move(impl));
  return status;
}

// Phase one, then phase two with a workspace allocated here.
template <typename Params, typename Planner>
Status PlanAndRun(const Params& params, Planner planner) {
  Plan plan;
  Status status = MakePlan(params, planner, &plan);
  return status.ok() ? plan.Run() : status;
}

}  // namespace moegrad::cpp
