// Fuzzes aclnnMoeFinalizeRoutingV2 (the forward "combine"): the four dropPadModes, optional x1 / x2 / bias /
// scales / expertIdx, layouts, dtypes, aliasing and index data. A successful call must match the reference
// bit for bit (both sum in fp32 in the order the spec fixes); a failed one must have written nothing.
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "fuzz/fuzz_call.h"
#include "src/ref/reference.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t mode = in.Around(in.Range(0, 3), -2, 5);
  const bool drop_pad = mode == 1 || mode == 3;
  const int64_t R = in.Range(0, 6), K = in.Range(1, 4), H = Hidden(in);
  const int64_t E = in.Range(1, 5), C = in.Range(1, 6);
  const bool scales = !in.Rare(30), bias = in.Rare(40), expert = bias || in.Rare(20);
  const bool x1 = in.Rare(50), x2 = in.Rare(30);
  const DType dt = in.FloatDType();
  const std::vector<int64_t> x_shape = drop_pad ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{R * K, H};
  const int64_t bias_rows = drop_pad ? E : in.Range(1, 5);

  TensorPtr x = MakeTensor(in, in.Or(dt), Shape(in, x_shape));
  TensorPtr idx = MakeTensor(in, in.Or(DType::kInt32), Shape(in, {R * K}));
  TensorPtr t1 = x1 ? MakeTensor(in, in.Or(dt), Shape(in, {R, H})) : nullptr;
  TensorPtr t2 = x2 ? MakeTensor(in, in.Or(dt), Shape(in, {R, H})) : nullptr;
  TensorPtr b = bias ? MakeTensor(in, in.Or(dt), Shape(in, {bias_rows, H})) : nullptr;
  TensorPtr sc = scales ? MakeTensor(in, in.Or(dt), Shape(in, {R, K})) : nullptr;
  TensorPtr ex = expert ? MakeTensor(in, in.Or(DType::kInt32), Shape(in, {R, K})) : nullptr;
  TensorPtr out = MakeTensor(in, in.Or(dt), Shape(in, {R, H}));
  for (TensorPtr* t : {&x, &idx, &t1, &t2, &b, &sc, &ex, &out}) {
    if (in.Rare(2)) t->reset();
  }
  const Tensor* inputs[] = {x.get(), idx.get(), t1.get(), t2.get(), b.get(), sc.get(), ex.get()};
  MaybeAlias(in, out.get(), inputs[in.Range(0, 6)]);

  for (Tensor* t : {x.get(), t1.get(), t2.get(), b.get(), sc.get()}) FillFloats(in, t);
  const int64_t lo = drop_pad ? -1 : 0, hi = drop_pad ? E * C : std::max<int64_t>(R * K, 1);
  FillIndices(in, idx.get(), [&](int64_t) { return lo + static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(hi - lo)); });
  FillIndices(in, ex.get(), [&](int64_t) { return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(bias_rows)); });

  Call call("MoeFinalizeRoutingV2");
  for (const Tensor* t : inputs) call.Input(t);
  call.Output(out.get(), true);
  call.Freeze();

  uint64_t ws_size = 0;
  aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&ws_size);
  const aclnnStatus st = aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
      Acl(in, x.get()), Acl(in, idx.get()), Acl(in, t1.get()), Acl(in, t2.get()), Acl(in, b.get()), Acl(in, sc.get()),
      Acl(in, ex.get()), mode, Acl(in, out.get()), &ws_size, &executor);
  if (!call.PhaseOne(st, executor)) return 0;
  bool ran = false;
  const aclnnStatus run = PhaseTwo(
      in, "MoeFinalizeRoutingV2",
      [](void* w, uint64_t n, aclOpExecutor* e) { return aclnnMoeFinalizeRoutingV2(w, n, e, nullptr); }, ws_size,
      executor, call.all(), &ran);
  if (!ran || run != ACLNN_SUCCESS) return 0;
  call.CheckUntouched();
  if (!call.Comparable()) return 0;

  TensorPtr want = call.RefCopy(out.get());
  moegrad::FinalizeRoutingV2Args a;
  a.expanded_x = x->View();
  a.expanded_row_idx = idx->View();
  if (t1) a.x1 = t1->View();
  if (t2) a.x2 = t2->View();
  if (b) a.bias = b->View();
  if (sc) a.scales = sc->View();
  if (ex) a.expert_idx = ex->View();
  a.drop_pad_mode = mode;
  a.out = want->View();
  moegrad::ref::FinalizeRoutingV2(a);
  ExpectSameElements(*out, *want, "out");
  return 0;
}
