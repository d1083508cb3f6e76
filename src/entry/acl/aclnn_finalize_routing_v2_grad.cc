// aclnnMoeFinalizeRoutingV2Grad: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(
    const aclTensor* gradY, const aclTensor* expandedRowIdx, const aclTensor* expandedXOptional,
    const aclTensor* scalesOptional, const aclTensor* expertIdxOptional, const aclTensor* biasOptional,
    int64_t dropPadMode, int64_t activeNum, int64_t expertNum, int64_t expertCapacity,
    const aclTensor* gradExpandedXOut, const aclTensor* gradScalesOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::FinalizeRoutingV2GradArgs>(
      {gradY, expandedRowIdx, expandedXOptional, scalesOptional, expertIdxOptional, biasOptional, gradExpandedXOut,
       gradScalesOut},
      {dropPadMode, activeNum, expertNum, expertCapacity}, workspaceSize, executor);
}

aclnnStatus aclnnMoeFinalizeRoutingV2Grad(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                          aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::FinalizeRoutingV2GradArgs>(workspace, workspaceSize, executor, stream);
}

}  // extern "C"
