/* aclnn/acl_meta.h: tensors, executors and status codes of the two-phase aclnn API (CANN-compatible). */
#ifndef ACLNN_ACL_META_H_
#define ACLNN_ACL_META_H_

#include <stddef.h>
#include <stdint.h>

#ifndef ACL_FUNC_VISIBILITY
#if defined(_WIN32)
#define ACL_FUNC_VISIBILITY
#else
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus;

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000
/* No kernel for the call: its tensors are on a device this build has no backend for. */
#define ACLNN_ERR_INNER_FIND_KERNEL_ERROR 561003

#ifndef ACL_DATA_TYPE_DEFINED_
#define ACL_DATA_TYPE_DEFINED_
typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_BF16 = 27
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2
} aclFormat;
#endif

typedef struct aclTensor aclTensor;
typedef struct aclOpExecutor aclOpExecutor;
typedef void *aclrtStream;

/* Element (i0, i1, ...) of the view lives at tensorData + offset + sum_d i_d * stride[d] elements. A null
 * stride means contiguous row-major. Returns NULL (and sets aclGetRecentErrMsg) when the view leaves its
 * storage, a dimension or stride is negative, or the dtype is unknown. */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                                               aclDataType dataType, const int64_t *stride, int64_t offset,
                                               aclFormat format, const int64_t *storageDims,
                                               uint64_t storageDimsNum, void *tensorData);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);

/* A repeatable executor survives its second phase and runs any number of times until destroyed. */
ACL_FUNC_VISIBILITY aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_ACL_META_H_ */
