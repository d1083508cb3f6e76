// aclnnMoeTokenPermuteWithRoutingMapGrad: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(
    const aclTensor* permutedTokenOutputGrad, const aclTensor* permutedProbsOutputGradOptional,
    const aclTensor* sortedIndices, const aclTensor* routingMapOptional, int64_t numExperts, int64_t tokensNum,
    bool dropAndPad, aclTensor* tokensGradOut, aclTensor* probsGradOutOptional, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::TokenPermuteWithRoutingMapGradArgs>(
      {permutedTokenOutputGrad, permutedProbsOutputGradOptional, sortedIndices, routingMapOptional, tokensGradOut,
       probsGradOutOptional},
      {numExperts, tokensNum, dropAndPad}, workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGrad(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                   aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::TokenPermuteWithRoutingMapGradArgs>(workspace, workspaceSize, executor,
                                                                            stream);
}

}  // extern "C"
