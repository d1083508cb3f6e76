/* aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h: the aclnnMoeTokenUnpermuteWithRoutingMapGrad operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_GRAD_H_
#define ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_GRAD_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize(
    const aclTensor *unpermutedTokensGrad, const aclTensor *outIndex, const aclTensor *permuteTokenId,
    const aclTensor *routingMapOptional, const aclTensor *permutedTokensOptional, const aclTensor *probsOptional,
    bool dropAndPad, const aclIntArray *restoreShapeOptional, const aclTensor *permutedTokensGradOut,
    const aclTensor *probsGradOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGrad(void *workspace, uint64_t workspaceSize,
                                                                         aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_GRAD_H_ */
