// aclnnMoeTokenPermuteWithRoutingMapGrad: aclTensor descriptors in, the operator layer's plan out.
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"

#include "src/acl/acl_internal.h"
#include "src/ops/token_permute_with_routing_map_grad.h"

extern "C" {

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(
    const aclTensor* permutedTokenOutputGrad, const aclTensor* permutedProbsOutputGradOptional,
    const aclTensor* sortedIndices, const aclTensor* routingMapOptional, int64_t numExperts, int64_t tokensNum,
    bool dropAndPad, aclTensor* tokensGradOut, aclTensor* probsGradOutOptional, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  using moegrad::acl::View;
  moegrad::ops::TokenPermuteWithRoutingMapGradParams p;
  p.permuted_token_output_grad = View(permutedTokenOutputGrad);
  p.permuted_probs_output_grad = View(permutedProbsOutputGradOptional);
  p.sorted_indices = View(sortedIndices);
  p.routing_map = View(routingMapOptional);
  p.num_experts = numExperts;
  p.tokens_num = tokensNum;
  p.drop_and_pad = dropAndPad;
  p.tokens_grad = View(tokensGradOut);
  p.probs_grad = View(probsGradOutOptional);
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  const moegrad::Status status = moegrad::ops::PlanTokenPermuteWithRoutingMapGrad(p, &plan);
  return moegrad::acl::FinishPhaseOne("aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize", status,
                                      std::move(plan), workspaceSize, executor);
}

aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGrad(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                   aclrtStream /*stream*/) {
  return moegrad::acl::RunPhaseTwo("aclnnMoeTokenPermuteWithRoutingMapGrad", workspace, workspaceSize, executor);
}

}  // extern "C"
