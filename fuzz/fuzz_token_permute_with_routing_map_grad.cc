// Fuzzes aclnnMoeTokenPermuteWithRoutingMapGrad: shapes, layouts, dtypes (the probs' gradients in their own),
// attributes, missing and aliased tensors, index data and routing maps. A successful call must match the reference bit
// for bit (sums run in ascending order of the contributing position in both); a failed one must have written nothing.
#include <algorithm>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const bool dp = in.Rare(40);
  const int64_t T = in.Range(1, 6), E = in.Range(1, 6), H = Hidden(in);
  const int64_t K = in.Range(0, std::min<int64_t>(E, 3)), C = in.Range(0, T);
  const int64_t N = dp ? E * C : T * K;
  const int64_t experts = in.Around(E, -1, 8), tokens = in.Around(T, -1, 8);
  const bool probs = !in.Rare(30);
  const bool has_map = (probs && !dp) || in.Rare(20);
  const DType dt = in.FloatDType();
  const DType wt = in.FloatDType();  // the probs' group, independent of the tokens'
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  OpFuzz<moegrad::TokenPermuteWithRoutingMapGradArgs> f(in);
  f.PutFloats("permutedTokenOutputGrad", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  if (probs) f.PutFloats("permutedProbsOutputGrad", MakeTensor(in, in.Or(wt), Shape(in, {N})));
  f.Put("sortedIndices", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  if (has_map) f.Put("routingMap", MakeTensor(in, map_dt, Shape(in, {T, E})));
  f.Put("tokensGradOut", MakeTensor(in, in.Or(dt), Shape(in, {T, H})));
  if (probs || in.Rare(20)) f.Put("probsGradOut", MakeTensor(in, in.Or(wt), Shape(in, {T, E})));
  f.SetAttr("numExperts", experts);
  f.SetAttr("tokensNum", tokens);
  f.SetAttr("dropAndPad", dp);
  f.Vary();
  // Dropless: a permutation of the N rows (the forward's), else any token id; drop-and-pad: token ids.
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(N, 0)));
  for (int64_t i = 0; i < N; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), in.rng());
  const bool any = in.Rare(30);
  const int64_t span = dp ? T : std::max<int64_t>(N, 1);
  FillIndices(in, f.Get("sortedIndices"), [&](int64_t i) {
    if (!dp && !any && i < N) return perm[static_cast<size_t>(i)];
    return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(span));
  });
  // Routing map: K routed experts per token (dropless needs N routed entries in all), any non-zero byte.
  Tensor* map = f.Get("routingMap");
  if (map != nullptr) {
    const bool random_map = in.Rare(15);
    if (map->rank() == 2) {
      FillRoutingMap(in, map, E, K, random_map, [&](bool routed) {
        const int64_t v = !routed ? 0 : map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 255) - 127;
        return routed && v == 0 ? 1 : v;
      });
    }
  }

  if (!f.Run()) return 0;
  // The reference allocates tokensNum x numExperts floats even when neither is used for a shape.
  if (experts > (1 << 16) || tokens > (1 << 16)) return 0;
  f.ExpectReference();
  return 0;
}
