// Fuzzes aclnnMoeTokenPermuteWithRoutingMap (the forward "dispatch"): dropless and drop-and-pad, optional
// probs, layouts, dtypes, aliasing and routing maps. A successful call must match the reference bit for
// bit (it only copies); a failed one must have written nothing.
#include <algorithm>

#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "fuzz/fuzz_call.h"
#include "src/ref/reference.h"

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
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  TensorPtr tokens = MakeTensor(in, in.Or(dt), Shape(in, {T, H}));
  TensorPtr map = MakeTensor(in, map_dt, Shape(in, {T, E}));
  TensorPtr pr = probs ? MakeTensor(in, in.Or(dt), Shape(in, {T, E})) : nullptr;
  TensorPtr out = MakeTensor(in, in.Or(dt), Shape(in, {N, H}));
  TensorPtr out_probs = (probs || in.Rare(20)) ? MakeTensor(in, in.Or(dt), Shape(in, {N})) : nullptr;
  TensorPtr sorted = MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N}));
  for (TensorPtr* t : {&tokens, &map, &pr, &out, &out_probs, &sorted}) {
    if (in.Rare(2)) t->reset();
  }
  const Tensor* inputs[] = {tokens.get(), map.get(), pr.get()};
  MaybeAlias(in, out.get(), inputs[in.Range(0, 2)]);
  MaybeAlias(in, out_probs.get(), in.Rare(50) ? out.get() : inputs[in.Range(0, 2)]);
  MaybeAlias(in, sorted.get(), in.Rare(50) ? out.get() : inputs[in.Range(0, 2)]);

  FillFloats(in, tokens.get());
  FillFloats(in, pr.get());
  // Dropless needs exactly K routed experts per token (checked in phase two); any non-zero byte is routed.
  if (map != nullptr && map->rank() == 2) {
    const bool random_map = dp || in.Rare(15);
    for (int64_t t = 0; t < map->numel() / std::max<int64_t>(E, 1); ++t) {
      std::vector<int64_t> order(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
      std::shuffle(order.begin(), order.end(), in.rng());
      for (int64_t e = 0; e < E; ++e) {
        const bool routed = random_map ? (in.rng()() & 1) != 0 : order[static_cast<size_t>(e)] < K;
        const int64_t v = map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 127) + 1;
        map->SetRaw(t * E + e, routed ? v : 0);
      }
    }
  }

  Call call("MoeTokenPermuteWithRoutingMap");
  for (const Tensor* t : inputs) call.Input(t);
  call.Output(out.get(), true);
  call.Output(out_probs.get(), pr != nullptr);
  call.Output(sorted.get(), true);
  call.Freeze();

  uint64_t ws_size = 0;
  aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&ws_size);
  const aclnnStatus st = aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(
      Acl(in, tokens.get()), Acl(in, map.get()), Acl(in, pr.get()), num_out, dp,
      const_cast<aclTensor*>(Acl(in, out.get())), const_cast<aclTensor*>(Acl(in, out_probs.get())),
      const_cast<aclTensor*>(Acl(in, sorted.get())), &ws_size, &executor);
  if (!call.PhaseOne(st, executor)) return 0;
  bool ran = false;
  const aclnnStatus run = PhaseTwo(
      in, "MoeTokenPermuteWithRoutingMap",
      [](void* w, uint64_t n, aclOpExecutor* e) { return aclnnMoeTokenPermuteWithRoutingMap(w, n, e, nullptr); },
      ws_size, executor, call.all(), &ran);
  if (!ran || run != ACLNN_SUCCESS) return 0;
  call.CheckUntouched();
  if (!call.Comparable()) return 0;

  const Tensor* written_probs = pr ? out_probs.get() : nullptr;
  TensorPtr want = call.RefCopy(out.get());
  TensorPtr want_probs = call.RefCopy(written_probs);
  TensorPtr want_sorted = call.RefCopy(sorted.get());
  moegrad::TokenPermuteWithRoutingMapArgs a;
  a.tokens = tokens->View();
  a.routing_map = map->View();
  if (pr) a.probs = pr->View();
  a.num_out_tokens = num_out;
  a.drop_and_pad = dp;
  a.permute_tokens = want->View();
  if (want_probs) a.permute_probs = want_probs->View();
  a.sorted_indices = want_sorted->View();
  moegrad::ref::TokenPermuteWithRoutingMap(a);
  ExpectSameElements(*out, *want, "permuteTokensOut");
  if (want_probs) ExpectSameElements(*out_probs, *want_probs, "permuteProbsOut");
  ExpectSameElements(*sorted, *want_sorted, "sortedIndicesOut");
  return 0;
}
