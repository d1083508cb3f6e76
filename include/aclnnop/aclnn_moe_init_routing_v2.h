/* aclnnop/aclnn_moe_init_routing_v2.h: the aclnnMoeInitRoutingV2 operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_INIT_ROUTING_V2_H_
#define ACLNN_MOE_INIT_ROUTING_V2_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeInitRoutingV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *expertIdx, int64_t activeNum, int64_t expertCapacity,
    int64_t expertNum, int64_t dropPadMode, int64_t expertTokensCountOrCumsumFlag,
    bool expertTokensBeforeCapacityFlag, const aclTensor *expandedXOut, const aclTensor *expandedRowIdxOut,
    const aclTensor *expertTokensCountOrCumsumOutOptional, const aclTensor *expertTokensBeforeCapacityOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeInitRoutingV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_INIT_ROUTING_V2_H_ */
