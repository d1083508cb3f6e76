// aclnnMoeInitRoutingV2Grad: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeInitRoutingV2GradGetWorkspaceSize(const aclTensor* gradExpandedX, const aclTensor* expandedRowIdx,
                                                      int64_t topK, int64_t dropPadMode, int64_t activeNum,
                                                      const aclTensor* out, uint64_t* workspaceSize,
                                                      aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::InitRoutingV2GradArgs>({gradExpandedX, expandedRowIdx, out},
                                                                {topK, dropPadMode, activeNum}, workspaceSize,
                                                                executor);
}

aclnnStatus aclnnMoeInitRoutingV2Grad(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                      aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::InitRoutingV2GradArgs>(workspace, workspaceSize, executor, stream);
}

}  // extern "C"
