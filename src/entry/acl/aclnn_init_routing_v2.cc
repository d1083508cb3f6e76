// aclnnMoeInitRoutingV2: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_init_routing_v2.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeInitRoutingV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* expertIdx, int64_t activeNum, int64_t expertCapacity, int64_t expertNum,
    int64_t dropPadMode, int64_t expertTokensCountOrCumsumFlag, bool expertTokensBeforeCapacityFlag,
    const aclTensor* expandedXOut, const aclTensor* expandedRowIdxOut,
    const aclTensor* expertTokensCountOrCumsumOutOptional, const aclTensor* expertTokensBeforeCapacityOutOptional,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::InitRoutingV2Args>(
      {x, expertIdx, expandedXOut, expandedRowIdxOut, expertTokensCountOrCumsumOutOptional,
       expertTokensBeforeCapacityOutOptional},
      {activeNum, expertCapacity, expertNum, dropPadMode, expertTokensCountOrCumsumFlag,
       expertTokensBeforeCapacityFlag},
      workspaceSize, executor);
}

aclnnStatus aclnnMoeInitRoutingV2(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                  aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::InitRoutingV2Args>(workspace, workspaceSize, executor, stream);
}

}  // extern "C"
