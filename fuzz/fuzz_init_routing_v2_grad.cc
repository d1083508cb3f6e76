// Fuzzes aclnnMoeInitRoutingV2Grad: shapes, layouts, dtypes, attributes, missing and aliased tensors, index data
// (as MoeInitRoutingV2 writes it, or any values). A successful call must match the reference bit for bit (both
// fold each token's rows in ascending k from the first term); a failed one must have written nothing.
#include <algorithm>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t mode = in.Around(in.Range(0, 1), -2, 3);
  const int64_t N = in.Range(0, 6), K = in.Range(1, 4), H = Hidden(in);
  const int64_t E = in.Range(1, 5), C = in.Range(0, 6);
  const int64_t L = N * K;
  int64_t active = in.Rare(30) ? in.Range(0, L + 1) : 0;
  active = in.Around(active, -2, L + 2);
  const int64_t topk = in.Around(K, -1, 8);
  const DType dt = in.FloatDType();
  const int64_t rows = mode == 1 ? E * C : (active > 0 && active < L ? active : L);

  OpFuzz<moegrad::InitRoutingV2GradArgs> f(in);
  const std::vector<int64_t> grad_shape = mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{rows, H};
  f.PutFloats("gradExpandedX", MakeTensor(in, in.Or(dt), Shape(in, grad_shape)));
  f.Put("expandedRowIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {L})));
  f.Put("out", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  f.SetAttr("topK", topk);
  f.SetAttr("dropPadMode", mode);
  f.SetAttr("activeNum", active);
  f.Vary();
  // The forward's values: the pairs' random experts sorted stably (mode 0: each pair's position; mode 1:
  // e*C + its rank inside expert e, -1 from rank C on). Else any value of the mode's range [lo, hi).
  std::vector<int64_t> forward(static_cast<size_t>(L)), count(static_cast<size_t>(E), 0), start(static_cast<size_t>(E));
  std::vector<int64_t> expert(static_cast<size_t>(L)), rank(static_cast<size_t>(L));
  for (int64_t p = 0; p < L; ++p) {
    expert[static_cast<size_t>(p)] = static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(E));
    rank[static_cast<size_t>(p)] = count[static_cast<size_t>(expert[static_cast<size_t>(p)])]++;
  }
  for (int64_t e = 0, s = 0; e < E; s += count[static_cast<size_t>(e)], ++e) start[static_cast<size_t>(e)] = s;
  for (int64_t p = 0; p < L; ++p) {
    const int64_t e = expert[static_cast<size_t>(p)], r = rank[static_cast<size_t>(p)];
    forward[static_cast<size_t>(p)] = mode == 1 ? (r < C ? e * C + r : -1) : start[static_cast<size_t>(e)] + r;
  }
  const bool any = in.Rare(30);
  const int64_t lo = mode == 1 ? -1 : 0, hi = mode == 1 ? E * C : std::max<int64_t>(L, 1);
  FillIndices(in, f.Get("expandedRowIdx"), [&](int64_t i) {
    if (!any && i < L) return forward[static_cast<size_t>(i)];
    return lo + static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(hi - lo));
  });

  if (!f.Run()) return 0;
  f.ExpectReference();
  return 0;
}
