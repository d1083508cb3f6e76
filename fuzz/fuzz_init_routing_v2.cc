// Fuzzes aclnnMoeInitRoutingV2 (the V2 "dispatch"): dropless with activeNum and drop/pad with a capacity, the
// count flags and their optional outputs, layouts, dtypes, attributes, missing and aliased tensors, expert ids
// (any id >= 0 without an expert count). A successful call must match the reference bit for bit (it only
// copies); a failed one must have written nothing.
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t mode = in.Around(in.Range(0, 1), -2, 3);
  const int64_t N = in.Range(0, 6), K = in.Range(0, 4), H = Hidden(in);
  const int64_t E = in.Around(in.Range(1, 6), 0, 9), C = in.Around(in.Range(1, 6), 0, 9);
  const int64_t flag = in.Around(in.Range(0, 2), -1, 4);
  const bool before = !in.Rare(30);
  const int64_t pairs = N * K;
  int64_t active = in.Rare(30) ? in.Range(0, pairs + 2) : 0;
  active = in.Around(active, -2, pairs + 2);
  const int64_t rows = mode == 0 && active > 0 && active < pairs ? active : pairs;
  const bool counts = mode == 0 && (flag == 1 || flag == 2);
  const DType dt = in.FloatDType();

  OpFuzz<moegrad::InitRoutingV2Args> f(in);
  f.PutFloats("x", MakeTensor(in, in.Or(dt), Shape(in, {N, H})));
  f.Put("expertIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {N, K})));
  f.Put("expandedXOut", MakeTensor(in, in.Or(dt), Shape(in, mode == 1 ? std::vector<int64_t>{E, C, H}
                                                                       : std::vector<int64_t>{rows, H})));
  f.Put("expandedRowIdxOut", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {pairs})));
  if (counts || in.Rare(20)) {
    f.Put("expertTokensCountOrCumsumOut", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {E})));
  }
  if ((mode == 1 && before) || in.Rare(20)) {
    f.Put("expertTokensBeforeCapacityOut", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {E})));
  }
  f.SetAttr("activeNum", active);
  f.SetAttr("expertCapacity", C);
  f.SetAttr("expertNum", E);
  f.SetAttr("dropPadMode", mode);
  f.SetAttr("expertTokensCountOrCumsumFlag", flag);
  f.SetAttr("expertTokensBeforeCapacityFlag", before);
  f.Vary();
  // Ids in [0, E); without an expert count (mode 0, flag 0) now and then any id below 2^31.
  const bool any_id = mode == 0 && flag == 0 && in.Rare(40);
  const uint64_t range = any_id ? uint64_t{1} << in.Range(0, 31) : static_cast<uint64_t>(E > 0 ? E : 1);
  FillIndices(in, f.Get("expertIdx"), [&](int64_t) { return static_cast<int64_t>(in.rng()() % range); });

  if (f.Run()) f.ExpectReference();
  return 0;
}
