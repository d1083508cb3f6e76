/**
 * aclnnMoeTokenPermuteWithRoutingMapGrad sample at DeepSeek-V3 layer shapes, written the way a CANN sample for
 * an Ascend NPU is written: init, device, stream, device buffers filled by aclrtMemcpy, aclTensor descriptors,
 * the two-phase call, synchronize, copy back, print, release (the common steps in client_util.h, next to this
 * file). Built against an installed moegrad with nothing but
 *   g++ -std=c++17 token_permute_with_routing_map_grad_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 * Case 1: 4096 tokens, hidden 7168, 256 experts, capacity 16, drop-and-pad, probs, INT8 routing map, BF16.
 * Case 2: the same layer dropless (top-8) on 256 tokens. Expected values come from plain loops over the
 * operator's formulas (in double), not from the library; the last line is "RESULT: PASS" or "RESULT: FAIL".
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "client_util.h"

// bfloat16 on the host: the upper half of a float, rounded to nearest even.
float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A small deterministic generator, so the sample needs no <random> state to reproduce.
struct Lcg {
  uint64_t s;
  uint32_t Next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  float Uniform() { return static_cast<float>(Next() % 2001) / 1000.0f - 1.0f; }  // [-1, 1]
};

constexpr int64_t H = 7168, E = 256, TOPK = 8;

struct Case {
  const char* name;
  int64_t tokens;
  bool dropAndPad;
  int64_t capacity;  // drop-and-pad only
};

// Each token routes to TOPK distinct experts. The forward (MoeTokenPermuteWithRoutingMap) then defines
// sortedIndices: drop-and-pad: expert e's C rows are its routed tokens in ascending id, then its unrouted ones;
// dropless: slot t*K + k (the k-th routed expert of t, ascending) holds the row of (t, e) in expert-major order.
void MakeRouting(const Case& c, Lcg& rng, std::vector<int8_t>& map, std::vector<int32_t>& sortedIndices) {
  const int64_t T = c.tokens;
  map.assign(T * E, 0);
  for (int64_t t = 0; t < T; t++) {
    for (int64_t k = 0; k < TOPK;) {
      const int64_t e = rng.Next() % E;
      if (map[t * E + e] == 0) {
        map[t * E + e] = 1;
        k++;
      }
    }
  }
  if (c.dropAndPad) {
    sortedIndices.assign(E * c.capacity, 0);
    for (int64_t e = 0; e < E; e++) {
      int64_t n = 0;
      for (int pass = 1; pass >= 0; pass--) {
        for (int64_t t = 0; t < T && n < c.capacity; t++) {
          if (map[t * E + e] == pass) sortedIndices[e * c.capacity + n++] = static_cast<int32_t>(t);
        }
      }
    }
    return;
  }
  std::vector<int32_t> rowOf(T * E, -1);
  int32_t row = 0;
  for (int64_t e = 0; e < E; e++) {
    for (int64_t t = 0; t < T; t++) {
      if (map[t * E + e]) rowOf[t * E + e] = row++;
    }
  }
  sortedIndices.clear();
  for (int64_t t = 0; t < T; t++) {
    for (int64_t e = 0; e < E; e++) {
      if (map[t * E + e]) sortedIndices.push_back(rowOf[t * E + e]);
    }
  }
}

bool Close(float got, double want) { return std::fabs(got - want) <= 1e-5 + std::fabs(want) / 128.0; }

int RunCase(const Case& c, aclrtStream stream, bool* passed) {
  const int64_t T = c.tokens;
  const int64_t N = c.dropAndPad ? E * c.capacity : T * TOPK;
  Lcg rng{static_cast<uint64_t>(T * 31 + (c.dropAndPad ? 7 : 3))};
  std::vector<int8_t> mapHost;
  std::vector<int32_t> indicesHost;
  MakeRouting(c, rng, mapHost, indicesHost);
  std::vector<uint16_t> gradHost(N * H), probsHost(N);
  for (auto& v : gradHost) v = FloatToBf16(rng.Uniform());
  for (auto& v : probsHost) v = FloatToBf16(rng.Uniform());
  std::vector<uint16_t> tokensGradHost(T * H, 0xffff), probsGradHost(T * E, 0xffff);  // NaN until written

  std::vector<int64_t> gradShape = {N, H}, probsShape = {N}, indicesShape = {N}, mapShape = {T, E};
  std::vector<int64_t> tokensGradShape = {T, H}, probsGradShape = {T, E};
  void *gradAddr = nullptr, *probsAddr = nullptr, *indicesAddr = nullptr, *mapAddr = nullptr;
  void *tokensGradAddr = nullptr, *probsGradAddr = nullptr;
  aclTensor *grad = nullptr, *probs = nullptr, *indices = nullptr, *routingMap = nullptr;
  aclTensor *tokensGrad = nullptr, *probsGrad = nullptr;
  auto ret = CreateAclTensor(gradHost, gradShape, &gradAddr, aclDataType::ACL_BF16, &grad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(probsHost, probsShape, &probsAddr, aclDataType::ACL_BF16, &probs);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(indicesHost, indicesShape, &indicesAddr, aclDataType::ACL_INT32, &indices);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(mapHost, mapShape, &mapAddr, aclDataType::ACL_INT8, &routingMap);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(tokensGradHost, tokensGradShape, &tokensGradAddr, aclDataType::ACL_BF16, &tokensGrad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(probsGradHost, probsGradShape, &probsGradAddr, aclDataType::ACL_BF16, &probsGrad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(grad, probs, indices, routingMap, E, T, c.dropAndPad,
                                                               tokensGrad, probsGrad, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = LaunchAndSynchronize("aclnnMoeTokenPermuteWithRoutingMapGrad", aclnnMoeTokenPermuteWithRoutingMapGrad,
                             workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(tokensGradHost, tokensGradAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CopyToHost(probsGradHost, probsGradAddr);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // Expected, from the formulas. The rows each token reads: drop-and-pad, every p with sortedIndices[p] == t;
  // dropless, sortedIndices[t*K + k] for k < K.
  std::vector<std::vector<int64_t>> rowsOf(T);
  std::vector<double> wantProbs(T * E, 0.0);
  if (c.dropAndPad) {
    for (int64_t p = 0; p < N; p++) {
      const int64_t t = indicesHost[p];
      rowsOf[t].push_back(p);
      wantProbs[t * E + p / c.capacity] += Bf16ToFloat(probsHost[p]);
    }
  } else {
    for (int64_t i = 0; i < N; i++) rowsOf[i / TOPK].push_back(indicesHost[i]);
    int64_t next = 0;  // probsGrad.T.masked_scatter_(routingMap.T, permutedProbsOutputGrad)
    for (int64_t e = 0; e < E; e++) {
      for (int64_t t = 0; t < T; t++) {
        if (mapHost[t * E + e]) wantProbs[t * E + e] = Bf16ToFloat(probsHost[next++]);
      }
    }
  }
  int64_t bad = 0, routedTokens = 0;
  for (int64_t t = 0; t < T; t++) {
    routedTokens += rowsOf[t].empty() ? 0 : 1;
    for (int64_t j = 0; j < H; j++) {
      double want = 0.0;
      for (int64_t p : rowsOf[t]) want += Bf16ToFloat(gradHost[p * H + j]);
      const float got = Bf16ToFloat(tokensGradHost[t * H + j]);
      if (!Close(got, want)) {
        if (bad++ < 5) LOG_PRINT("  MISMATCH tokensGrad[%ld][%ld] is: %f (expected %f)\n", (long)t, (long)j, got, want);
      }
    }
  }
  for (int64_t i = 0; i < T * E; i++) {
    const float got = Bf16ToFloat(probsGradHost[i]);
    if (!Close(got, wantProbs[i])) {
      if (bad++ < 10) LOG_PRINT("  MISMATCH probsGrad[%ld] is: %f (expected %f)\n", (long)i, got, wantProbs[i]);
    }
  }

  LOG_PRINT("%s: T %ld, H %ld, E %ld, N %ld rows, %ld tokens with a row, workspace %lu bytes\n", c.name, (long)T,
            (long)H, (long)E, (long)N, (long)routedTokens, (unsigned long)workspaceSize);
  const int64_t shown[] = {0, 1, T / 2, T - 1};
  for (int64_t t : shown) {
    double want = 0.0;
    for (int64_t p : rowsOf[t]) want += Bf16ToFloat(gradHost[p * H + 5]);
    LOG_PRINT("  tokensGrad[%ld][5] is: %f (expected %f, %zu rows)\n", (long)t, Bf16ToFloat(tokensGradHost[t * H + 5]),
              want, rowsOf[t].size());
  }
  // A token that has a row, at its first expert with a probability gradient and at the last expert.
  const int64_t t0 = c.dropAndPad ? indicesHost[0] : 0;
  int64_t e0 = 0;
  while (e0 < E - 1 && wantProbs[t0 * E + e0] == 0.0) e0++;
  for (int64_t e : {e0, E - 1}) {
    LOG_PRINT("  probsGrad[%ld][%ld] is: %f (expected %f)\n", (long)t0, (long)e, Bf16ToFloat(probsGradHost[t0 * E + e]),
              wantProbs[t0 * E + e]);
  }
  LOG_PRINT("  %ld mismatches\n", (long)bad);
  *passed = *passed && bad == 0;

  Release({grad, probs, indices, routingMap, tokensGrad, probsGrad},
          {gradAddr, probsAddr, indicesAddr, mapAddr, tokensGradAddr, probsGradAddr});
  return 0;
}

int main() {
  const Case cases[] = {
      {"DeepSeek-V3 drop-and-pad (capacity 16)", 4096, true, 16},
      {"DeepSeek-V3 dropless (top-8)", 256, false, 0},
  };
  return RunAllCases(cases, RunCase);
}
