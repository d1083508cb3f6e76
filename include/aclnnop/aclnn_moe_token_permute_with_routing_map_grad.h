/* aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h: the aclnnMoeTokenPermuteWithRoutingMapGrad operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_TOKEN_PERMUTE_WITH_ROUTING_MAP_GRAD_H_
#define ACLNN_MOE_TOKEN_PERMUTE_WITH_ROUTING_MAP_GRAD_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(
    const aclTensor *permutedTokenOutputGrad, const aclTensor *permutedProbsOutputGradOptional,
    const aclTensor *sortedIndices, const aclTensor *routingMapOptional, int64_t numExperts, int64_t tokensNum,
    bool dropAndPad, aclTensor *tokensGradOut, aclTensor *probsGradOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermuteWithRoutingMapGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_TOKEN_PERMUTE_WITH_ROUTING_MAP_GRAD_H_ */
