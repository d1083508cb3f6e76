/* aclnnop/aclnn_moe_finalize_routing_v2_grad.h: the aclnnMoeFinalizeRoutingV2Grad operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_FINALIZE_ROUTING_V2_GRAD_H_
#define ACLNN_MOE_FINALIZE_ROUTING_V2_GRAD_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(
    const aclTensor *gradY, const aclTensor *expandedRowIdx, const aclTensor *expandedXOptional,
    const aclTensor *scalesOptional, const aclTensor *expertIdxOptional, const aclTensor *biasOptional,
    int64_t dropPadMode, int64_t activeNum, int64_t expertNum, int64_t expertCapacity,
    const aclTensor *gradExpandedXOut, const aclTensor *gradScalesOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2Grad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_FINALIZE_ROUTING_V2_GRAD_H_ */
