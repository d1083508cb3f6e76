// aclnnMoeFinalizeRoutingV2: aclTensor descriptors in, the operator layer's plan out.
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"

#include "src/acl/acl_internal.h"
#include "src/ops/finalize_routing_v2.h"

extern "C" {

aclnnStatus aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    const aclTensor* expandedX, const aclTensor* expandedRowIdx, const aclTensor* x1Optional,
    const aclTensor* x2Optional, const aclTensor* biasOptional, const aclTensor* scalesOptional,
    const aclTensor* expertIdxOptional, int64_t dropPadMode, const aclTensor* out, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  using moegrad::acl::View;
  moegrad::ops::FinalizeRoutingV2Params p;
  p.expanded_x = View(expandedX);
  p.expanded_row_idx = View(expandedRowIdx);
  p.x1 = View(x1Optional);
  p.x2 = View(x2Optional);
  p.bias = View(biasOptional);
  p.scales = View(scalesOptional);
  p.expert_idx = View(expertIdxOptional);
  p.drop_pad_mode = dropPadMode;
  p.out = View(out);
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  const moegrad::Status status = moegrad::ops::PlanFinalizeRoutingV2(p, &plan);
  return moegrad::acl::FinishPhaseOne("aclnnMoeFinalizeRoutingV2GetWorkspaceSize", status, std::move(plan),
                                      workspaceSize, executor);
}

aclnnStatus aclnnMoeFinalizeRoutingV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                      aclrtStream /*stream*/) {
  return moegrad::acl::RunPhaseTwo("aclnnMoeFinalizeRoutingV2", workspace, workspaceSize, executor);
}

}  // extern "C"
