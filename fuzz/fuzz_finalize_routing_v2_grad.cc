// Fuzzes aclnnMoeFinalizeRoutingV2Grad: shapes, layouts, dtypes (scales and gradScalesOut in their own), attributes,
// missing and aliased tensors, index data. A successful call must match the reference; a failed one must have written
// nothing.
#include <algorithm>
#include <cmath>

#include "fuzz/fuzz_call.h"

using namespace moegrad::fuzz;  // NOLINT
using moegrad::DType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t mode = in.Around(in.Range(0, 1), -2, 3);
  const int64_t R = in.Range(0, 6), K = in.Range(1, 4), H = Hidden(in);
  const int64_t E = in.Around(in.Range(1, 5), 0, 8), C = in.Around(in.Range(1, 6), 0, 8);
  const int64_t pairs = R * K;
  int64_t active = in.Rare(25) ? in.Range(0, pairs + 1) : 0;
  active = in.Around(active, -2, pairs + 2);
  const bool scales = !in.Rare(30), bias = scales && in.Rare(40), expert = bias || in.Rare(10);
  const DType dt = in.FloatDType();
  const DType wt = in.FloatDType();  // the weights' group, independent of the tokens'

  int64_t rows = pairs;
  if (mode == 0 && active > 0 && active < pairs) rows = active;
  int64_t ec = 0;
  if (__builtin_mul_overflow(E, C, &ec)) ec = -1;
  if (mode == 1) rows = ec;
  auto rows_shape = [&]() -> std::vector<int64_t> {
    if (mode == 1) return {E, C, H};
    return {rows, H};
  };

  OpFuzz<moegrad::FinalizeRoutingV2GradArgs> f(in);
  f.PutFloats("gradY", MakeTensor(in, in.Or(dt), Shape(in, {R, H})));
  f.Put("expandedRowIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {pairs})));
  if (scales || in.Rare(10)) f.PutFloats("expandedX", MakeTensor(in, in.Or(dt), Shape(in, rows_shape())));
  if (scales) f.PutFloats("scales", MakeTensor(in, in.Or(wt), Shape(in, {R, K})));
  if (expert) f.Put("expertIdx", MakeTensor(in, in.Or(DType::kInt32), Shape(in, {R, K})));
  const int64_t bias_rows = mode == 1 ? E : in.Range(1, 5);
  if (bias) f.PutFloats("bias", MakeTensor(in, in.Or(dt), Shape(in, {bias_rows, H})));
  f.Put("gradExpandedXOut", MakeTensor(in, in.Or(dt), Shape(in, rows_shape())));
  if (scales || in.Rare(20)) f.Put("gradScalesOut", MakeTensor(in, in.Or(wt), Shape(in, {R, K})));
  f.SetAttr("dropPadMode", mode);
  f.SetAttr("activeNum", active);
  f.SetAttr("expertNum", E);
  f.SetAttr("expertCapacity", C);
  f.Vary();
  const int64_t lo = mode == 1 ? -1 : 0;
  const int64_t hi = mode == 1 ? std::clamp<int64_t>(ec, 0, 1 << 20) : std::max<int64_t>(pairs, 1);
  FillIndices(in, f.Get("expandedRowIdx"),
              [&](int64_t) { return lo + static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(hi - lo)); });
  const Tensor* b = f.Get("bias");
  const int64_t brows = b ? std::max<int64_t>(b->size(0), 1) : 1;
  FillIndices(in, f.Get("expertIdx"),
              [&](int64_t) { return static_cast<int64_t>(in.rng()() % static_cast<uint64_t>(brows)); });

  if (!f.Run()) return 0;
  f.ExpectReference(/*skip=*/"gradScalesOut");
  const Tensor* got_gs = f.Get("gradScalesOut");
  const Tensor* want_gs = f.Want("gradScalesOut");
  if (want_gs == nullptr) return 0;
  // gradScales is a dot product: the kernels sum it in a fixed 16-way order, the reference left to right,
  // so the two agree to within the fp32 rounding of that sum plus one rounding to gradScalesOut's dtype (the
  // weights', which may differ from the tokens'), and in fp16 one subnormal step.
  // Sizes as accepted (the decoded ones may have been perturbed consistently).
  const Tensor* grad_y = f.Get("gradY");
  const Tensor* idx = f.Get("expandedRowIdx");
  const Tensor* x = f.Get("expandedX");
  const Tensor* ex = f.Get("expertIdx");
  const int64_t Hs = grad_y->size(1), Ks = f.Get("scales")->size(1);
  const int64_t rows_s = mode == 1 ? E * C : f.Get("gradExpandedXOut")->size(0);
  const DType odt = got_gs->dtype;
  const float eps = odt == DType::kFloat32 ? 0x1p-23f : odt == DType::kFloat16 ? 0x1p-10f : 0x1p-7f;
  const double subnormal = odt == DType::kFloat16 ? 0x1p-24 : 0.0;
  for (int64_t i = 0; i < want_gs->numel(); ++i) {
    const float got = got_gs->GetF(i), want = want_gs->GetF(i);
    // Raw input bytes may overflow the sum in one order and not the other.
    if (!std::isfinite(got) || !std::isfinite(want)) continue;
    // Bound on sum |terms| from the inputs: |x + b| <= 4 + 4 for filled data, but raw bytes may be larger,
    // so compute it.
    const int64_t r = i / Ks;
    double mag = 0.0;
    int32_t v;
    std::memcpy(&v, idx->ViewData() + idx->ElemOffset(i) * 4, 4);
    const bool dropped = v < 0 || v >= rows_s;
    int32_t e = 0;
    if (b) std::memcpy(&e, ex->ViewData() + ex->ElemOffset(i) * 4, 4);
    for (int64_t j = 0; j < Hs; ++j) {
      double xv = 0.0;
      if (!dropped) xv = x->GetF(v * Hs + j);  // row v of (rows, H) or (E, C, H) alike
      if (b) xv += b->GetF(e * Hs + j);
      mag += std::fabs(xv * grad_y->GetF(r * Hs + j));
    }
    const double tol = std::fabs(want) * eps + static_cast<double>(Hs + 16) * 0x1p-23 * mag + subnormal + 1e-30;
    if (std::fabs(static_cast<double>(got) - want) > tol) {
      Fail("gradScales differs from the reference beyond rounding:",
           std::to_string(got) + " vs " + std::to_string(want) + " (tolerance " + std::to_string(tol) + ")");
    }
  }
  return 0;
}
