// aclnnMoeTokenUnpermuteWithRoutingMap: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* sortedIndices, const aclTensor* routingMapOptional,
    const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional,
    aclTensor* unpermutedTokens, aclTensor* outIndex, aclTensor* permuteTokenId, aclTensor* permuteProbs,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::TokenUnpermuteWithRoutingMapArgs>(
      {permutedTokens, sortedIndices, routingMapOptional, probsOptional, unpermutedTokens, outIndex, permuteTokenId,
       permuteProbs},
      {paddedMode}, {restoreShapeOptional}, workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMap(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                 const aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::TokenUnpermuteWithRoutingMapArgs>(workspace, workspaceSize, executor,
                                                                           stream);
}

}  // extern "C"
