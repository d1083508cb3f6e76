/**
 * aclnnMoeTokenUnpermuteWithRoutingMap sample, written the way a CANN sample for an Ascend NPU is written
 * (restoreShape an aclIntArray, created and destroyed as the CANN sample does): init, device, stream, device
 * buffers filled by aclrtMemcpy, aclTensor descriptors, the two-phase call, synchronize, copy back, print,
 * release (the common steps in client_util.h, next to this file). Built against an installed moegrad with
 * nothing but
 *   g++ -std=c++17 token_unpermute_with_routing_map_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Each case's expected values come from plain loops over the operator's formula (in double), not from the
 * library; the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <cmath>
#include <cstdint>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map.h"
#include "client_util.h"

// T = 3 tokens, E = 3 experts, H = 2; dropless K = 2, pad capacity C = 2: N = 6 permuted rows either way.
constexpr int64_t T = 3, E = 3, H = 2, N = 6;

struct Case {
  const char* name;
  bool paddedMode;
  std::vector<int8_t> routingMap;   // (T, E)
  std::vector<int32_t> sortedIndices;  // (N)
};

// unpermutedTokens[t] = sum over contributions q of token t of w(q) * permutedTokens[row(q)]: dropless token
// q / K, row sortedIndices[q], weight probs[t][its (q % K)-th routed expert]; pad token sortedIndices[q], row q,
// weight probs[token][q / C].
std::vector<double> ComputeExpected(const Case& c, const std::vector<float>& x, const std::vector<float>& probs) {
  std::vector<double> out(T * H, 0.0);
  for (int64_t q = 0; q < N; q++) {
    int64_t t = 0, row = 0, e = 0;
    if (c.paddedMode) {
      t = c.sortedIndices[q];
      row = q;
      e = q / (N / E);
    } else {
      const int64_t K = N / T;
      t = q / K;
      row = c.sortedIndices[q];
      for (int64_t j = 0, seen = 0; j < E; j++) {
        if (c.routingMap[t * E + j] != 0 && seen++ == q % K) e = j;
      }
    }
    for (int64_t j = 0; j < H; j++) out[t * H + j] += static_cast<double>(probs[t * E + e]) * x[row * H + j];
  }
  return out;
}

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  std::vector<float> xHost = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> probsHost = {0.5f, 0.0f, 0.25f, 1.0f, 2.0f, 0.0f, 0.0f, 4.0f, 0.5f};
  std::vector<int64_t> xShape = {N, H}, idxShape = {N}, mapShape = {T, E}, outShape = {T, H};
  std::vector<float> outHost(T * H, -7.0f), permuteProbsHost(N, -7.0f);
  std::vector<int32_t> outIndexHost(N, -7), tokenIdHost(N, -7);
  std::vector<int64_t> restoreShapeValue = {T, H};

  void *xAddr = nullptr, *idxAddr = nullptr, *mapAddr = nullptr, *probsAddr = nullptr, *outAddr = nullptr;
  void *outIndexAddr = nullptr, *tokenIdAddr = nullptr, *permuteProbsAddr = nullptr;
  aclTensor *x = nullptr, *idx = nullptr, *map = nullptr, *probs = nullptr, *out = nullptr;
  aclTensor *outIndex = nullptr, *tokenId = nullptr, *permuteProbs = nullptr;
  auto ret = CreateAclTensor(xHost, xShape, &xAddr, aclDataType::ACL_FLOAT, &x);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.sortedIndices, idxShape, &idxAddr, aclDataType::ACL_INT32, &idx);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.routingMap, mapShape, &mapAddr, aclDataType::ACL_INT8, &map);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(probsHost, mapShape, &probsAddr, aclDataType::ACL_FLOAT, &probs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(outHost, outShape, &outAddr, aclDataType::ACL_FLOAT, &out);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(outIndexHost, idxShape, &outIndexAddr, aclDataType::ACL_INT32, &outIndex);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(tokenIdHost, idxShape, &tokenIdAddr, aclDataType::ACL_INT32, &tokenId);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(permuteProbsHost, idxShape, &permuteProbsAddr, aclDataType::ACL_FLOAT, &permuteProbs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  aclIntArray* restoreShape = aclCreateIntArray(restoreShapeValue.data(), restoreShapeValue.size());
  CHECK_RET(restoreShape != nullptr, LOG_PRINT("aclCreateIntArray failed: %s\n", aclGetRecentErrMsg()); return -1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize(x, idx, map, probs, c.paddedMode, restoreShape, out,
                                                             outIndex, tokenId, permuteProbs, &workspaceSize,
                                                             &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeTokenUnpermuteWithRoutingMap", aclnnMoeTokenUnpermuteWithRoutingMap,
                             workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(outHost, outAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  const std::vector<double> want = ComputeExpected(c, xHost, probsHost);
  LOG_PRINT("%s: paddedMode %d, workspace %lu bytes\n", c.name, c.paddedMode ? 1 : 0,
            static_cast<unsigned long>(workspaceSize));
  for (int64_t i = 0; i < T * H; i++) {
    const bool ok = std::fabs(outHost[i] - want[i]) <= 1e-5 * (1.0 + std::fabs(want[i]));
    *passed = *passed && ok;
    LOG_PRINT("  unpermutedTokens[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), outHost[i], want[i],
              ok ? "" : "  MISMATCH");
  }

  aclDestroyIntArray(restoreShape);
  Release({x, idx, map, probs, out, outIndex, tokenId, permuteProbs},
          {xAddr, idxAddr, mapAddr, probsAddr, outAddr, outIndexAddr, tokenIdAddr, permuteProbsAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"dropless, K = 2", false, {1, 0, 1, 1, 1, 0, 0, 1, 1}, {0, 4, 1, 2, 3, 5}},
      {"pad, C = 2 (expert 0 drops token 2; token 1 pads experts 1 and 2)", true, {1, 1, 1, 1, 0, 0, 1, 0, 0},
       {0, 1, 0, 1, 0, 1}},
  };
  return RunAllCases(cases, RunCase);
}
