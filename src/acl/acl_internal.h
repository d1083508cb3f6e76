// What the aclnn entry points share: the aclTensor and aclOpExecutor objects, the per-thread error
// message, and the two generic halves of every two-phase call.
#pragma once

#include <memory>
#include <string>

#include "acl/acl.h"
#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/plan_base.h"

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

// Reports phase one: on success hands the plan to a new executor and its workspace size to the caller;
// on failure records the message and leaves *executor null.
aclnnStatus FinishPhaseOne(const char* api, const Status& status, std::unique_ptr<internal::PlanBase> plan,
                           uint64_t* workspace_size, aclOpExecutor** executor);
// Runs phase two and frees a one-shot executor.
aclnnStatus RunPhaseTwo(const char* api, void* workspace, uint64_t workspace_size, aclOpExecutor* executor);

}  // namespace moegrad::acl
