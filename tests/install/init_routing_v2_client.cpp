/**
 * aclnnMoeInitRoutingV2 sample, written the way a CANN sample for an Ascend NPU is written: init, device,
 * stream, device buffers filled by aclrtMemcpy, aclTensor descriptors, the two-phase call, synchronize, copy
 * back, print, release (the common steps in client_util.h, next to this file). Built against an installed
 * moegrad with nothing but
 *   g++ -std=c++17 init_routing_v2_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Each case's expected values come from a plain stable sort of the pairs by expert here, not from the library;
 * the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "client_util.h"

// N = 3 tokens, K = 2 experts per token, H = 2, E = 3 experts; the token-major pairs p = n*K + k.
constexpr int64_t N = 3, K = 2, H = 2, E = 3;

struct Case {
  const char* name;
  int64_t activeNum;
  int64_t expertCapacity;
  int64_t dropPadMode;
  int64_t countOrCumsumFlag;     // mode 0: 0 none, 1 cumsum, 2 count
  bool beforeCapacityFlag;       // mode 1
};

struct Expected {
  std::vector<float> expandedX;
  std::vector<int32_t> expandedRowIdx;
  std::vector<int32_t> counts;  // the count output the case writes (empty if none)
};

Expected ComputeExpected(const Case& c, const std::vector<float>& x, const std::vector<int32_t>& expertIdx) {
  std::vector<int64_t> order(N * K);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return expertIdx[a] < expertIdx[b]; });
  std::vector<int32_t> count(E, 0);
  for (int32_t e : expertIdx) count[e]++;
  Expected want;
  want.expandedRowIdx.assign(N * K, 0);
  if (c.dropPadMode == 0) {
    const int64_t rows = (c.activeNum > 0 && c.activeNum < N * K) ? c.activeNum : N * K;
    for (int64_t i = 0; i < N * K; i++) want.expandedRowIdx[order[i]] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < rows; i++) {
      for (int64_t j = 0; j < H; j++) want.expandedX.push_back(x[(order[i] / K) * H + j]);
    }
    if (c.countOrCumsumFlag == 2) want.counts = count;
    if (c.countOrCumsumFlag == 1) std::partial_sum(count.begin(), count.end(), std::back_inserter(want.counts));
    return want;
  }
  const int64_t C = c.expertCapacity;
  want.expandedX.assign(E * C * H, 0.0f);
  std::vector<int64_t> rank(E, 0);
  for (int64_t i = 0; i < N * K; i++) {
    const int64_t p = order[i], e = expertIdx[p], r = rank[e]++;
    want.expandedRowIdx[p] = r < C ? static_cast<int32_t>(e * C + r) : -1;
    for (int64_t j = 0; r < C && j < H; j++) want.expandedX[(e * C + r) * H + j] = x[(p / K) * H + j];
  }
  if (c.beforeCapacityFlag) want.counts = count;
  return want;
}

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  std::vector<float> xHost = {0.1f, 0.2f, 1.1f, 1.2f, 2.1f, 2.2f};
  std::vector<int32_t> expertIdxHost = {2, 0, 0, 1, 2, 2};
  const Expected want = ComputeExpected(c, xHost, expertIdxHost);
  const int64_t rows = static_cast<int64_t>(want.expandedX.size()) / H;
  std::vector<int64_t> xShape = {N, H}, expertIdxShape = {N, K}, rowIdxShape = {N * K}, countShape = {E};
  std::vector<int64_t> expandedXShape = {rows, H};
  if (c.dropPadMode == 1) {
    expandedXShape = {E, c.expertCapacity, H};
  }
  std::vector<float> expandedXHost(rows * H, -7.0f);
  std::vector<int32_t> rowIdxHost(N * K, -7), countHost(E, -7);

  void *xAddr = nullptr, *expertIdxAddr = nullptr, *expandedXAddr = nullptr, *rowIdxAddr = nullptr;
  void* countAddr = nullptr;
  aclTensor *x = nullptr, *expertIdx = nullptr, *expandedX = nullptr, *rowIdx = nullptr, *count = nullptr;
  auto ret = CreateAclTensor(xHost, xShape, &xAddr, aclDataType::ACL_FLOAT, &x);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(expertIdxHost, expertIdxShape, &expertIdxAddr, aclDataType::ACL_INT32, &expertIdx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(expandedXHost, expandedXShape, &expandedXAddr, aclDataType::ACL_FLOAT, &expandedX);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(rowIdxHost, rowIdxShape, &rowIdxAddr, aclDataType::ACL_INT32, &rowIdx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(countHost, countShape, &countAddr, aclDataType::ACL_INT32, &count);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // The count output a mode writes: expertTokensCountOrCumsumOut in mode 0, expertTokensBeforeCapacityOut in 1.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeInitRoutingV2GetWorkspaceSize(x, expertIdx, c.activeNum, c.expertCapacity, E, c.dropPadMode,
                                              c.countOrCumsumFlag, c.beforeCapacityFlag, expandedX, rowIdx,
                                              c.dropPadMode == 0 ? count : nullptr,
                                              c.dropPadMode == 1 ? count : nullptr, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeInitRoutingV2GetWorkspaceSize failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeInitRoutingV2", aclnnMoeInitRoutingV2, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  ret = CopyToHost(expandedXHost, expandedXAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(rowIdxHost, rowIdxAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(countHost, countAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  LOG_PRINT("%s: dropPadMode %ld, activeNum %ld, expertCapacity %ld, workspace %lu bytes\n", c.name,
            static_cast<long>(c.dropPadMode), static_cast<long>(c.activeNum), static_cast<long>(c.expertCapacity),
            static_cast<unsigned long>(workspaceSize));
  for (int64_t i = 0; i < rows * H; i++) {
    const bool ok = expandedXHost[i] == want.expandedX[i];
    *passed = *passed && ok;
    LOG_PRINT("  expandedXOut[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), expandedXHost[i],
              want.expandedX[i], ok ? "" : "  MISMATCH");
  }
  for (int64_t i = 0; i < N * K; i++) {
    const bool ok = rowIdxHost[i] == want.expandedRowIdx[i];
    *passed = *passed && ok;
    LOG_PRINT("  expandedRowIdxOut[%ld] is: %d (expected %d)%s\n", static_cast<long>(i), rowIdxHost[i],
              want.expandedRowIdx[i], ok ? "" : "  MISMATCH");
  }
  for (int64_t e = 0; e < E; e++) {  // an unwritten count output keeps its -7s
    const int32_t expected = want.counts.empty() ? -7 : want.counts[e];
    const bool ok = countHost[e] == expected;
    *passed = *passed && ok;
    LOG_PRINT("  %s[%ld] is: %d (expected %d)%s\n",
              c.dropPadMode == 0 ? "expertTokensCountOrCumsumOut" : "expertTokensBeforeCapacityOut",
              static_cast<long>(e), countHost[e], expected, ok ? "" : "  MISMATCH");
  }

  Release({x, expertIdx, expandedX, rowIdx, count}, {xAddr, expertIdxAddr, expandedXAddr, rowIdxAddr, countAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"dropless, cumsum", 0, 0, 0, 1, false},
      {"dropless, activeNum 4, count", 4, 0, 0, 2, false},
      {"dropless, no counts", 0, 0, 0, 0, false},
      {"drop/pad, capacity 2 (expert 2's third pair dropped), counts before capacity", 0, 2, 1, 0, true},
  };
  return RunAllCases(cases, RunCase);
}
