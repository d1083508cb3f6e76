// MoeFinalizeRoutingV2Grad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/finalize_routing_v2_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/parallel.h"
#include "src/kernels/finalize_routing_v2_grad.h"
#include "src/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

template <typename T>
void FinalizeGradTyped(const FinalizeGradProblem& p) {
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const bool has_scales = p.scales.data != nullptr;
  // A task should move a few hundred KB: rows of H elements in and out.
  const int64_t row_bytes = std::max<int64_t>(1, 2 * H * static_cast<int64_t>(sizeof(T)));
  const int64_t grain = std::max<int64_t>(1, (256 << 10) / row_bytes);

  // gradExpandedX, split over its rows: row v sums its pairs in ascending pair order (zero when none).
  internal::ParallelFor(0, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const int64_t* first = p.pairs + p.offsets[v];
      const int64_t count = p.offsets[v + 1] - p.offsets[v];
      T* dst = p.grad_expanded_x.Row<T>(v);
      SumRowsOf<T>(
          count,
          [&](int64_t m, float* scale) {
            const int64_t i = first[m];
            *scale = has_scales ? ToF32(p.scales.At<T>(i)) : 1.0f;
            return p.grad_y.Row<const T>(i / K);
          },
          p.grad_y.col_stride, dst, p.grad_expanded_x.col_stride, H);
    }
  });

  if (!has_scales) return;
  // gradScales, split over pairs: (x_i + b_i) . gradY[i / K], x_i = 0 for a dropped pair.
  const bool has_bias = p.bias.data != nullptr;
  internal::ParallelFor(0, p.tokens * K, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = p.row_idx.At<const int32_t>(i);
      const T* x = (v >= 0 && v < p.rows) ? p.expanded_x.Row<const T>(v) : nullptr;
      const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(i)) : nullptr;
      const float dot = DotRow(x, p.expanded_x.col_stride, b, p.bias.col_stride, p.grad_y.Row<const T>(i / K),
                               p.grad_y.col_stride, H);
      p.grad_scales.At<T>(i) = FromF32<T>(dot);
    }
  });
}

void FinalizeGrad(const FinalizeGradProblem& p) {
  switch (p.dtype) {
    case DType::kFloat32: return FinalizeGradTyped<float>(p);
    case DType::kFloat16: return FinalizeGradTyped<hwy::float16_t>(p);
    case DType::kBFloat16: return FinalizeGradTyped<hwy::bfloat16_t>(p);
    default: return;  // the operator layer admits only the three float dtypes
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

HWY_EXPORT(FinalizeGrad);

void FinalizeRoutingV2Grad(const FinalizeGradProblem& p) { HWY_DYNAMIC_DISPATCH(FinalizeGrad)(p); }

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
