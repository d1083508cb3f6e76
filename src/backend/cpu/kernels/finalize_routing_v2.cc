// MoeFinalizeRoutingV2 kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/finalize_routing_v2.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/finalize_routing_v2.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/row_ops_terms-inl.h"
#include "src/backend/cpu/kernels/underflow_watch.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

template <typename T>
void FinalizeRoutingV2Typed(const FinalizeRoutingV2Task& p) {
  const int64_t R = p.tokens;
  const int64_t K = p.topk;
  const int64_t H = p.hidden;
  const bool has_x1 = p.x1.data != nullptr;
  const bool has_x2 = p.x2.data != nullptr;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool unit = p.out.col_stride == 1 && p.expanded_x.col_stride == 1 && (!has_x1 || p.x1.col_stride == 1) &&
                    (!has_x2 || p.x2.col_stride == 1) && (!has_bias || p.bias.col_stride == 1);
  // Term c of a row: x1 (if given), x2 (if given), then pair k = c - (number of residuals).
  const int64_t residuals = (has_x1 ? 1 : 0) + (has_x2 ? 1 : 0);
  const int64_t cursor_end = residuals + K;
  // A task should move a few hundred KB: up to K + 2 source rows and one destination row.
  const int64_t row_bytes = std::max<int64_t>(1, (K + 3) * H * static_cast<int64_t>(sizeof(T)));
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / row_bytes);

  const int64_t out_bytes = R * H * static_cast<int64_t>(sizeof(T));
  const bool stream = unit && StreamOutput(out_bytes, (cursor_end + 1) * out_bytes);  // the terms and the output
  // With at most kGroup terms a row's terms always fit in one group: the whole row in one pass.
  const bool whole_rows = unit && cursor_end <= kGroup;
  // Chunks of rows taken as each thread finishes its last (ChunkQueue).
  internal::ChunkQueue queue;
  internal::ParallelParts(internal::CeilDiv(R, grain), [&](int /*part*/, int parts) {
    // The products take the fused form until an underflow is seen, then MulNoAssist, or still the fused form
    // where the core spares it (TermsNoAssist in row_ops_terms-inl.h, underflow_watch.h); the element-by-element
    // columns (strided rows, tails) the plain multiply until then (AddGroup's kForm, ScalarFormAfter). One watch
    // per thread for all its chunks.
    UnderflowWatch watch(WatchesUnderflow<T>());
    queue.TakeRanges(R, internal::WalkChunks(R * row_bytes, parts, kChunkBytes), [&](int64_t begin, int64_t end) {
      HWY_ALIGN float acc[kTile];
      Term<T> terms[kGroup];
      Term<T> rows_terms[2][kGroup];  // whole rows: this row's terms and the next row's
      int rows_count[2] = {0, 0};
      int cur = 0;
      for (int64_t r = begin; r < end; ++r) {
        T* dst = p.out.Row<T>(r);
        int64_t j0 = 0;
        int64_t cursor = 0;
        // Collects the next group of non-empty terms of output row `row`, with pointers at column j0.
        auto collect_row = [&](int64_t row, Term<T>* out) {
          int count = 0;
          for (; cursor < cursor_end && count < kGroup; ++cursor) {
            Term<T>& t = out[count];
            if (cursor < residuals) {
              const RowView& src = (cursor == 0 && has_x1) ? p.x1 : p.x2;
              t = {src.Row<const T>(row) + j0 * src.col_stride, src.col_stride, nullptr, 0, 1.0f, false};
              ++count;
              continue;
            }
            const int64_t k = cursor - residuals;
            const int64_t v = p.row_idx.At<const int32_t>(p.expert_major ? k * R + row : row * K + k);
            const T* x = v >= 0 ? p.expanded_x.Row<const T>(v) + j0 * p.expanded_x.col_stride : nullptr;
            const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(row * K + k)) +
                                        j0 * p.bias.col_stride
                                  : nullptr;
            if (x == nullptr && b == nullptr) continue;  // a dropped pair without bias adds nothing
            const float s = has_scales ? LoadWeight(p.scales, row * K + k, p.weight_dtype) : 1.0f;
            t = {x, p.expanded_x.col_stride, b, p.bias.col_stride, s, true};
            ++count;
          }
          return count;
        };
        auto collect = [&]() { return collect_row(r, terms); };
        if (whole_rows) {
          // This row's terms were collected one row ahead (the first at the start), so that the next row's
          // can be prefetched while this one is summed.
          if (r == begin) {
            rows_count[cur] = collect_row(r, rows_terms[cur]);
          }
          rows_count[cur ^ 1] = 0;
          if (r + 1 < end) {
            cursor = 0;
            rows_count[cur ^ 1] = collect_row(r + 1, rows_terms[cur ^ 1]);
          }
          const Term<T>* these = rows_terms[cur];
          const int count = rows_count[cur];
          const Term<T>* next = rows_terms[cur ^ 1];
          const int next_count = rows_count[cur ^ 1];
          SumTermsRowWatched<T>(watch, r == begin, stream, these, count, next, next_count, dst, H);
          cur ^= 1;
          continue;
        }
        for (; j0 < H; j0 += kTile) {
          const int64_t n = std::min<int64_t>(kTile, H - j0);
          cursor = 0;
          bool first = true;
          for (;;) {
            const int count = collect();
            const bool last = cursor >= cursor_end;
            WithScalarForm(watch, [&](auto form) {
              AddGroup<decltype(form)::value>(terms, count, first, last, acc, dst + j0 * p.out.col_stride,
                                              p.out.col_stride, n, unit);
            });
            watch.Poll();
            if (last) break;
            first = false;
          }
        }
        watch.Poll();
      }
    });
    if (stream) hwy::FlushStream();
  });
}

void FinalizeRoutingV2Impl(const FinalizeRoutingV2Task& p) {
  WithFloatType(p.dtype, [&](auto zero) { FinalizeRoutingV2Typed<decltype(zero)>(p); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunFinalizeRoutingV2, FinalizeRoutingV2Impl, FinalizeRoutingV2Task)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
