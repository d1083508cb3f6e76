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
#include "src/backend/cpu/kernels/underflow_watch.h"

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

// The one-pair rows q[0..count) of token row gr (at most kTokenGroup; `pairs` their pair indices) walked
// together (ScaleDotToken, gr read once per step for all of them, g_next prefetched near the end): each row's
// rne(v_i * g) and its dot x_r . g to p.dots. Its products in the form after `watch`.
template <typename T>
HWY_INLINE void PairRowsWithProbs(const Task& p, const T* gr, const T* g_next, TokenPairRows<T>* q,
                                  const int64_t* pairs, int64_t count, bool stream, UnderflowWatch& watch) {
  const int64_t H = p.hidden;
  const bool short_step = ShortTokenStep();
  const int64_t end = H / TokenStep<T>(short_step) * TokenStep<T>(short_step);
  HWY_ALIGN float part[kTokenGroup][16];
  bool aligned = true;
  for (int64_t m = 0; m < count; ++m) aligned = aligned && StreamAligned(q[m].out);
  const bool st = stream && aligned;
  const int form = ScaleDotTokenWatched<T, true>(st, watch, false, gr, g_next, q, count, end, H, part, short_step);
  for (int64_t m = 0; m < count; ++m) {
    ScaleDotRows<T> r;
    r.g = gr;
    r.out = q[m].out;
    r.x = q[m].x;
    p.dots[pairs[m]] = ScaleRowDot<T>(r, q[m].s, stream, H, end, part[m], form);
  }
  // From the first underflowing product on, the products take MulNoAssist (underflow_watch.h).
  watch.Poll();
}

// Rows [begin, end) of permutedTokensGrad with probs: row r = rne(sum over its pairs i, ascending, of
// v_i * unpermutedTokensGrad[t_i]), and for each of those pairs d_i = permutedTokens[r] . unpermutedTokensGrad[t_i]
// (the canonical dot). A unit-stride row with one pair (a permutation's every row) takes the token walk's steps
// on its own (PairRowsWithProbs), both rows read once for both results.
template <typename T>
void RowsWithProbs(const Task& p, int64_t begin, int64_t end, bool stream, UnderflowWatch& watch) {
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
      // The token walk's steps for this one row (x of the next row prefetched near its end).
      TokenPairRows<T> q;
      q.out = dst;
      q.x = xr;
      q.x_next = r + 1 < end ? x.Row<const T>(r + 1) : nullptr;
      q.s = WeightOf(p, pairs[0]);
      PairRowsWithProbs<T>(p, g.Row<const T>(TokenOf(p, pairs[0])), nullptr, &q, pairs, 1, stream, watch);
      continue;
    }
    // Element by element (strided rows, or a row of several pairs): the plain multiply until an underflow,
    // then the form the core spares (WithScalarForm, underflow_watch.h).
    WithScalarForm(watch, [&](auto form) {
      constexpr int kForm = decltype(form)::value;
      SumRowsOf<T, kForm>(
          count,
          [&](int64_t m, float* scale) {
            *scale = WeightOf(p, pairs[m]);
            return g.Row<const T>(TokenOf(p, pairs[m]));
          },
          g.col_stride, dst, out.col_stride, H);
      for (int64_t m = 0; m < count; ++m) {
        const T* gr = g.Row<const T>(TokenOf(p, pairs[m]));
        p.dots[pairs[m]] =
            DotRow<kForm>(xr, x.col_stride, static_cast<const T*>(nullptr), 1, gr, g.col_stride, H);
      }
    });
    watch.Poll();
  }
}

// Tokens [t_begin, t_end) with probs when every row of permutedTokensGrad has exactly one pair (outIndex a
// permutation, as the forward writes it) and every row is unit-stride: the same results as RowsWithProbs, token
// by token. A token's pairs (dropless t*K .. t*K + K - 1, drop-and-pad its token_pairs list) go in groups of at
// most kTokenGroup whose rows walk together (ScaleDotToken): unpermutedTokensGrad[t] is read once per group for
// every pair's row r_i = outIndex[i], rne(v_i * g) and the dot x_r . g. Each group's rows are looked up one group
// ahead, so the next group's rows are prefetched as this one ends.
template <typename T>
void RowsWithProbsByToken(const Task& p, int64_t t_begin, int64_t t_end, bool stream, UnderflowWatch& watch) {
  auto first = [&p](int64_t t) { return p.drop_and_pad ? p.token_offsets[t] : t * p.topk; };
  auto pair_at = [&p](int64_t s) { return p.drop_and_pad ? p.token_pairs[s] : s; };
  struct Group {
    int64_t t, s0, count;
  };
  // The group after slots [s0, s0 + count) of token t: the rest of t's slots, else the next token with pairs.
  auto after = [&](Group g) {
    int64_t t = g.t, s = g.s0 + g.count;
    while (t < t_end && s >= first(t + 1)) {
      ++t;
      s = first(t);
    }
    return Group{t, s, t < t_end ? std::min<int64_t>(kTokenGroup, first(t + 1) - s) : 0};
  };
  auto look_up = [&](Group g, TokenPairRows<T>* q, int64_t* pairs) {
    for (int64_t m = 0; m < g.count; ++m) {
      const int64_t i = pair_at(g.s0 + m);
      const int64_t r = p.out_index.At<const int32_t>(i);
      pairs[m] = i;
      q[m].out = p.permuted_tokens_grad.Row<T>(r);
      q[m].x = p.permuted_tokens.Row<const T>(r);
      q[m].s = WeightOf(p, i);
    }
  };
  TokenPairRows<T> rows[2][kTokenGroup];
  int64_t pairs[2][kTokenGroup];
  int cur = 0;
  Group g = t_begin < t_end ? after(Group{t_begin, first(t_begin), 0}) : Group{t_end, 0, 0};
  look_up(g, rows[cur], pairs[cur]);
  for (; g.t < t_end; cur ^= 1) {
    const Group next = after(g);
    look_up(next, rows[cur ^ 1], pairs[cur ^ 1]);
    const T* gr = p.grad.Row<const T>(g.t);
    const T* g_next = next.count > 0 && next.t != g.t ? p.grad.Row<const T>(next.t) : nullptr;
    TokenPairRows<T>* q = rows[cur];
    for (int64_t m = 0; m < g.count; ++m) q[m].x_next = m < next.count ? rows[cur ^ 1][m].x : nullptr;
    PairRowsWithProbs<T>(p, gr, g_next, q, pairs[cur], g.count, stream, watch);
    g = next;
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
  bool one_pair_rows = has_probs && p.grad.col_stride == 1 && p.permuted_tokens.col_stride == 1 &&
                       p.permuted_tokens_grad.col_stride == 1;
  for (int64_t r = 0; one_pair_rows && r < N; ++r) one_pair_rows = p.row_offsets[r] == r;
  // The token walk reads a token's gradient row once for all its pairs; where one token has most of the pairs
  // (decode sizes, the padding token) its threads would idle, and the row walk (each row on its own, the same
  // arithmetic) splits them evenly.
  const int64_t heaviest = 3 * (p.drop_and_pad ? p.most_token_pairs : p.topk) + 1;
  const int64_t work = ThreadWork(moved, has_probs, sizeof(T));
  // Threads take chunks of tokens or rows of about equal cost as each finishes its last (ChunkQueue).
  internal::ChunkQueue queue;
  internal::ParallelParts(std::max<int64_t>(1, work / kBytesPerThread), [&](int /*part*/, int parts) {
    const int64_t chunks = internal::WalkChunks(moved, parts, kChunkBytes);
    // One watch per thread for all its chunks: an underflow seen in one chunk sets the form of the next.
    UnderflowWatch watch(WatchesUnderflow<T>());
    if (one_pair_rows && !internal::UnevenTokens(heaviest, 3 * N + p.tokens, parts)) {
      // A token costs its pairs' three rows (x in, out written, and the gradient row) and its own.
      queue.TakeRangesByCost(
          p.tokens, chunks, [&](int64_t t) { return 3 * (p.drop_and_pad ? p.token_offsets[t] : t * p.topk) + t; },
          [&](int64_t begin, int64_t end) { RowsWithProbsByToken<T>(p, begin, end, stream, watch); });
      if (stream) hwy::FlushStream();
      return;
    }
    queue.TakeRangesByCost(N, chunks, [&](int64_t r) { return p.row_offsets[r] + r; }, [&](int64_t begin, int64_t end) {
      if (has_probs) {
        RowsWithProbs<T>(p, begin, end, stream, watch);
      } else {
        GatherSums<T>(
            p.grad, p.permuted_tokens_grad, H, begin, end,
            [&](int64_t r) { return p.row_offsets[r + 1] - p.row_offsets[r]; },
            [&](int64_t r, int64_t m) { return TokenOf(p, p.row_pairs[p.row_offsets[r] + m]); }, stream);
      }
    });
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
