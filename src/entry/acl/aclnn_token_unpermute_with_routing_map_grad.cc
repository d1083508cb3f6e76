// aclnnMoeTokenUnpermuteWithRoutingMapGrad: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize(
    const aclTensor* unpermutedTokensGrad, const aclTensor* outIndex, const aclTensor* permuteTokenId,
    const aclTensor* routingMapOptional, const aclTensor* permutedTokensOptional, const aclTensor* probsOptional,
    bool dropAndPad, const aclIntArray* restoreShapeOptional, const aclTensor* permutedTokensGradOut,
    const aclTensor* probsGradOutOptional, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::TokenUnpermuteWithRoutingMapGradArgs>(
      {unpermutedTokensGrad, outIndex, permuteTokenId, routingMapOptional, permutedTokensOptional, probsOptional,
       permutedTokensGradOut, probsGradOutOptional},
      {dropAndPad}, {restoreShapeOptional}, workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGrad(void* workspace, uint64_t workspaceSize,
                                                     aclOpExecutor* executor, aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::TokenUnpermuteWithRoutingMapGradArgs>(workspace, workspaceSize, executor,
                                                                              stream);
}

}  // extern "C"
