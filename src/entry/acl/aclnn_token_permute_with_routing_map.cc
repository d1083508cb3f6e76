// aclnnMoeTokenPermuteWithRoutingMap: the CANN signature, its parameters in the order of its OpInfo.
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"

#include "src/entry/acl/acl_internal.h"

extern "C" {

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* routingMap, const aclTensor* probsOptional, int64_t numOutTokens,
    bool dropAndPad, aclTensor* permuteTokensOut, aclTensor* permuteProbsOutOptional, aclTensor* sortedIndicesOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return moegrad::acl::PhaseOne<moegrad::TokenPermuteWithRoutingMapArgs>(
      {tokens, routingMap, probsOptional, permuteTokensOut, permuteProbsOutOptional, sortedIndicesOut},
      {numOutTokens, dropAndPad}, workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenPermuteWithRoutingMap(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                               aclrtStream stream) {
  return moegrad::acl::PhaseTwo<moegrad::TokenPermuteWithRoutingMapArgs>(workspace, workspaceSize, executor, stream);
}

}  // extern "C"
