// Fuzzes aclnnMoeTokenPermuteWithRoutingMap (the forward "dispatch"): dropless and drop-and-pad, optional probs,
// layouts, dtypes (probs and permuteProbsOut in their own), aliasing and routing maps. A successful call must match the
// reference bit for bit (it only copies); a failed one must have written nothing.
#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const bool dp = in.Rare(40);
  const int64_t T = in.Range(0, 6), E = in.Range(1, 6), H = Hidden(in);
  const int64_t K = in.Range(0, E), C = in.Range(0, T);
  const int64_t N = dp ? E * C : T * K;
  const int64_t num_out = in.Around(N, -1, T * E + 1);
  const bool probs = !in.Rare(30);
  const DType dt = in.FloatDType();
  const DType wt = in.FloatDType();  // the probs' group, independent of the tokens'
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  OpFuzz<moegrad::TokenPermuteWithRoutingMapArgs> f(in);
  f.PutFloats("tokens", MakeTensor(in, in.Or(dt), Shape(in, {T, H})));
  f.Put("routingMap", MakeTensor(in, map_dt, Shape(in, {T, E})));
  if (probs) f.PutFloats("probs", MakeTensor(in, in.Or(wt), Shape(in, {T, E})));
  f.Put("permuteTokensOut", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  if (probs || in.Rare(20)) f.Put("permuteProbsOut", MakeTensor(in, in.Or(wt), Shape(in, {N})));
  f.Put("sortedIndicesOut", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N})));
  f.SetAttr("numOutTokens", num_out);
  f.SetAttr("dropAndPad", dp);
  f.Vary();
  // Dropless needs exactly K routed experts per token (checked in phase two); any non-zero byte is routed.
  Tensor* map = f.Get("routingMap");
  if (map != nullptr && map->rank() == 2) {
    FillRoutingMap(in, map, E, K, dp || in.Rare(15), [&](bool routed) {
      const int64_t v = map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 127) + 1;
      return routed ? v : 0;
    });
  }

  if (f.Run()) f.ExpectReference();
  return 0;
}
