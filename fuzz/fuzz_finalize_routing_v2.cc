// Fuzzes aclnnMoeFinalizeRoutingV2 (the forward "combine"): the four dropPadModes, optional x1 / x2 / bias / scales /
// expertIdx, layouts, dtypes (scales in its own), aliasing and index data. A successful call must match the reference
// bit for bit (both sum in fp32 in the order the spec fixes); a failed one must have written nothing.
#include "fuzz/fuzz_call.h"

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
  const DType wt = in.FloatDType();  // scales' (the weights' group), independent of the rest
  const std::vector<int64_t> x_shape = drop_pad ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{R * K, H};
  const int64_t bias_rows = drop_pad ? E : in.Range(1, 5);

  OpFuzz<moegrad::FinalizeRoutingV2Args> f(in);
  f.PutFloats("expandedX", MakeTensor(in, in.Or(dt), Shape(in, x_shape)));
  f.Put("expandedRowIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {R * K})));
  if (x1) f.PutFloats("x1", MakeTensor(in, in.Or(dt), Shape(in, {R, H})));
  if (x2) f.PutFloats("x2", MakeTensor(in, in.Or(dt), Shape(in, {R, H})));
  if (bias) f.PutFloats("bias", MakeTensor(in, in.Or(dt), Shape(in, {bias_rows, H})));
  if (scales) f.PutFloats("scales", MakeTensor(in, in.Or(wt), Shape(in, {R, K})));
  if (expert) f.Put("expertIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {R, K})));
  f.Put("out", MakeTensor(in, in.Or(dt), Shape(in, {R, H})));
  f.SetAttr("dropPadMode", mode);
  f.Vary();
  const int64_t lo = drop_pad ? -1 : 0, hi = drop_pad ? E * C : std::max<int64_t>(R * K, 1);
  FillIndices(in, f.Get("expandedRowIdx"),
              [&](int64_t) { return lo + static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(hi - lo)); });
  FillIndices(in, f.Get("expertIdx"),
              [&](int64_t) { return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(bias_rows)); });

  if (f.Run()) f.ExpectReference();
  return 0;
}
