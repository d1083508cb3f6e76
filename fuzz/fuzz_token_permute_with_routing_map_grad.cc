// Fuzzes aclnnMoeTokenPermuteWithRoutingMapGrad: shapes, layouts, dtypes, attributes, missing and aliased
// tensors, index data and routing maps. A successful call must match the reference bit for bit; a failed
// one must have written nothing.
#include <algorithm>

#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "fuzz/fuzz_call.h"
#include "src/ref/reference.h"

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
  const DType map_dt = in.Rare(50) ? DType::kBool : in.Or(DType::kInt8);

  TensorPtr grad = MakeTensor(in, in.Or(dt), Shape(in, {N, H}));
  TensorPtr pin = probs ? MakeTensor(in, in.Or(dt), Shape(in, {N})) : nullptr;
  TensorPtr idx = MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N}));
  TensorPtr map = has_map ? MakeTensor(in, map_dt, Shape(in, {T, E})) : nullptr;
  TensorPtr tg = MakeTensor(in, in.Or(dt), Shape(in, {T, H}));
  TensorPtr pg = (probs || in.Rare(20)) ? MakeTensor(in, in.Or(dt), Shape(in, {T, E})) : nullptr;
  for (TensorPtr* t : {&grad, &pin, &idx, &map, &tg, &pg}) {
    if (in.Rare(2)) t->reset();
  }
  const Tensor* inputs[] = {grad.get(), pin.get(), idx.get(), map.get()};
  MaybeAlias(in, tg.get(), inputs[in.Range(0, 3)]);
  MaybeAlias(in, pg.get(), in.Rare(50) ? tg.get() : inputs[in.Range(0, 3)]);

  FillFloats(in, grad.get());
  FillFloats(in, pin.get());
  // Dropless: a permutation of the N rows (the forward's), else any token id; drop-and-pad: token ids.
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(N, 0)));
  for (int64_t i = 0; i < N; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), in.rng());
  const bool any = in.Rare(30);
  const int64_t span = dp ? T : std::max<int64_t>(N, 1);
  FillIndices(in, idx.get(), [&](int64_t i) {
    if (!dp && !any && i < N) return perm[static_cast<size_t>(i)];
    return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(span));
  });
  // Routing map: K routed experts per token (dropless needs N routed entries in all), any non-zero byte.
  if (map != nullptr) {
    const bool random_map = in.Rare(15);
    for (int64_t t = 0; t < map->numel() / std::max<int64_t>(E, 1) && map->rank() == 2; ++t) {
      std::vector<int64_t> order(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
      std::shuffle(order.begin(), order.end(), in.rng());
      for (int64_t e = 0; e < E; ++e) {
        const bool routed = random_map ? (in.rng()() & 1) != 0 : order[static_cast<size_t>(e)] < K;
        const int64_t v = !routed ? 0 : map->dtype == DType::kBool ? 1 : static_cast<int64_t>(in.rng()() % 255) - 127;
        map->SetRaw(t * E + e, routed && v == 0 ? 1 : v);
      }
    }
  }

  Call call("MoeTokenPermuteWithRoutingMapGrad");
  for (const Tensor* t : inputs) call.Input(t);
  call.Output(tg.get(), true);
  call.Output(pg.get(), pin != nullptr);
  call.Freeze();

  uint64_t ws_size = 0;
  aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&ws_size);
  const aclnnStatus st = aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(
      Acl(in, grad.get()), Acl(in, pin.get()), Acl(in, idx.get()), Acl(in, map.get()), experts, tokens, dp,
      const_cast<aclTensor*>(Acl(in, tg.get())), const_cast<aclTensor*>(Acl(in, pg.get())), &ws_size, &executor);
  if (!call.PhaseOne(st, executor)) return 0;
  bool ran = false;
  const aclnnStatus run = PhaseTwo(
      in, "MoeTokenPermuteWithRoutingMapGrad",
      [](void* w, uint64_t n, aclOpExecutor* e) { return aclnnMoeTokenPermuteWithRoutingMapGrad(w, n, e, nullptr); },
      ws_size, executor, call.all(), &ran);
  if (!ran || run != ACLNN_SUCCESS) return 0;
  call.CheckUntouched();
  if (!call.Comparable()) return 0;

  // The reference allocates tokensNum x numExperts floats even when neither is used for a shape.
  if (experts > (1 << 16) || tokens > (1 << 16)) return 0;
  // Sums run in ascending order of the contributing position in both: results agree bit for bit.
  const Tensor* written_pg = pin ? pg.get() : nullptr;
  TensorPtr want_tg = call.RefCopy(tg.get());
  TensorPtr want_pg = call.RefCopy(written_pg);
  moegrad::TokenPermuteWithRoutingMapGradArgs a;
  a.permuted_token_output_grad = grad->View();
  if (pin) a.permuted_probs_output_grad = pin->View();
  a.sorted_indices = idx->View();
  if (map) a.routing_map = map->View();
  a.num_experts = experts;
  a.tokens_num = tokens;
  a.drop_and_pad = dp;
  a.tokens_grad = want_tg->View();
  if (want_pg) a.probs_grad = want_pg->View();
  moegrad::ref::TokenPermuteWithRoutingMapGrad(a);
  ExpectSameElements(*tg, *want_tg, "tokensGradOut");
  if (want_pg) ExpectSameElements(*pg, *want_pg, "probsGradOut");
  return 0;
}
