/**
 * aclnnMoeFinalizeRoutingV2Grad sample, written the way a CANN sample for an Ascend NPU is written:
 * init, device, stream, device buffers filled by aclrtMemcpy, aclTensor descriptors, the two-phase call,
 * synchronize, copy back, print, release (the common steps in client_util.h, next to this file). Built against
 * an installed moegrad with nothing but
 *   g++ -std=c++17 finalize_routing_v2_grad_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Each case's expected values come from plain loops over the operator's formulas (in double), not from
 * the library; the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <cmath>
#include <cstdint>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "client_util.h"

// R = 2 tokens, K = 2 experts per token, H = 4, E = 3 experts (with bias), capacity C = 2 in mode 1.
constexpr int64_t R = 2, K = 2, H = 4, E = 3, C = 2;

struct Case {
  const char* name;
  int64_t dropPadMode;
  int64_t activeNum;
  std::vector<int32_t> expandedRowIdx;
};

int64_t RowsOf(const Case& c) {
  if (c.dropPadMode == 1) return E * C;
  return (c.activeNum > 0 && c.activeNum < R * K) ? c.activeNum : R * K;
}

bool Dropped(const Case& c, int32_t v) { return c.dropPadMode == 1 ? v == -1 : v >= RowsOf(c); }

// gradExpandedX[v] += gradY[i/K] * scales[i] over the kept pairs (other rows 0);
// gradScales[i] = sum_j (x_i[j] + bias[expertIdx[i]][j]) * gradY[i/K][j], x_i = 0 for a dropped pair.
void ComputeExpected(const Case& c, const std::vector<float>& gradY, const std::vector<float>& expandedX,
                     const std::vector<float>& scales, const std::vector<int32_t>& expertIdx,
                     const std::vector<float>& bias, std::vector<double>& gradX, std::vector<double>& gradScales) {
  gradX.assign(RowsOf(c) * H, 0.0);
  gradScales.assign(R * K, 0.0);
  for (int64_t i = 0; i < R * K; i++) {
    const int32_t v = c.expandedRowIdx[i];
    const int64_t r = i / K;
    const int64_t e = expertIdx[i];
    for (int64_t j = 0; j < H; j++) {
      const double g = gradY[r * H + j];
      const double x = Dropped(c, v) ? 0.0 : expandedX[v * H + j];
      if (!Dropped(c, v)) gradX[v * H + j] += g * scales[i];
      gradScales[i] += (x + bias[e * H + j]) * g;
    }
  }
}

bool Close(float got, double want) { return std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want)); }

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  const int64_t rows = RowsOf(c);
  std::vector<int64_t> gradYShape = {R, H};
  std::vector<int64_t> rowIdxShape = {R * K};
  std::vector<int64_t> expandedXShape = {rows, H};
  if (c.dropPadMode == 1) {
    expandedXShape = {E, C, H};
  }
  std::vector<int64_t> scalesShape = {R, K};
  std::vector<int64_t> biasShape = {E, H};

  std::vector<float> gradYHost = {0.5f, -1.0f, 1.5f, 2.0f, -0.25f, 0.75f, 1.0f, -2.0f};
  std::vector<float> expandedXHost(rows * H);
  for (int64_t k = 0; k < rows * H; k++) expandedXHost[k] = 0.1f * static_cast<float>(k % 9) - 0.3f;
  std::vector<float> scalesHost = {0.6f, 0.4f, 0.7f, 0.3f};
  std::vector<int32_t> expertIdxHost = {0, 2, 1, 2};
  std::vector<float> biasHost = {0.1f, 0.2f, 0.3f, 0.4f, -0.5f, -0.6f, -0.7f, -0.8f, 0.9f, 1.0f, 1.1f, 1.2f};
  std::vector<float> gradXHost(rows * H, 0.0f);
  std::vector<float> gradScalesHost(R * K, 0.0f);

  void *gradYAddr = nullptr, *rowIdxAddr = nullptr, *expandedXAddr = nullptr, *scalesAddr = nullptr;
  void *expertIdxAddr = nullptr, *biasAddr = nullptr, *gradXAddr = nullptr, *gradScalesAddr = nullptr;
  aclTensor *gradY = nullptr, *rowIdx = nullptr, *expandedX = nullptr, *scales = nullptr;
  aclTensor *expertIdx = nullptr, *bias = nullptr, *gradX = nullptr, *gradScales = nullptr;

  auto ret = CreateAclTensor(gradYHost, gradYShape, &gradYAddr, aclDataType::ACL_FLOAT, &gradY);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.expandedRowIdx, rowIdxShape, &rowIdxAddr, aclDataType::ACL_INT32, &rowIdx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(expandedXHost, expandedXShape, &expandedXAddr, aclDataType::ACL_FLOAT, &expandedX);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(scalesHost, scalesShape, &scalesAddr, aclDataType::ACL_FLOAT, &scales);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(expertIdxHost, scalesShape, &expertIdxAddr, aclDataType::ACL_INT32, &expertIdx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(biasHost, biasShape, &biasAddr, aclDataType::ACL_FLOAT, &bias);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradXHost, expandedXShape, &gradXAddr, aclDataType::ACL_FLOAT, &gradX);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradScalesHost, scalesShape, &gradScalesAddr, aclDataType::ACL_FLOAT, &gradScales);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  // Fill the outputs with NaN bytes: rows the operator must zero cannot pass by accident.
  ret = aclrtMemset(gradXAddr, rows * H * sizeof(float), 0xff, rows * H * sizeof(float));
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemset failed. ERROR: %d\n", ret); return ret);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gradY, rowIdx, expandedX, scales, expertIdx, bias,
                                                      c.dropPadMode, c.activeNum, E, C, gradX, gradScales,
                                                      &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeFinalizeRoutingV2Grad", aclnnMoeFinalizeRoutingV2Grad, workspaceSize, executor,
                             stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  ret = CopyToHost(gradXHost, gradXAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(gradScalesHost, gradScalesAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  std::vector<double> wantX, wantScales;
  ComputeExpected(c, gradYHost, expandedXHost, scalesHost, expertIdxHost, biasHost, wantX, wantScales);
  LOG_PRINT("%s: dropPadMode %ld, activeNum %ld, workspace %lu bytes\n", c.name, static_cast<long>(c.dropPadMode),
            static_cast<long>(c.activeNum), static_cast<unsigned long>(workspaceSize));
  for (int64_t i = 0; i < rows * H; i++) {
    const bool ok = Close(gradXHost[i], wantX[i]);
    *passed = *passed && ok;
    LOG_PRINT("  gradExpandedX[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), gradXHost[i], wantX[i],
              ok ? "" : "  MISMATCH");
  }
  for (int64_t i = 0; i < R * K; i++) {
    const bool ok = Close(gradScalesHost[i], wantScales[i]);
    *passed = *passed && ok;
    LOG_PRINT("  gradScales[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), gradScalesHost[i], wantScales[i],
              ok ? "" : "  MISMATCH");
  }

  Release({gradY, rowIdx, expandedX, scales, expertIdx, bias, gradX, gradScales},
          {gradYAddr, rowIdxAddr, expandedXAddr, scalesAddr, expertIdxAddr, biasAddr, gradXAddr, gradScalesAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"dropless", 0, 0, {2, 0, 3, 1}},
      {"drop/pad (pair 1 dropped)", 1, 0, {4, -1, 0, 3}},
      {"dropless, activeNum 3 (pair 2 dropped)", 0, 3, {2, 0, 3, 1}},
  };
  return RunAllCases(cases, RunCase);
}
