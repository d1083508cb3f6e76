// Fuzzes aclnnMoeTokenUnpermuteWithRoutingMap: shapes, layouts, dtypes (the probs' in their own group), both
// modes, missing and aliased tensors, restoreShape (absent, right or wrong), index data and routing maps. A
// successful call must match the reference bit for bit (sums run in ascending contribution order in both); a
// failed one must have written nothing.
#include <algorithm>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const bool pad = in.Rare(40);
  const int64_t T = in.Range(0, 6), E = in.Range(1, 6), H = Hidden(in);
  const int64_t K = in.Range(0, std::min<int64_t>(E, 3)), C = in.Range(0, std::max<int64_t>(T, 1));
  const int64_t N = pad ? E * C : T * K;
  const bool probs = !in.Rare(30);
  const bool has_map = (probs && !pad) || in.Rare(25);
  const DType dt = in.FloatDType();
  const DType wt = in.FloatDType();  // the probs' group, independent of the tokens'
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  OpFuzz<moegrad::TokenUnpermuteWithRoutingMapArgs> f(in);
  f.PutFloats("permutedTokens", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  f.Put("sortedIndices", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  if (has_map) f.Put("routingMapOptional", MakeTensor(in, map_dt, Shape(in, {T, E})));
  if (probs) f.PutFloats("probsOptional", MakeTensor(in, in.Or(wt), Shape(in, {T, E})));
  f.Put("unpermutedTokens", MakeTensor(in, in.Or(dt), Shape(in, {T, H})));
  f.Put("outIndex", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  f.Put("permuteTokenId", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  if (probs || in.Rare(20)) f.Put("permuteProbs", MakeTensor(in, in.Or(wt), Shape(in, {N})));
  f.SetAttr("paddedMode", pad);
  // restoreShape: required without probs, optional with; now and then wrong or absent where required.
  if (!probs || in.Rare(30)) {
    std::vector<int64_t> shape = {in.Around(T, -1, 8), in.Around(H, -1, 40)};
    if (in.Rare(5)) shape.resize(static_cast<size_t>(in.Range(0, 3)), 1);
    f.SetIntArray(0, in.Rare(5) ? std::nullopt : std::optional<std::vector<int64_t>>(shape));
  }
  f.Vary();
  // Dropless: a permutation of the N rows (the permute's), else any row; pad: token ids.
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(N, 0)));
  for (int64_t i = 0; i < N; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), in.rng());
  const bool any = in.Rare(30);
  const int64_t span = pad ? std::max<int64_t>(T, 1) : std::max<int64_t>(N, 1);
  FillIndices(in, f.Get("sortedIndices"), [&](int64_t i) {
    if (!pad && !any && i < N) return perm[static_cast<size_t>(i)];
    return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(span));
  });
  // Routing map: K routed experts per token (dropless with probs needs exactly that), any non-zero byte.
  moegrad::fuzz::Tensor* map = f.Get("routingMapOptional");
  if (map != nullptr && map->rank() == 2) {
    const bool random_map = in.Rare(15);
    FillRoutingMap(in, map, E, K, random_map, [&](bool routed) {
      const int64_t v = !routed ? 0 : map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 255) - 127;
      return routed && v == 0 ? 1 : v;
    });
  }

  if (!f.Run()) return 0;
  f.ExpectReference();
  return 0;
}
