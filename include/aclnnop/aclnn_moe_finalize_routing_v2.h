/* aclnnop/aclnn_moe_finalize_routing_v2.h: the aclnnMoeFinalizeRoutingV2 operator (CANN signature). Semantics: docs/ops/. */
#ifndef ACLNN_MOE_FINALIZE_ROUTING_V2_H_
#define ACLNN_MOE_FINALIZE_ROUTING_V2_H_

#include <stdbool.h>
#include <stdint.h>

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Phase one: validates every shape, dtype and attribute, plans the work, returns the workspace size. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    const aclTensor *expandedX, const aclTensor *expandedRowIdx, const aclTensor *x1Optional,
    const aclTensor *x2Optional, const aclTensor *biasOptional, const aclTensor *scalesOptional,
    const aclTensor *expertIdxOptional, int64_t dropPadMode, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);

/* Phase two: validates index data, then computes. Consumes the executor unless it is repeatable. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_MOE_FINALIZE_ROUTING_V2_H_ */
