// MoeFinalizeRoutingV2 kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/finalize_routing_v2.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/parallel.h"
#include "src/kernels/finalize_routing_v2.h"
#include "src/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// An output row is summed in fp32 tiles of this many columns, so that each term streams through its
// row once per tile and the fold order per element never depends on the tile or vector width.
constexpr int64_t kTile = 512;

// acc[j] = term[j] (first) or acc[j] + term[j], with term = (x + b) * s: x or b null means that part is
// absent (not added as zero), and an unscaled term (x1, x2) is taken as it is.
template <typename T>
HWY_INLINE void AddTerm(float* HWY_RESTRICT acc, bool first, const T* x, int64_t xs, const T* b, int64_t bs,
                        bool scaled, float s, int64_t n, bool unit) {
  int64_t j = 0;
  if (unit) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const VF vs = hn::Set(d, s);
    for (; j + lanes <= n; j += lanes) {
      VF v = (x && b) ? hn::Add(LoadF32(d, x + j), LoadF32(d, b + j)) : LoadF32(d, x ? x + j : b + j);
      if (scaled) v = hn::Mul(v, vs);
      if (!first) v = hn::Add(hn::LoadU(d, acc + j), v);
      hn::StoreU(v, d, acc + j);
    }
  }
  for (; j < n; ++j) {
    float v = (x && b) ? ToF32(x[j * xs]) + ToF32(b[j * bs]) : ToF32(x ? x[j * xs] : b[j * bs]);
    if (scaled) v = v * s;
    acc[j] = first ? v : acc[j] + v;
  }
}

template <typename T>
void FinalizeTyped(const FinalizeProblem& p) {
  const int64_t R = p.tokens;
  const int64_t K = p.topk;
  const int64_t H = p.hidden;
  const bool has_x1 = p.x1.data != nullptr;
  const bool has_x2 = p.x2.data != nullptr;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool unit = p.out.col_stride == 1 && p.expanded_x.col_stride == 1 && (!has_x1 || p.x1.col_stride == 1) &&
                    (!has_x2 || p.x2.col_stride == 1) && (!has_bias || p.bias.col_stride == 1);
  // A task should move a few hundred KB: up to K + 2 source rows and one destination row.
  const int64_t row_bytes = std::max<int64_t>(1, (K + 3) * H * static_cast<int64_t>(sizeof(T)));
  const int64_t grain = std::max<int64_t>(1, (256 << 10) / row_bytes);

  internal::ParallelFor(0, R, grain, [&](int64_t begin, int64_t end) {
    HWY_ALIGN float acc[kTile];
    for (int64_t r = begin; r < end; ++r) {
      T* dst = p.out.Row<T>(r);
      for (int64_t j0 = 0; j0 < H; j0 += kTile) {
        const int64_t n = std::min<int64_t>(kTile, H - j0);
        bool first = true;
        if (has_x1) {
          AddTerm<T>(acc, first, p.x1.Row<const T>(r) + j0 * p.x1.col_stride, p.x1.col_stride, nullptr, 0, false,
                     1.0f, n, unit);
          first = false;
        }
        if (has_x2) {
          AddTerm<T>(acc, first, p.x2.Row<const T>(r) + j0 * p.x2.col_stride, p.x2.col_stride, nullptr, 0, false,
                     1.0f, n, unit);
          first = false;
        }
        for (int64_t k = 0; k < K; ++k) {
          const int64_t pos = p.expert_major ? k * R + r : r * K + k;
          const int64_t v = p.row_idx.At<const int32_t>(pos);
          const T* x = v >= 0 ? p.expanded_x.Row<const T>(v) + j0 * p.expanded_x.col_stride : nullptr;
          const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(r * K + k)) +
                                      j0 * p.bias.col_stride
                                : nullptr;
          if (x == nullptr && b == nullptr) continue;  // a dropped pair without bias adds nothing
          const float s = has_scales ? ToF32(p.scales.At<const T>(r * K + k)) : 1.0f;
          AddTerm<T>(acc, first, x, p.expanded_x.col_stride, b, p.bias.col_stride, true, s, n, unit);
          first = false;
        }
        if (first) {
          for (int64_t j = 0; j < n; ++j) acc[j] = 0.0f;
        }
        T* d0 = dst + j0 * p.out.col_stride;
        int64_t j = 0;
        if (unit) {
          const DF d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) StoreF32(d, hn::LoadU(d, acc + j), d0 + j);
        }
        for (; j < n; ++j) d0[j * p.out.col_stride] = FromF32<T>(acc[j]);
      }
    }
  });
}

void Finalize(const FinalizeProblem& p) {
  switch (p.dtype) {
    case DType::kFloat32: return FinalizeTyped<float>(p);
    case DType::kFloat16: return FinalizeTyped<hwy::float16_t>(p);
    case DType::kBFloat16: return FinalizeTyped<hwy::bfloat16_t>(p);
    default: return;  // the operator layer admits only the three float dtypes
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

HWY_EXPORT(Finalize);

void FinalizeRoutingV2(const FinalizeProblem& p) { HWY_DYNAMIC_DISPATCH(Finalize)(p); }

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
