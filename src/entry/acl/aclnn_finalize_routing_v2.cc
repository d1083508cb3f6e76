// aclnnMoeFinalizeRoutingV2: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    const aclTensor* expandedX, const aclTensor* expandedRowIdx, const aclTensor* x1Optional,
    const aclTensor* x2Optional, const aclTensor* biasOptional, const aclTensor* scalesOptional,
    const aclTensor* expertIdxOptional, int64_t dropPadMode, const aclTensor* out, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::FinalizeRoutingV2Args>(
      {expandedX, expandedRowIdx, x1Optional, x2Optional, biasOptional, scalesOptional, expertIdxOptional, out},
      {dropPadMode}, workspaceSize, executor);
}

aclnnStatus aclnnMoeFinalizeRoutingV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                      aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::FinalizeRoutingV2Args>(workspace, workspaceSize, executor, stream);
}

}  // extern "C"
