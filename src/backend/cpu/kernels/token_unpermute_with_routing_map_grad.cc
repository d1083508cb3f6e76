// MoeTokenUnpermuteWithRoutingMapGrad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/token_unpermute_with_routing_map_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include <algorithm>

#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_gather_sum-inl.h"
#include "src/backend/cpu/kernels/row_ops_scale_dot-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/token_unpermute_with_routing_map_grad.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

using Task = TokenUnpermuteWithRoutingMapGradTask;

// t_i: i / K in dropless mode (permuteTokenId is not read there), permuteTokenId[i] in drop-and-pad mode.
HWY_INLINE int64_t TokenOf(const Task& p, int64_t i) {
  return p.drop_and_pad ? int64_t{p.permute_token_id.At<const int32_t>(i)} : i / p.topk;
}
// e_i: the (i % K)-th routed expert of t_i (dropless, listed by the backend) or r_i / C (drop-and-pad).
HWY_INLINE int64_t ExpertOf(const Task& p, int64_t i) {
  return p.drop_and_pad ? int64_t{p.out_index.At<const int32_t>(i)} / p.capacity : int64_t{p.pair_experts[i]};
}
// v_i = probs[t_i][e_i].
HWY_INLINE float WeightOf(const Task& p, int64_t i) {
  return LoadWeight(p.probs, TokenOf(p, i) * p.experts + ExpertOf(p, i), p.weight_dtype);
}

// Rows [begin, end) of permutedTokensGrad with probs: row r = rne(sum over its pairs i, ascending, of
// v_i * unpermutedTokensGrad[t_i]), and for each of those pairs d_i = permutedTokens[r] . unpermutedTokensGrad[t_i]
// (the canonical dot). A row with one pair (a permutation's every row) reads both rows once for both results.
template <typename T>
void RowsWithProbs(const Task& p, int64_t begin, int64_t end, bool stream) {
  const int64_t H = p.hidden;
  const RowView& g = p.grad;
  const RowView& x = p.permuted_tokens;
  const RowView& out = p.permuted_tokens_grad;
  const bool unit = g.col_stride == 1 && x.col_stride == 1 && out.col_stride == 1;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t* pairs = p.row_pairs + p.row_offsets[r];
    const int64_t count = p.row_offsets[r + 1] - p.row_offsets[r];
    T* dst = out.Row<T>(r);
    const T* xr = x.Row<const T>(r);
    if (count == 1 && unit) {
      const int64_t i = pairs[0];
      ScaleDotRows<T> rows;
      rows.g = g.Row<const T>(TokenOf(p, i));
      rows.out = dst;
      rows.x = xr;
      p.dots[i] = ScaleRowDot(rows, WeightOf(p, i), stream, H);
      continue;
    }
    SumRowsOf<T>(
        count,
        [&](int64_t m, float* scale) {
          *scale = WeightOf(p, pairs[m]);
          return g.Row<const T>(TokenOf(p, pairs[m]));
        },
        g.col_stride, dst, out.col_stride, H);
    for (int64_t m = 0; m < count; ++m) {
      const T* gr = g.Row<const T>(TokenOf(p, pairs[m]));
      p.dots[pairs[m]] = DotRow(xr, x.col_stride, static_cast<const T*>(nullptr), 1, gr, g.col_stride, H);
    }
  }
}

// probsGrad rows [begin, end): entry (t, e) sums the d_i of the pairs with (t_i, e_i) == (t, e) in ascending i,
// from the first, rounded once; +0 where there are none. Dropless: token t's pairs t*K .. t*K + K - 1 have
// distinct experts. Drop-and-pad: token t's pair list is ordered by (e_i, i), so each entry's terms are adjacent.
template <typename W>
void ProbsRows(const Task& p, int64_t begin, int64_t end) {
  const int64_t E = p.experts;
  const int64_t es = p.probs_grad.col_stride;
  for (int64_t t = begin; t < end; ++t) {
    W* dst = p.probs_grad.Row<W>(t);
    ZeroRow(dst, es, E);
    if (!p.drop_and_pad) {
      for (int64_t i = t * p.topk; i < (t + 1) * p.topk; ++i) dst[p.pair_experts[i] * es] = FromF32<W>(p.dots[i]);
      continue;
    }
    int64_t* list = p.token_pairs + p.token_offsets[t];
    const int64_t count = p.token_offsets[t + 1] - p.token_offsets[t];
    std::sort(list, list + count, [&p](int64_t a, int64_t b) {
      const int64_t ea = ExpertOf(p, a), eb = ExpertOf(p, b);
      return ea != eb ? ea < eb : a < b;
    });
    for (int64_t m = 0; m < count;) {
      const int64_t e = ExpertOf(p, list[m]);
      float acc = p.dots[list[m]];
      for (++m; m < count && ExpertOf(p, list[m]) == e; ++m) acc += p.dots[list[m]];
      dst[e * es] = FromF32<W>(acc);
    }
  }
}

template <typename T>
void TokenUnpermuteWithRoutingMapGradTyped(const Task& p) {
  const int64_t N = p.rows;
  const int64_t H = p.hidden;
  const bool has_probs = p.probs_grad.data != nullptr;
  // Each row moves its pairs' gradient rows, with probs its permutedTokens row, and its own output row.
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const int64_t moved = (N * (has_probs ? 3 : 2)) * row_bytes;
  const bool stream = StreamOutput(N * row_bytes, moved);
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    int64_t begin, end;
    internal::BalanceByCost(N, parts, part, [&](int64_t r) { return p.row_offsets[r] + r; }, &begin, &end);
    if (has_probs) {
      RowsWithProbs<T>(p, begin, end, stream);
    } else {
      GatherSums<T>(
          p.grad, p.permuted_tokens_grad, H, begin, end,
          [&](int64_t r) { return p.row_offsets[r + 1] - p.row_offsets[r]; },
          [&](int64_t r, int64_t m) { return TokenOf(p, p.row_pairs[p.row_offsets[r] + m]); }, stream);
    }
    if (stream) hwy::FlushStream();
  });
  if (!has_probs) return;
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / std::max<int64_t>(1, p.experts * 16));
  internal::ParallelFor(0, p.tokens, grain, [&](int64_t begin, int64_t end) {
    WithFloatType(p.weight_dtype, [&](auto w) { ProbsRows<decltype(w)>(p, begin, end); });
  });
}

void TokenUnpermuteWithRoutingMapGradImpl(const Task& p) {
  WithFloatType(p.dtype, [&](auto zero) { TokenUnpermuteWithRoutingMapGradTyped<decltype(zero)>(p); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunTokenUnpermuteWithRoutingMapGrad, TokenUnpermuteWithRoutingMapGradImpl,
                     TokenUnpermuteWithRoutingMapGradTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
