/**
 * aclnnMoeTokenUnpermuteWithRoutingMapGrad sample, written the way a CANN sample for an Ascend NPU is written:
 * init, device, stream, device buffers filled by aclrtMemcpy, aclTensor descriptors, the two-phase call,
 * synchronize, copy back, print, release (the common steps in client_util.h, next to this file). Built against
 * an installed moegrad with nothing but
 *   g++ -std=c++17 token_unpermute_with_routing_map_grad_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Each case's expected values come from plain loops over the operator's formulas (in double), not from the
 * library; the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <cmath>
#include <cstdint>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"
#include "client_util.h"

// T = 3 tokens, E = 3 experts, H = 2; dropless K = 2, drop-and-pad capacity C = 2: N = 6 pairs either way.
constexpr int64_t T = 3, E = 3, H = 2, N = 6;

struct Case {
  const char* name;
  bool dropAndPad;
  std::vector<int8_t> routingMap;     // (T, E)
  std::vector<int32_t> outIndex;      // (N) as the forward writes it
  std::vector<int32_t> permuteTokenId;  // (N)
};

// Pair i: row outIndex[i], token i / K (dropless) or permuteTokenId[i] (drop-and-pad), expert the (i % K)-th
// routed one of the token (dropless) or row / C; v = probs[t][e].
//   permutedTokensGrad[row] += v * g[t];  probsGrad[t][e] += permutedTokens[row] . g[t]
void ComputeExpected(const Case& c, const std::vector<float>& g, const std::vector<float>& x,
                     const std::vector<float>& probs, std::vector<double>& xGrad, std::vector<double>& probsGrad) {
  xGrad.assign(N * H, 0.0);
  probsGrad.assign(T * E, 0.0);
  const int64_t K = N / T, C = N / E;
  for (int64_t i = 0; i < N; i++) {
    const int64_t row = c.outIndex[i];
    const int64_t t = c.dropAndPad ? c.permuteTokenId[i] : i / K;
    int64_t e = row / C;
    if (!c.dropAndPad) {
      for (int64_t j = 0, seen = 0; j < E; j++) {
        if (c.routingMap[t * E + j] != 0 && seen++ == i % K) e = j;
      }
    }
    double d = 0;
    for (int64_t j = 0; j < H; j++) {
      xGrad[row * H + j] += static_cast<double>(probs[t * E + e]) * g[t * H + j];
      d += static_cast<double>(x[row * H + j]) * g[t * H + j];
    }
    probsGrad[t * E + e] += d;
  }
}

bool Close(float got, double want) { return std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want)); }

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  std::vector<float> gHost = {1, 0, 0, 1, 1, 1};
  std::vector<float> xHost = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> probsHost = {0.5f, 0.0f, 0.25f, 1.0f, 2.0f, 0.0f, 0.0f, 4.0f, 0.5f};
  std::vector<int64_t> gShape = {T, H}, idxShape = {N}, mapShape = {T, E}, xShape = {N, H};
  std::vector<float> xGradHost(N * H, -7.0f), probsGradHost(T * E, -7.0f);

  void *gAddr = nullptr, *outIndexAddr = nullptr, *tokenIdAddr = nullptr, *mapAddr = nullptr, *xAddr = nullptr;
  void *probsAddr = nullptr, *xGradAddr = nullptr, *probsGradAddr = nullptr;
  aclTensor *g = nullptr, *outIndex = nullptr, *tokenId = nullptr, *map = nullptr, *x = nullptr;
  aclTensor *probs = nullptr, *xGrad = nullptr, *probsGrad = nullptr;
  auto ret = CreateAclTensor(gHost, gShape, &gAddr, aclDataType::ACL_FLOAT, &g);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.outIndex, idxShape, &outIndexAddr, aclDataType::ACL_INT32, &outIndex);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.permuteTokenId, idxShape, &tokenIdAddr, aclDataType::ACL_INT32, &tokenId);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(c.routingMap, mapShape, &mapAddr, aclDataType::ACL_INT8, &map);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(xHost, xShape, &xAddr, aclDataType::ACL_FLOAT, &x);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(probsHost, mapShape, &probsAddr, aclDataType::ACL_FLOAT, &probs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(xGradHost, xShape, &xGradAddr, aclDataType::ACL_FLOAT, &xGrad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(probsGradHost, mapShape, &probsGradAddr, aclDataType::ACL_FLOAT, &probsGrad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize(g, outIndex, tokenId, map, x, probs, c.dropAndPad,
                                                                 nullptr, xGrad, probsGrad, &workspaceSize,
                                                                 &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeTokenUnpermuteWithRoutingMapGrad", aclnnMoeTokenUnpermuteWithRoutingMapGrad,
                             workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(xGradHost, xGradAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(probsGradHost, probsGradAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  std::vector<double> wantX, wantProbs;
  ComputeExpected(c, gHost, xHost, probsHost, wantX, wantProbs);
  LOG_PRINT("%s: dropAndPad %d, workspace %lu bytes\n", c.name, c.dropAndPad ? 1 : 0,
            static_cast<unsigned long>(workspaceSize));
  for (int64_t i = 0; i < N * H; i++) {
    const bool ok = Close(xGradHost[i], wantX[i]);
    *passed = *passed && ok;
    LOG_PRINT("  permutedTokensGradOut[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), xGradHost[i], wantX[i],
              ok ? "" : "  MISMATCH");
  }
  for (int64_t i = 0; i < T * E; i++) {
    const bool ok = Close(probsGradHost[i], wantProbs[i]);
    *passed = *passed && ok;
    LOG_PRINT("  probsGradOutOptional[%ld] is: %f (expected %f)%s\n", static_cast<long>(i), probsGradHost[i],
              wantProbs[i], ok ? "" : "  MISMATCH");
  }

  Release({g, outIndex, tokenId, map, x, probs, xGrad, probsGrad},
          {gAddr, outIndexAddr, tokenIdAddr, mapAddr, xAddr, probsAddr, xGradAddr, probsGradAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"dropless, K = 2", false, {1, 0, 1, 1, 1, 0, 0, 1, 1}, {0, 4, 1, 2, 3, 5}, {0, 0, 1, 1, 2, 2}},
      {"drop-and-pad, C = 2", true, {1, 1, 1, 1, 0, 0, 1, 0, 0}, {0, 2, 4, 1, 3, 5}, {0, 0, 0, 1, 1, 1}},
  };
  return RunAllCases(cases, RunCase);
}
