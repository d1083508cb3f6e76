// MoeFinalizeRoutingV2Grad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/finalize_routing_v2_grad.cc"
#include <algorithm>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/finalize_routing_v2_grad.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_scale_dot-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/underflow_watch.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// With at most this many pairs per bias row on average, the token walk prefetches the bias rows
// (FinalizeRoutingV2GradPairsUnit).
constexpr int64_t kBiasPrefetchMaxUses = 2;

template <typename T>
void FinalizeRoutingV2GradTyped(const FinalizeRoutingV2GradTask& p) {
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const bool has_scales = p.scales.data != nullptr;
  // A task should move a few hundred KB: rows of H elements in and out.
  const int64_t row_bytes = std::max<int64_t>(1, 2 * H * static_cast<int64_t>(sizeof(T)));
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / row_bytes);

  // gradExpandedX, split over its rows: row v sums its pairs in ascending pair order (zero when none).
  // The element loops' products: the plain multiply until an underflow, then the form the core spares
  // (WithScalarForm, underflow_watch.h).
  internal::ParallelFor(0, p.rows, grain, [&](int64_t begin, int64_t end) {
    UnderflowWatch watch(WatchesUnderflow<T>());
    for (int64_t v = begin; v < end; ++v) {
      const int64_t* first = p.pairs + p.offsets[v];
      const int64_t count = p.offsets[v + 1] - p.offsets[v];
      T* dst = p.grad_expanded_x.Row<T>(v);
      WithScalarForm(watch, [&](auto form) {
        SumRowsOf<T, decltype(form)::value>(
            count,
            [&](int64_t m, float* scale) {
              const int64_t i = first[m];
              *scale = has_scales ? LoadWeight(p.scales, i, p.weight_dtype) : 1.0f;
              return p.grad_y.Row<const T>(i / K);
            },
            p.grad_y.col_stride, dst, p.grad_expanded_x.col_stride, H);
      });
      watch.Poll();
    }
  });

  if (!has_scales) return;
  // gradScales, split over pairs: (x_i + b_i) . gradY[i / K], x_i = 0 for a dropped pair.
  const bool has_bias = p.bias.data != nullptr;
  internal::ParallelFor(0, p.tokens * K, grain, [&](int64_t begin, int64_t end) {
    UnderflowWatch watch(WatchesUnderflow<T>());
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = p.row_idx.At<const int32_t>(i);
      const T* x = (v >= 0 && v < p.rows) ? p.expanded_x.Row<const T>(v) : nullptr;
      const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(i)) : nullptr;
      float dot = 0.0f;
      WithScalarForm(watch, [&](auto form) {
        dot = DotRow<decltype(form)::value>(x, p.expanded_x.col_stride, b, p.bias.col_stride,
                                             p.grad_y.Row<const T>(i / K), p.grad_y.col_stride, H);
      });
      watch.Poll();
      StoreWeight(p.grad_scales, i, p.weight_dtype, dot);
    }
  });
}

// Unit-stride rows of pairs [i_begin, i_end), token by token: the pairs of token r in the range walk their
// rows together (ScaleDotToken), so gradY[r] is read once for all of them and each pair's expandedX row once,
// for both its gradExpandedX row and its gradScales dot. Same arithmetic as the CSR path, whatever the range:
// every pair's row and dot are its own.
template <typename T>
void FinalizeRoutingV2GradPairsUnit(const FinalizeRoutingV2GradTask& p, int64_t i_begin, int64_t i_end,
                                    bool stream, UnderflowWatch& watch) {
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool short_step = ShortTokenStep();
  const int64_t end = H / TokenStep<T>(short_step) * TokenStep<T>(short_step);
  auto rows_of = [&](int64_t i, TokenPairRows<T>* q) {
    const int64_t v = p.row_idx.At<const int32_t>(i);
    const bool written = v >= 0 && v < p.rows;
    q->out = written ? p.grad_expanded_x.Row<T>(v) : nullptr;
    q->x = written && has_scales ? p.expanded_x.Row<const T>(v) : nullptr;
    q->b = has_scales && has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(i)) : nullptr;
    q->s = has_scales ? LoadWeight(p.scales, i, p.weight_dtype) : 1.0f;
  };
  // A token's pairs go in groups of at most kTokenGroup; each group's rows are looked up once, one group ahead
  // (the next group's rows are prefetched as this one ends).
  auto group_end = [&](int64_t i0) { return std::min({i0 + kTokenGroup, (i0 / K + 1) * K, i_end}); };
  auto look_up = [&](int64_t i0, TokenPairRows<T>* q) {
    for (int64_t i = i0; i < group_end(i0); ++i) rows_of(i, &q[i - i0]);
  };
  TokenPairRows<T> groups[2][kTokenGroup];
  HWY_ALIGN float part[kTokenGroup][16];
  const bool fma_from_start =
      has_scales && has_bias && FmaFromTheStart<T>(p.bias_rows * H * static_cast<int64_t>(sizeof(T)));
  // Bias rows are prefetched as the expandedX rows where a call adds each row about once (at most two pairs
  // per bias row on average: decode sizes), so the rows come from memory; where rows are added many times
  // they come from L3 and a prefetch only takes load slots (docs/performance.md, "Tried, and not kept").
  const bool prefetch_bias = has_scales && has_bias && p.tokens * K <= kBiasPrefetchMaxUses * p.bias_rows;
  int cur = 0;
  if (i_begin < i_end) look_up(i_begin, groups[cur]);
  for (int64_t i0 = i_begin; i0 < i_end; i0 = group_end(i0), cur ^= 1) {
    const int64_t r = i0 / K;
    const T* g = p.grad_y.Row<const T>(r);
    const int64_t count = group_end(i0) - i0;
    const int64_t next0 = group_end(i0);
    TokenPairRows<T>* pairs = groups[cur];
    TokenPairRows<T>* next = groups[cur ^ 1];
    const int64_t next_count = next0 < i_end ? group_end(next0) - next0 : 0;
    if (next_count > 0) look_up(next0, next);
    const T* g_next = next_count > 0 && next0 / K != r ? p.grad_y.Row<const T>(next0 / K) : nullptr;
    bool aligned = true;
    for (int64_t m = 0; m < count; ++m) {
      pairs[m].x_next = m < next_count ? next[m].x : nullptr;
      pairs[m].prefetch_b = prefetch_bias && pairs[m].b != nullptr;
      pairs[m].b_next = prefetch_bias && m < next_count ? next[m].b : nullptr;
      if (pairs[m].out != nullptr && !StreamAligned(pairs[m].out)) aligned = false;
    }
    // From the first underflow on MulNoAssist; until then bf16 with a large bias table takes the fused form.
    const bool st = stream && aligned;
    const bool fused = fma_from_start;
    const int form = has_scales
                         ? ScaleDotTokenWatched<T, true>(st, watch, fused, g, g_next, pairs, count, end, H, part,
                                                         short_step)
                         : ScaleDotTokenWatched<T, false>(st, watch, fused, g, g_next, pairs, count, end, H, part,
                                                          short_step);
    // Columns [end, H), and the dots summed up.
    for (int64_t m = 0; m < count; ++m) {
      ScaleDotRows<T> q;
      q.g = g;
      q.out = pairs[m].out;
      q.x = pairs[m].x;
      q.b = pairs[m].b;
      if (!has_scales) {
        if (q.out != nullptr && end < H) ScaleRowDot<T>(q, 1.0f, stream, H, end, nullptr, form);
        continue;
      }
      const float dot = ScaleRowDot<T>(q, pairs[m].s, stream, H, end, part[m], form);
      StoreWeight(p.grad_scales, i0 + m, p.weight_dtype, dot);
    }
    // From the first underflowing product on, the products take MulNoAssist (underflow_watch.h).
    watch.Poll();
  }
}

// Every row of gradExpandedX has at most one writer: one pass, token by token, gradY[r] read once for its K
// pairs and each pair's expandedX row once, for both its gradExpandedX row and its gradScales dot; rows nobody
// writes are zeroed by the same threads. Same arithmetic as the CSR path.
template <typename T>
void FinalizeRoutingV2GradOneWriterTyped(const FinalizeRoutingV2GradTask& p) {
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool unit = p.grad_y.col_stride == 1 && p.grad_expanded_x.col_stride == 1 &&
                    (!has_scales || p.expanded_x.col_stride == 1) && (!has_bias || p.bias.col_stride == 1);
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  // Half rows moved in all: the token costs plus one row written per zero row.
  const int64_t moved = (p.token_cost[p.tokens] / 2 + p.zero_rows) * std::max<int64_t>(row_bytes, 1);
  const bool stream = unit && StreamOutput(p.rows * row_bytes, moved);
  const int64_t work = ThreadWork(moved, has_scales, sizeof(T));
  internal::ChunkQueue queue;
  internal::ChunkQueue zero_queue;
  internal::ParallelParts(std::max<int64_t>(1, work / kBytesPerThread), [&](int part, int parts) {
    // Chunks of tokens of about equal cost, taken as each thread finishes its last (ChunkQueue), or, where
    // one token is most of the work (decode sizes), ranges of pairs: a token's pairs then split between
    // threads, each reading the token's gradY row. One watch per thread for all its chunks: an underflow seen
    // in one chunk sets the form of the next.
    UnderflowWatch watch(WatchesUnderflow<T>());
    auto pairs = [&](int64_t i_begin, int64_t i_end) {
      if (unit) {
        FinalizeRoutingV2GradPairsUnit<T>(p, i_begin, i_end, stream, watch);
        return;
      }
      // Strided rows, element by element: the plain multiply until an underflow, then the form the core
      // spares (WithScalarForm, underflow_watch.h).
      for (int64_t i = i_begin; i < i_end; ++i) {
        const T* g = p.grad_y.Row<const T>(i / K);
        const int64_t v = p.row_idx.At<const int32_t>(i);
        T* out = v >= 0 && v < p.rows ? p.grad_expanded_x.Row<T>(v) : nullptr;
        const float s = has_scales ? LoadWeight(p.scales, i, p.weight_dtype) : 1.0f;
        WithScalarForm(watch, [&](auto form) {
          constexpr int kForm = decltype(form)::value;
          if (out != nullptr) ScaleRow<kForm>(g, p.grad_y.col_stride, s, out, p.grad_expanded_x.col_stride, H);
          if (!has_scales) return;
          const T* x = out != nullptr ? p.expanded_x.Row<const T>(v) : nullptr;
          const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(i)) : nullptr;
          const float dot =
              DotRow<kForm>(x, p.expanded_x.col_stride, b, p.bias.col_stride, g, p.grad_y.col_stride, H);
          StoreWeight(p.grad_scales, i, p.weight_dtype, dot);
        });
        watch.Poll();
      }
    };
    if (internal::UnevenTokens(p.heaviest_token_cost, p.token_cost[p.tokens], parts)) {
      int64_t i_begin, i_end;
      internal::Balance211(p.tokens * K, parts, part, &i_begin, &i_end);
      pairs(i_begin, i_end);
    } else {
      queue.TakeRangesByCost(p.tokens, internal::WalkChunks(moved, parts, kChunkBytes),
                             [&](int64_t r) { return p.token_cost[r]; },
                             [&](int64_t r_begin, int64_t r_end) { pairs(r_begin * K, r_end * K); });
    }
    // Then the rows no pair writes, in chunks of rows [v_begin, v_end) taken from a second queue.
    if (p.zero_rows > 0) {
      zero_queue.TakeRanges(p.rows, internal::WalkChunks(p.zero_rows * row_bytes, parts, kChunkBytes),
                            [&](int64_t v_begin, int64_t v_end) {
                              for (int64_t v = v_begin; v < v_end; ++v) {
                                if (p.writer[v] >= 0) continue;
                                T* dst = p.grad_expanded_x.Row<T>(v);
                                if (unit) ZeroRowUnit(dst, H, stream);
                                else ZeroRow(dst, p.grad_expanded_x.col_stride, H);
                              }
                            });
    }
    if (stream) hwy::FlushStream();
  });
}

void FinalizeRoutingV2GradImpl(const FinalizeRoutingV2GradTask& p) {
  WithFloatType(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (p.one_writer) FinalizeRoutingV2GradOneWriterTyped<T>(p);
    else FinalizeRoutingV2GradTyped<T>(p);
  });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunFinalizeRoutingV2Grad, FinalizeRoutingV2GradImpl, FinalizeRoutingV2GradTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
