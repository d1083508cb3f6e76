/* aclnnop/aclnn_moe_init_routing_v2_grad.h: the aclnnMoeInitRoutingV2Grad operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_INIT_ROUTING_V2_GRAD_H_
#define ACLNN_MOE_INIT_ROUTING_V2_GRAD_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeInitRoutingV2GradGetWorkspaceSize(
    const aclTensor *gradExpandedX, const aclTensor *expandedRowIdx, int64_t topK, int64_t dropPadMode,
    int64_t activeNum, const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeInitRoutingV2Grad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_INIT_ROUTING_V2_GRAD_H_ */
