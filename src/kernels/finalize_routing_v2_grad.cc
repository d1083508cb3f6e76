// MoeFinalizeRoutingV2Grad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/finalize_routing_v2_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstdlib>
#include "hwy/highway.h"
#include "src/core/parallel.h"
#include "src/kernels/finalize_routing_v2_grad.h"
#include "src/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// Outputs at least this large are written with streaming stores: they cannot stay in the caches anyway.
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;
// A thread should move at least this much.
constexpr int64_t kBytesPerThread = int64_t{256} << 10;
// The bias columns of one span should take about this much (of L2), and a span at least kMinSpan columns.
constexpr int64_t kBiasSpanBytes = int64_t{256} << 10;
constexpr int64_t kMinSpan = 256;

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

// Every row of gradExpandedX has at most one writer: one pass, token by token. gradY[r] is read once for its
// K pairs (it stays in L1/L2 meanwhile) and each pair's expandedX row once, for both its gradExpandedX row and
// its gradScales dot; rows nobody writes are zeroed by the same threads. Same arithmetic as the CSR path.
//
// With a bias table larger than the L2 cache, the columns are done in spans of `span` (a multiple of 16):
// every pair's columns [j0, j0 + span), then the next span, so that the bias columns of the current span stay
// in L2 for all pairs instead of each pair fetching a whole bias row from memory. The 16 partial sums of each
// dot wait in p.partials between spans, so every dot adds the same terms in the same order as in one pass.
template <typename T>
void FinalizeGradOneWriterTyped(const FinalizeGradProblem& p) {
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool unit = p.grad_y.col_stride == 1 && p.grad_expanded_x.col_stride == 1 &&
                    (!has_scales || p.expanded_x.col_stride == 1) && (!has_bias || p.bias.col_stride == 1);
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const bool stream = unit && p.rows * row_bytes >= kStreamMinBytes;
  int64_t span = std::max<int64_t>(H, 1);
  if (unit && has_bias && p.partials != nullptr) {
    static const int64_t kBiasSpanBytesX = getenv("XSPAN") ? atoll(getenv("XSPAN")) : kBiasSpanBytes;
    const int64_t fit = kBiasSpanBytesX / std::max<int64_t>(1, p.bias_rows * static_cast<int64_t>(sizeof(T)));
    span = std::max<int64_t>(kMinSpan, fit / 16 * 16);
    if (span >= H) span = std::max<int64_t>(H, 1);
  }
  // Half rows moved in all: the token costs plus one row written per zero row.
  const int64_t moved = (p.token_cost[p.tokens] / 2 + p.zero_rows) * std::max<int64_t>(row_bytes, 1);
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    int64_t r_begin, r_end;
    internal::BalanceByCost(p.tokens, parts, part, [&](int64_t r) { return p.token_cost[r]; }, &r_begin, &r_end);
    HWY_ALIGN float local[16];
    for (int64_t j0 = 0; j0 == 0 || j0 < H; j0 += span) {
      const int64_t j1 = std::min(H, j0 + span);
      for (int64_t r = r_begin; r < r_end; ++r) {
        const T* g = p.grad_y.Row<const T>(r);
        for (int64_t i = r * K; i < (r + 1) * K; ++i) {
          const int64_t v = p.row_idx.At<const int32_t>(i);
          const bool written = v >= 0 && v < p.rows;
          T* out = written ? p.grad_expanded_x.Row<T>(v) : nullptr;
          if (!has_scales) {
            if (!written) continue;
            if (unit) ScaleRowDotSpanOf<T>(g, 1.0f, out, stream, nullptr, nullptr, 0, H, H, nullptr, nullptr);
            else ScaleRow(g, p.grad_y.col_stride, 1.0f, out, p.grad_expanded_x.col_stride, H);
            continue;
          }
          const float s = ToF32(p.scales.At<const T>(i));
          const T* x = written ? p.expanded_x.Row<const T>(v) : nullptr;
          const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(i)) : nullptr;
          if (!unit) {
            if (written) ScaleRow(g, p.grad_y.col_stride, s, out, p.grad_expanded_x.col_stride, H);
            const float dot = DotRow(x, p.expanded_x.col_stride, b, p.bias.col_stride, g, p.grad_y.col_stride, H);
            p.grad_scales.At<T>(i) = FromF32<T>(dot);
            continue;
          }
          float* acc = span < H ? p.partials + 16 * i : local;
          if (j0 == 0) std::fill(acc, acc + 16, 0.0f);
          static const int kPf = getenv("XPF") ? atoi(getenv("XPF")) : 0;
          const T* ahead = nullptr;
          if (kPf > 0 && i + kPf < p.tokens * K) {
            const int64_t va = p.row_idx.At<const int32_t>(i + kPf);
            if (va >= 0 && va < p.rows) ahead = p.expanded_x.Row<const T>(va);
          }
          const float dot = ScaleRowDotSpanOf<T>(g, s, out, stream, x, b, j0, j1, H, acc, ahead);
          if (j1 == H) p.grad_scales.At<T>(i) = FromF32<T>(dot);
        }
      }
      if (!unit || !has_scales) break;  // those take whole rows at once
    }
    // This part's share of the rows no pair writes: those of rank [z_begin, z_end) among them.
    if (p.zero_rows > 0) {
      int64_t z_begin, z_end;
      internal::Balance211(p.zero_rows, parts, part, &z_begin, &z_end);
      for (int64_t v = 0, rank = 0; v < p.rows && rank < z_end; ++v) {
        if (p.writer[v] >= 0) continue;
        if (rank++ < z_begin) continue;
        T* dst = p.grad_expanded_x.Row<T>(v);
        if (unit) ZeroRowUnit(dst, H, stream);
        else ZeroRow(dst, p.grad_expanded_x.col_stride, H);
      }
    }
    if (stream) hwy::FlushStream();
  });
}

void FinalizeGrad(const FinalizeGradProblem& p) {
  if (p.one_writer) {
    switch (p.dtype) {
      case DType::kFloat32: return FinalizeGradOneWriterTyped<float>(p);
      case DType::kFloat16: return FinalizeGradOneWriterTyped<hwy::float16_t>(p);
      case DType::kBFloat16: return FinalizeGradOneWriterTyped<hwy::bfloat16_t>(p);
      default: return;
    }
  }
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
