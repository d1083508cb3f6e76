#include "src/ops/plan.h"

namespace moegrad::internal {

core::Status PlanBase::Run(void* workspace, uint64_t workspace_bytes, core::Stream stream) const {
  if (workspace == nullptr && workspace_bytes != 0) {
    return core::MakeStatus(core::StatusCode::kNullptr, "%s: workspace is null but workspaceSize is %llu", op_name_,
                            static_cast<unsigned long long>(workspace_bytes));
  }
  if (workspace_bytes < workspace_size_) {
    return core::MakeStatus(core::StatusCode::kInvalid,
                            "%s: workspaceSize %llu is smaller than the %llu bytes the first phase reported",
                            op_name_, static_cast<unsigned long long>(workspace_bytes),
                            static_cast<unsigned long long>(workspace_size_));
  }
  return Execute(workspace, stream);
}

}  // namespace moegrad::internal
