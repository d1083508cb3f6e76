// Fuzzes aclnnMoeTokenUnpermuteWithRoutingMapGrad: shapes, layouts, dtypes (probs and their gradient in their
// own), the mode, missing and aliased tensors, index data and routing maps. A successful call must match the
// reference bit for bit (both sum in ascending pair order and take d_i as the canonical dot product); a failed
// one must have written nothing.
#include <algorithm>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const bool dp = in.Rare(40);
  const int64_t T = in.Range(0, 6), E = in.Range(1, 6), H = Hidden(in);
  const int64_t K = in.Range(0, E), C = in.Range(0, 2 * T + 1);
  const int64_t N = dp ? E * C : T * K;
  const bool probs = !in.Rare(30);
  const bool extras = probs || in.Rare(30);
  const DType dt = in.FloatDType();
  const DType wt = in.FloatDType();  // the probs' group, independent of the tokens'
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  OpFuzz<moegrad::TokenUnpermuteWithRoutingMapGradArgs> f(in);
  f.PutFloats("unpermutedTokensGrad", MakeTensor(in, in.Or(dt), Shape(in, {T, H})));
  f.Put("outIndex", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  f.Put("permuteTokenId", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  if (extras) {
    f.Put("routingMapOptional", MakeTensor(in, map_dt, Shape(in, {T, E})));
    f.PutFloats("permutedTokensOptional", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  }
  if (probs) f.PutFloats("probsOptional", MakeTensor(in, in.Or(wt), Shape(in, {T, E})));
  f.Put("permutedTokensGradOut", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  if (probs || in.Rare(20)) f.Put("probsGradOutOptional", MakeTensor(in, in.Or(wt), Shape(in, {T, E})));
  f.SetAttr("dropAndPad", dp);
  f.Vary();
  // outIndex: a permutation of the N rows (as the forward's), or any row; permuteTokenId: pair i's token as the
  // forward orders them (dropless i / K), or any token, or (dropless, MindSpeed) outIndex itself.
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(N, 0)));
  for (int64_t i = 0; i < N; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), in.rng());
  const bool any = in.Rare(30);
  FillIndices(in, f.Get("outIndex"), [&](int64_t i) {
    if (!any && i < N) return perm[static_cast<size_t>(i)];
    return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(std::max<int64_t>(N, 1)));
  });
  const bool mindspeed = !dp && in.Rare(4);
  FillIndices(in, f.Get("permuteTokenId"), [&](int64_t i) {
    if (mindspeed && i < N) return perm[static_cast<size_t>(i)];
    if (!dp && K > 0) return i / K;
    return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(std::max<int64_t>(T, 1)));
  });
  // Routing map: K routed experts per token (dropless with probs needs exactly K per row), any non-zero byte.
  Tensor* map = f.Get("routingMapOptional");
  if (map != nullptr && map->rank() == 2) {
    FillRoutingMap(in, map, E, K, in.Rare(15), [&](bool routed) {
      const int64_t v = !routed ? 0 : map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 255) - 127;
      return routed && v == 0 ? 1 : v;
    });
  }

  if (!f.Run()) return 0;
  f.ExpectReference();
  return 0;
}
