/* The public C headers as a C99 program sees them: every one compiles as C (each also on its own, in the
 * generated one-line sources next to this file's target), and the C API links and runs without C++. */
#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"

#include <stdio.h>
#include <string.h>

#define R 2
#define H 3

static int Check(int ok, const char *what) {
  if (!ok) printf("FAIL: %s (%s)\n", what, aclGetRecentErrMsg());
  return ok;
}

int main(void) {
  /* Without scales every pair copies its gradY row: gradExpandedX[idx[r]] = gradY[r] (K = 1). */
  float grad_y[R * H] = {1.5f, -2.0f, 0.25f, 4.0f, 8.0f, -0.5f};
  int32_t row_idx[R] = {1, 0};
  float grad_x[R * H];
  const int64_t dims2[2] = {R, H};
  const int64_t dims1[1] = {R};
  aclrtStream stream = NULL;
  aclTensor *gy, *idx, *gx;
  aclOpExecutor *executor = NULL;
  uint64_t workspace_size = 0;
  void *workspace = NULL;
  int ok = 1, r, j;
  /* The argument objects and accessors a C program uses (only those that leave nothing for delete[]). */
  uint32_t device_count = 0;
  float scalar_value = 0.5f;
  const int64_t ints[3] = {4, -5, 6};
  const bool flags[2] = {true, false};
  const aclTensor *members[1];
  aclScalar *scalar;
  aclIntArray *int_array;
  aclBoolArray *bool_array;
  aclTensorList *list;
  uint64_t array_size = 0;
  int64_t view_offset = -1;
  aclDataType dtype = ACL_DT_UNDEFINED;
  aclFormat format = ACL_FORMAT_UNDEFINED;

  memset(grad_x, 0xff, sizeof(grad_x));
  /* C callers may pass any int as an enum: unknown kinds and dtypes are errors, not undefined behaviour. */
  ok &= Check(aclrtMemcpy(grad_x, sizeof(grad_x), grad_y, 8, (aclrtMemcpyKind)4) == ACL_ERROR_INVALID_PARAM,
              "aclrtMemcpy kind 4");
  ok &= Check(aclrtMemcpy(grad_x, sizeof(grad_x), grad_y, 8, (aclrtMemcpyKind)-1) == ACL_ERROR_INVALID_PARAM,
              "aclrtMemcpy kind -1");
  ok &= Check(aclCreateTensor(dims2, 2, (aclDataType)33, NULL, 0, ACL_FORMAT_ND, dims2, 2, grad_y) == NULL,
              "aclCreateTensor dtype 33");
  ok &= Check(aclCreateTensor(dims2, 2, (aclDataType)99, NULL, 0, ACL_FORMAT_ND, dims2, 2, grad_y) == NULL,
              "aclCreateTensor dtype 99");
  ok &= Check(strstr(aclGetRecentErrMsg(), "99") != NULL, "the message names dtype 99");
  ok &= Check(aclCreateScalar(&scalar_value, (aclDataType)99) == NULL, "aclCreateScalar dtype 99");
  ok &= Check(strstr(aclGetRecentErrMsg(), "aclCreateScalar: unknown dataType 99") != NULL,
              "the message names the scalar's dtype 99");
  ok &= Check(aclInit(NULL) == ACL_SUCCESS, "aclInit");
  ok &= Check(aclrtSetDevice(0) == ACL_SUCCESS, "aclrtSetDevice");
  ok &= Check(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream");
  gy = aclCreateTensor(dims2, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims2, 2, grad_y);
  idx = aclCreateTensor(dims1, 1, ACL_INT32, NULL, 0, ACL_FORMAT_ND, dims1, 1, row_idx);
  gx = aclCreateTensor(dims2, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims2, 2, grad_x);
  ok &= Check(gy != NULL && idx != NULL && gx != NULL, "aclCreateTensor");

  ok &= Check(aclrtGetDeviceCount(&device_count) == ACL_SUCCESS && device_count == 1, "aclrtGetDeviceCount");
  scalar = aclCreateScalar(&scalar_value, ACL_FLOAT);
  ok &= Check(scalar != NULL, "aclCreateScalar");
  ok &= Check(aclDestroyScalar(scalar) == ACLNN_SUCCESS, "aclDestroyScalar");
  int_array = aclCreateIntArray(ints, 3);
  ok &= Check(int_array != NULL, "aclCreateIntArray");
  ok &= Check(aclGetIntArraySize(int_array, &array_size) == ACLNN_SUCCESS && array_size == 3, "aclGetIntArraySize");
  ok &= Check(aclDestroyIntArray(int_array) == ACLNN_SUCCESS, "aclDestroyIntArray");
  bool_array = aclCreateBoolArray(flags, 2);
  ok &= Check(bool_array != NULL, "aclCreateBoolArray");
  ok &= Check(aclDestroyBoolArray(bool_array) == ACLNN_SUCCESS, "aclDestroyBoolArray");
  members[0] = aclCreateTensor(dims1, 1, ACL_INT32, NULL, 0, ACL_FORMAT_ND, dims1, 1, row_idx);
  list = aclCreateTensorList(members, 1);
  ok &= Check(members[0] != NULL && list != NULL, "aclCreateTensorList");
  ok &= Check(aclDestroyTensorList(list) == ACLNN_SUCCESS, "aclDestroyTensorList (and its tensor)");
  ok &= Check(aclDestroyScalar(NULL) == ACLNN_SUCCESS && aclDestroyIntArray(NULL) == ACLNN_SUCCESS &&
                  aclDestroyFloatArray(NULL) == ACLNN_SUCCESS && aclDestroyBoolArray(NULL) == ACLNN_SUCCESS &&
                  aclDestroyTensorList(NULL) == ACLNN_SUCCESS,
              "destroying NULL");
  if (gy != NULL) {
    ok &= Check(aclGetViewOffset(gy, &view_offset) == ACLNN_SUCCESS && view_offset == 0, "aclGetViewOffset");
    ok &= Check(aclGetDataType(gy, &dtype) == ACLNN_SUCCESS && dtype == ACL_FLOAT, "aclGetDataType");
    ok &= Check(aclGetFormat(gy, &format) == ACLNN_SUCCESS && format == ACL_FORMAT_ND, "aclGetFormat");
    ok &= Check(aclGetFormat(gy, NULL) == ACLNN_ERR_PARAM_NULLPTR, "aclGetFormat without format");
  }
  if (ok) {
    ok &= Check(aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gy, idx, NULL, NULL, NULL, NULL, 0, 0, 0, 0, gx, NULL,
                                                              &workspace_size, &executor) == ACLNN_SUCCESS,
                "GetWorkspaceSize");
  }
  if (ok && workspace_size > 0) {
    ok &= Check(aclrtMalloc(&workspace, workspace_size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS, "aclrtMalloc");
  }
  if (ok) {
    ok &= Check(aclnnMoeFinalizeRoutingV2Grad(workspace, workspace_size, executor, stream) == ACLNN_SUCCESS,
                "aclnnMoeFinalizeRoutingV2Grad");
    ok &= Check(aclrtSynchronizeStream(stream) == ACL_SUCCESS, "aclrtSynchronizeStream");
  }
  for (r = 0; ok && r < R; ++r) {
    for (j = 0; j < H; ++j) ok &= Check(grad_x[row_idx[r] * H + j] == grad_y[r * H + j], "gradExpandedX value");
  }
  if (workspace != NULL) aclrtFree(workspace);
  if (gy != NULL) aclDestroyTensor(gy);
  if (idx != NULL) aclDestroyTensor(idx);
  if (gx != NULL) aclDestroyTensor(gx);
  aclrtDestroyStream(stream);
  aclrtResetDevice(0);
  aclFinalize();
  printf("RESULT: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
