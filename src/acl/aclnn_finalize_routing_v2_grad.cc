// aclnnMoeFinalizeRoutingV2Grad: aclTensor descriptors in, the operator layer's plan out.
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"

#include "src/acl/acl_internal.h"
#include "src/ops/finalize_routing_v2_grad.h"

extern "C" {

aclnnStatus aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(
    const aclTensor* gradY, const aclTensor* expandedRowIdx, const aclTensor* expandedXOptional,
    const aclTensor* scalesOptional, const aclTensor* expertIdxOptional, const aclTensor* biasOptional,
    int64_t dropPadMode, int64_t activeNum, int64_t expertNum, int64_t expertCapacity,
    const aclTensor* gradExpandedXOut, const aclTensor* gradScalesOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  using moegrad::acl::View;
  moegrad::ops::FinalizeRoutingV2GradParams p;
  p.grad_y = View(gradY);
  p.expanded_row_idx = View(expandedRowIdx);
  p.expanded_x = View(expandedXOptional);
  p.scales = View(scalesOptional);
  p.expert_idx = View(expertIdxOptional);
  p.bias = View(biasOptional);
  p.drop_pad_mode = dropPadMode;
  p.active_num = activeNum;
  p.expert_num = expertNum;
  p.expert_capacity = expertCapacity;
  p.grad_expanded_x = View(gradExpandedXOut);
  p.grad_scales = View(gradScalesOut);
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  const moegrad::Status status = moegrad::ops::PlanFinalizeRoutingV2Grad(p, &plan);
  return moegrad::acl::FinishPhaseOne("aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize", status, std::move(plan),
                                      workspaceSize, executor);
}

aclnnStatus aclnnMoeFinalizeRoutingV2Grad(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                          aclrtStream /*stream*/) {
  return moegrad::acl::RunPhaseTwo("aclnnMoeFinalizeRoutingV2Grad", workspace, workspaceSize, executor);
}

}  // extern "C"
