/* aclnnop/aclnn_moe_token_unpermute_with_routing_map.h: the aclnnMoeTokenUnpermuteWithRoutingMap operator (CANN
 * signature). Semantics: docs/ops/token_unpermute_with_routing_map.md. */
#ifndef ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_H_
#define ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize(
    const aclTensor *permutedTokens, const aclTensor *sortedIndices, const aclTensor *routingMapOptional,
    const aclTensor *probsOptional, bool paddedMode, const aclIntArray *restoreShapeOptional,
    aclTensor *unpermutedTokens, aclTensor *outIndex, aclTensor *permuteTokenId, aclTensor *permuteProbs,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteWithRoutingMap(void *workspace, uint64_t workspaceSize,
                                                                     aclOpExecutor *executor,
                                                                     const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_TOKEN_UNPERMUTE_WITH_ROUTING_MAP_H_ */
