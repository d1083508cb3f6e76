#include <utility>

#include "src/entry/acl/acl_internal.h"

namespace moegrad::acl {
namespace {

thread_local std::string t_recent_error;

}  // namespace

void SetRecentError(const std::string& message) { t_recent_error = message; }
const char* RecentError() { return t_recent_error.c_str(); }

aclnnStatus FinishPhaseOne(const char* op, const core::Status& status, ops::PlanPtr plan, uint64_t* workspace_size,
                           aclOpExecutor** executor) {
  if (executor != nullptr) *executor = nullptr;
  if (workspace_size == nullptr || executor == nullptr) {
    SetRecentError(std::string("aclnn") + op + "GetWorkspaceSize: " +
                   (workspace_size == nullptr ? "workspaceSize" : "executor") + " is required but is null");
    return ACLNN_ERR_PARAM_NULLPTR;
  }
  if (!status.ok()) {
    SetRecentError(status.message());
    return static_cast<aclnnStatus>(status.code());
  }
  auto* ex = new (std::nothrow) aclOpExecutor;
  if (ex == nullptr) {
    SetRecentError(std::string("aclnn") + op + "GetWorkspaceSize: cannot allocate the executor");
    return ACLNN_ERR_RUNTIME_ERROR;
  }
  ex->plan = std::move(plan);
  *workspace_size = ex->plan->workspace_size();
  *executor = ex;
  return ACLNN_SUCCESS;
}

aclnnStatus RunPhaseTwo(const char* op, void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                        aclrtStream stream) {
  if (executor == nullptr) {
    SetRecentError(std::string("aclnn") + op + ": executor is required but is null");
    return ACLNN_ERR_PARAM_NULLPTR;
  }
  const core::Status status = executor->plan->Run(workspace, workspace_size, stream);
  if (!executor->repeatable) delete executor;
  if (!status.ok()) {
    SetRecentError(status.message());
    return static_cast<aclnnStatus>(status.code());
  }
  return ACLNN_SUCCESS;
}

}  // namespace moegrad::acl

extern "C" {

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  if (executor == nullptr) {
    moegrad::acl::SetRecentError("aclSetAclOpExecutorRepeatable: executor is required but is null");
    return ACLNN_ERR_PARAM_NULLPTR;
  }
  executor->repeatable = true;
  return ACLNN_SUCCESS;
}

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  delete executor;  // NULL: a no-op, as every destroy function
  return ACLNN_SUCCESS;
}

const char* aclGetRecentErrMsg(void) { return moegrad::acl::RecentError(); }

}  // extern "C"
