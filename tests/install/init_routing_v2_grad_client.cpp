/**
 * aclnnMoeInitRoutingV2Grad sample, written the way a CANN sample for an Ascend NPU is written (the attributes
 * also held in aclScalar objects, created and destroyed as the CANN sample does): init, device, stream, device
 * buffers filled by aclrtMemcpy, aclTensor descriptors, the two-phase call, synchronize, copy back, print,
 * release (the common steps in client_util.h, next to this file). Built against an installed moegrad with
 * nothing but
 *   g++ -std=c++17 init_routing_v2_grad_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Each case's expected values come from plain loops over the operator's formula (in double), not from the
 * library; the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <cmath>
#include <cstdint>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "client_util.h"

// N = 2 tokens, K = 2 pairs per token, H = 2; drop/pad with E = 2 experts, capacity C = 2.
constexpr int64_t N = 2, K = 2, H = 2, E = 2, C = 2;

struct Case {
  const char* name;
  int32_t dropPadMode;
  int32_t activeNum;
  std::vector<int32_t> expandedRowIdx;
};

int64_t RowsOf(const Case& c) {
  if (c.dropPadMode == 1) return E * C;
  return (c.activeNum > 0 && c.activeNum < N * K) ? c.activeNum : N * K;
}

// out[n] = sum over k of gradExpandedX[expandedRowIdx[n*K + k]], leaving out -1 (mode 1) and rows >= the rows
// of gradExpandedX (mode 0 with activeNum).
std::vector<double> ComputeExpected(const Case& c, const std::vector<float>& grad) {
  std::vector<double> out(N * H, 0.0);
  for (int64_t i = 0; i < N * K; i++) {
    const int32_t v = c.expandedRowIdx[i];
    if (v < 0 || v >= RowsOf(c)) continue;
    for (int64_t j = 0; j < H; j++) out[(i / K) * H + j] += grad[v * H + j];
  }
  return out;
}

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  const int64_t rows = RowsOf(c);
  std::vector<int64_t> gradShape = {rows, H}, rowIdxShape = {N * K}, outShape = {N, H};
  if (c.dropPadMode == 1) {
    gradShape = {E, C, H};
  }
  std::vector<float> gradHost = {0.1f, 0.1f, 0.3f, 0.3f, 0.2f, 0.2f, 0.4f, 0.4f};
  gradHost.resize(rows * H);
  std::vector<float> outHost(N * H, -7.0f);
  int32_t topKValue = K;
  int32_t dropPadModeValue = c.dropPadMode;
  int32_t activeNumValue = c.activeNum;

  void *gradAddr = nullptr, *rowIdxAddr = nullptr, *outAddr = nullptr;
  aclTensor *grad = nullptr, *rowIdx = nullptr, *out = nullptr;
  auto ret = CreateAclTensor(gradHost, gradShape, &gradAddr, aclDataType::ACL_FLOAT, &grad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.expandedRowIdx, rowIdxShape, &rowIdxAddr, aclDataType::ACL_INT32, &rowIdx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(outHost, outShape, &outAddr, aclDataType::ACL_FLOAT, &out);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  aclScalar* topK = aclCreateScalar(&topKValue, aclDataType::ACL_INT32);
  CHECK_RET(topK != nullptr, LOG_PRINT("aclCreateScalar failed: %s\n", aclGetRecentErrMsg()); return -1);
  aclScalar* dropPadMode = aclCreateScalar(&dropPadModeValue, aclDataType::ACL_INT32);
  CHECK_RET(dropPadMode != nullptr, LOG_PRINT("aclCreateScalar failed: %s\n", aclGetRecentErrMsg()); return -1);
  aclScalar* activeNum = aclCreateScalar(&activeNumValue, aclDataType::ACL_INT32);
  CHECK_RET(activeNum != nullptr, LOG_PRINT("aclCreateScalar failed: %s\n", aclGetRecentErrMsg()); return -1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeInitRoutingV2GradGetWorkspaceSize(grad, rowIdx, topKValue, dropPadModeValue, activeNumValue, out,
                                                  &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeInitRoutingV2GradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeInitRoutingV2Grad", aclnnMoeInitRoutingV2Grad, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(outHost, outAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  const std::vector<double> want = ComputeExpected(c, gradHost);
  LOG_PRINT("%s: dropPadMode %d, activeNum %d, workspace %lu bytes\n", c.name, dropPadModeValue, activeNumValue,
            static_cast<unsigned long>(workspaceSize));
  for (int64_t i = 0; i < N * H; i++) {
    const bool ok = std::fabs(outHost[i] - want[i]) <= 1e-6 * (1.0 + std::fabs(want[i]));
    *passed = *passed && ok;
    LOG_PRINT("  out[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), outHost[i], want[i],
              ok ? "" : "  MISMATCH");
  }

  aclDestroyScalar(topK);
  aclDestroyScalar(dropPadMode);
  aclDestroyScalar(activeNum);
  Release({grad, rowIdx, out}, {gradAddr, rowIdxAddr, outAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"dropless", 0, 0, {2, 0, 1, 3}},
      {"dropless, activeNum 3 (the pair of row 3 skipped)", 0, 3, {2, 0, 1, 3}},
      {"drop/pad (pair 3 dropped)", 1, 0, {2, 0, 1, -1}},
  };
  return RunAllCases(cases, RunCase);
}
