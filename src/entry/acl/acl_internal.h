// What the aclnn entry points share: the aclTensor and aclOpExecutor objects, the per-thread error message, and
// the two generic halves of every two-phase call, driven by the operator's description (moegrad/op_info.hpp).
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <string>

#include "acl/acl.h"
#include "moegrad/op_info.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/types.h"
#include "src/ops/ops.h"

struct aclTensor {
  moegrad::TensorView view;
  int64_t storage_elements = 0;  // elements of the allocation the view lives in
};

struct aclOpExecutor {
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  bool repeatable = false;
};

namespace moegrad::acl {

inline const TensorView* View(const aclTensor* t) { return t ? &t->view : nullptr; }

void SetRecentError(const std::string& message);
const char* RecentError();

// Reports phase one of aclnn<op>GetWorkspaceSize: on success hands the plan to a new executor and its workspace
// size to the caller; on failure records the message and leaves *executor null.
aclnnStatus FinishPhaseOne(const char* op, const core::Status& status, ops::PlanPtr plan, uint64_t* workspace_size,
                           aclOpExecutor** executor);
// Runs phase two of aclnn<op> and frees a one-shot executor.
aclnnStatus RunPhaseTwo(const char* op, void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                        aclrtStream stream);

// Phase one of the operator whose arguments are `Args`: `tensors` and `attrs` are the aclnn parameters in the
// order of OpInfo<Args>::kTensors and kAttrs. A required tensor that is null is NULLPTR; the rest is the
// operator layer's.
template <typename Args, size_t kTensors, size_t kAttrs>
aclnnStatus PhaseOne(const aclTensor* const (&tensors)[kTensors], const int64_t (&attrs)[kAttrs],
                     uint64_t* workspace_size, aclOpExecutor** executor) {
  using Info = OpInfo<Args>;
  static_assert(kTensors == std::size(Info::kTensors) && kAttrs == std::size(Info::kAttrs),
                "the aclnn parameters are the operator's OpInfo");
  Args args;
  core::Status status;
  for (size_t i = 0; i < kTensors; ++i) {
    const aclTensor* t = tensors[i];
    const TensorArg<Args>& arg = Info::kTensors[i];
    if (t == nullptr && !arg.is_optional() && status.ok()) {
      status = core::Status(core::StatusCode::kNullptr, std::string(Info::kName) + ": " + arg.name +
                                                            " is required but is null");
    }
    arg.Set(args, View(t));
  }
  for (size_t i = 0; i < kAttrs; ++i) Info::kAttrs[i].Set(args, attrs[i]);
  ops::PlanPtr plan;
  if (status.ok()) status = ops::Plan(args, &plan);
  return FinishPhaseOne(Info::kName, status, std::move(plan), workspace_size, executor);
}

// Phase two of the operator whose arguments are `Args`.
template <typename Args>
aclnnStatus PhaseTwo(void* workspace, uint64_t workspace_size, aclOpExecutor* executor, aclrtStream stream) {
  return RunPhaseTwo(OpInfo<Args>::kName, workspace, workspace_size, executor, stream);
}

}  // namespace moegrad::acl
