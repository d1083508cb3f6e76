// aclnnMoeTokenPermuteWithRoutingMap: aclTensor descriptors in, the operator layer's plan out.
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"

#include "src/acl/acl_internal.h"
#include "src/ops/token_permute_with_routing_map.h"

extern "C" {

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* routingMap, const aclTensor* probsOptional, int64_t numOutTokens,
    bool dropAndPad, aclTensor* permuteTokensOut, aclTensor* permuteProbsOutOptional, aclTensor* sortedIndicesOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  using moegrad::acl::View;
  moegrad::ops::TokenPermuteWithRoutingMapParams p;
  p.tokens = View(tokens);
  p.routing_map = View(routingMap);
  p.probs = View(probsOptional);
  p.num_out_tokens = numOutTokens;
  p.drop_and_pad = dropAndPad;
  p.permute_tokens = View(permuteTokensOut);
  p.permute_probs = View(permuteProbsOutOptional);
  p.sorted_indices = View(sortedIndicesOut);
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  const moegrad::Status status = moegrad::ops::PlanTokenPermuteWithRoutingMap(p, &plan);
  return moegrad::acl::FinishPhaseOne("aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize", status,
                                      std::move(plan), workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenPermuteWithRoutingMap(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                               aclrtStream /*stream*/) {
  return moegrad::acl::RunPhaseTwo("aclnnMoeTokenPermuteWithRoutingMap", workspace, workspaceSize, executor);
}

}  // extern "C"
