// MoeTokenUnpermuteWithRoutingMap kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/token_unpermute_with_routing_map.cc"
#include <algorithm>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_gather_sum-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/row_ops_terms-inl.h"
#include "src/backend/cpu/kernels/token_unpermute_with_routing_map.h"
#include "src/backend/cpu/kernels/underflow_watch.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// Token rows [begin, end): row t = rne(sum over its contributions m = 0..count_of(t) - 1, ascending q, of
// w(q) * permuted[row(q)]), with q = q_of(t, m). Without probs every w is 1 and the multiply is exact: the
// gather sums of the permute gradient. With probs SumRowsOf multiplies each term by its fp32 weight (0 and 1
// too) and adds left to right from the first term.
template <typename T, typename CountOf, typename QOf>
void UnpermuteRows(const TokenUnpermuteWithRoutingMapTask& p, int64_t begin, int64_t end, const CountOf& count_of,
                   const QOf& q_of, bool stream, UnderflowWatch& watch) {
  const int64_t H = p.hidden;
  auto row_of_q = [&](int64_t q) -> int64_t {
    return p.padded_mode ? q : int64_t{p.sorted_indices.At<const int32_t>(q)};
  };
  if (p.weights == nullptr) {
    GatherSums<T>(
        p.permuted, p.unpermuted, H, begin, end, count_of, [&](int64_t t, int64_t m) { return row_of_q(q_of(t, m)); },
        stream);
    return;
  }
  if (p.permuted.col_stride != 1 || p.unpermuted.col_stride != 1) {
    // Strided rows, element by element: the plain multiply until an underflow, then the form the core spares
    // (WithScalarForm, underflow_watch.h).
    for (int64_t t = begin; t < end; ++t) {
      WithScalarForm(watch, [&](auto form) {
        SumRowsOf<T, decltype(form)::value>(
            count_of(t),
            [&](int64_t m, float* scale) {
              const int64_t q = q_of(t, m);
              *scale = p.weights[q];
              return p.permuted.Row<const T>(row_of_q(q));
            },
            p.permuted.col_stride, p.unpermuted.Row<T>(t), p.unpermuted.col_stride, H);
      });
      watch.Poll();
    }
    return;
  }
  // Unit-stride rows: a token of at most kGroup contributions is one SumTermsUnit (every term w * x, one fp32
  // multiply, added left to right from the first: SumRowsOf's arithmetic), its rows read side by side and the
  // next token's prefetched; its terms are collected a token ahead. More contributions (the pad mode's padding
  // tokens, which collect the slack of every under-filled expert): groups of up to kGroup whole rows (sum_many)
  // through an fp32 row on the stack (up to kAccColumns columns), else tiles of kTile columns, kGroup rows at a
  // time into the tile's fp32 sums (AddGroup). The same additions in the same order either way.
  // The products take the fused form until an underflow is seen, then MulNoAssist, or still the fused
  // form where the core spares it (TermsNoAssist, underflow_watch.h).
  constexpr int64_t kAccColumns = 16384;
  auto sum_tiles = [&](int64_t t) {
    const int64_t c = count_of(t);
    T* dst = p.unpermuted.Row<T>(t);
    HWY_ALIGN float acc[kTile];
    Term<T> group[kGroup];
    for (int64_t j0 = 0; j0 < H; j0 += kTile) {
      const int64_t n = std::min(kTile, H - j0);
      for (int64_t m0 = 0; m0 < c; m0 += kGroup) {
        const int count = static_cast<int>(std::min<int64_t>(kGroup, c - m0));
        for (int m = 0; m < count; ++m) {
          const int64_t q = q_of(t, m0 + m);
          group[m] = {p.permuted.Row<const T>(row_of_q(q)) + j0, 1, nullptr, 0, p.weights[q], true};
        }
        WithScalarForm(watch, [&](auto form) {
          AddGroup<decltype(form)::value>(group, count, m0 == 0, m0 + count == c, acc, dst + j0, 1, n, true);
        });
        watch.Poll();  // a token of many terms switches within the token, not after it
      }
    }
  };
  auto term_of = [&](int64_t q) -> Term<T> {
    return {p.permuted.Row<const T>(row_of_q(q)), 1, nullptr, 0, p.weights[q], true};
  };
  // A token of more than kGroup contributions, whole rows; next / next_count: the next token's first terms.
  // A group takes up to kGroup terms, but at most kSameSetRows whose rows start at the same cache line of a
  // 4 KiB page: rows a multiple of 4 KiB apart (DeepSeek-V3's 28 KiB fp32 rows, every slot of the one token at
  // decode sizes) put each column of all of them in one L1 set, and more of them than the set has ways evict
  // each other's lines between the walk's steps. The group sizes change no bit (the sums go through acc in the
  // same order whatever the groups).
  constexpr int kSameSetRows = 8;
  auto sum_many = [&](int64_t t, const Term<T>* next, int next_count) {
    if (H > kAccColumns) return sum_tiles(t);
    const int64_t c = count_of(t);
    T* dst = p.unpermuted.Row<T>(t);
    HWY_ALIGN float acc[kAccColumns];
    // The group from contribution m on, to out; returns its size.
    auto fill = [&](int64_t m, Term<T>* out) {
      uint8_t at_line[64] = {};
      int n = 0;
      for (; n < kGroup && m + n < c; ++n) {
        const Term<T> term = term_of(q_of(t, m + n));
        uint8_t& rows = at_line[(reinterpret_cast<uintptr_t>(term.x) >> 6) & 63];
        if (rows == kSameSetRows) break;
        ++rows;
        out[n] = term;
      }
      return n;
    };
    Term<T> group[2][kGroup];
    int sizes[2];
    int cur = 0;
    sizes[cur] = fill(0, group[cur]);
    for (int64_t m0 = 0; m0 < c; m0 += sizes[cur], cur ^= 1) {
      const int count = sizes[cur];
      const int64_t m1 = m0 + count;  // the next group
      const int following = sizes[cur ^ 1] = m1 < c ? fill(m1, group[cur ^ 1]) : 0;
      const Term<T>* ahead = following > 0 ? group[cur ^ 1] : next;
      const int ahead_count = following > 0 ? following : next_count;
      if (m0 == 0 && ProbesRow<T>(watch, H)) {
        // The token's first columns in the fused form, then the rest in the form the watch gives: a padding
        // token first in a thread's share would otherwise take the slow path for its whole first group.
        constexpr int64_t kProbe = kTermProbeBytes / static_cast<int64_t>(sizeof(T));
        SumTermsUnit<T, false, false, true, kFused>(group[cur], count, nullptr, 0, dst, kProbe, acc);
        watch.Poll();
        Term<T> rest[kGroup];
        TermsFrom(group[cur], count, kProbe, rest);
        WithTermForm(TermsNoAssist(watch), [&](auto form) {
          SumTermsUnit<T, false, false, true, decltype(form)::value>(rest, count, ahead, ahead_count, dst + kProbe,
                                                                     H - kProbe, acc + kProbe);
        });
        watch.Poll();
        continue;
      }
      WithTermForm(TermsNoAssist(watch), [&](auto form) {
        constexpr int kForm = decltype(form)::value;
        if (m0 == 0) {
          SumTermsUnit<T, false, false, true, kForm>(group[cur], count, ahead, ahead_count, dst, H, acc);
        } else if (following > 0) {
          SumTermsUnit<T, false, true, true, kForm>(group[cur], count, ahead, ahead_count, dst, H, acc);
        } else if (CanStream<T>() && stream && StreamAligned(dst)) {
          SumTermsUnit<T, CanStream<T>(), true, false, kForm>(group[cur], count, ahead, ahead_count, dst, H, acc);
        } else {
          SumTermsUnit<T, false, true, false, kForm>(group[cur], count, ahead, ahead_count, dst, H, acc);
        }
      });
      watch.Poll();  // a token of many terms (the pad mode's padding tokens) switches within the token
    }
  };
  Term<T> terms[2][kGroup];
  int counts[2] = {0, 0};
  auto collect = [&](int64_t t, Term<T>* out) -> int {
    const int64_t c = count_of(t);
    if (c > kGroup) return -1;
    for (int64_t m = 0; m < c; ++m) {
      const int64_t q = q_of(t, m);
      out[m] = {p.permuted.Row<const T>(row_of_q(q)), 1, nullptr, 0, p.weights[q], true};
    }
    return static_cast<int>(c);
  };
  int cur = 0;
  if (begin < end) counts[cur] = collect(begin, terms[cur]);
  for (int64_t t = begin; t < end; ++t) {
    counts[cur ^ 1] = t + 1 < end ? collect(t + 1, terms[cur ^ 1]) : 0;
    const int next = std::max(counts[cur ^ 1], 0);
    T* dst = p.unpermuted.Row<T>(t);
    if (counts[cur] < 0) {
      sum_many(t, terms[cur ^ 1], next);
      watch.Poll();
    } else {
      SumTermsRowWatched<T>(watch, t == begin, stream, terms[cur], counts[cur], terms[cur ^ 1], next, dst, H);
    }
    cur ^= 1;
  }
}

// outIndex and permuteTokenId at [begin, end): the contributions ordered by token (pad: the inverse index,
// dropless: q itself); permuteProbs[q] = probs[tok(q)][expert(q)] bit for bit, for the q listed there (pad:
// the slots at those positions, dropless: [begin, end)).
template <typename W>
void WriteIndices(const TokenUnpermuteWithRoutingMapTask& p, int64_t begin, int64_t end) {
  const bool probs = p.permute_probs.data != nullptr;
  if (p.padded_mode) {
    // The token of position i, walked forward from a binary search.
    int64_t t = begin < end ? internal::KeyOfPosition(p.offsets, p.tokens, begin) : 0;
    // permuteProbs[slot] in token order too: token t's probs row front to back, not a random row per slot.
    for (int64_t i = begin; i < end; ++i) {
      while (p.offsets[t + 1] <= i) ++t;
      const int64_t slot = p.slots[i];
      p.out_index.At<int32_t>(i) = static_cast<int32_t>(slot);
      p.permute_token_id.At<int32_t>(i) = static_cast<int32_t>(t);
      if (probs) p.permute_probs.At<W>(slot) = p.probs.Row<const W>(t)[p.experts[slot] * p.probs.col_stride];
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    p.out_index.At<int32_t>(i) = p.sorted_indices.At<const int32_t>(i);
    p.permute_token_id.At<int32_t>(i) = static_cast<int32_t>(i / p.topk);
  }
  if (!probs) return;
  for (int64_t q = begin; q < end; ++q) {
    p.permute_probs.At<W>(q) = p.probs.Row<const W>(q / p.topk)[p.experts[q] * p.probs.col_stride];
  }
}

template <typename T>
void UnpermuteTyped(const TokenUnpermuteWithRoutingMapTask& p) {
  const int64_t H = p.hidden;
  const int64_t N = p.rows;
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const int64_t moved = (N + p.tokens) * row_bytes;
  const bool stream = StreamOutput(p.tokens * row_bytes, moved);
  // Threads take chunks of tokens of about equal rows moved (the rows a token gathers plus its own) as each
  // finishes its last (ChunkQueue), then chunks of the index outputs from a second queue. In the pad mode a token can
  // gather most of the rows (one token at decode sizes, the padding token): then every thread takes a range
  // of columns of every token instead.
  const int64_t heaviest = p.most_slots + 1;
  internal::ChunkQueue queue;
  internal::ChunkQueue index_queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    const int64_t chunks = internal::WalkChunks(moved, parts, kChunkBytes);
    // One watch per thread for all its chunks: an underflow seen in one chunk sets the form of the next.
    UnderflowWatch watch(WatchesUnderflow<T>());
    if (p.padded_mode) {
      auto count_of = [&](int64_t t) { return p.offsets[t + 1] - p.offsets[t]; };
      auto q_of = [&](int64_t t, int64_t m) { return p.slots[p.offsets[t] + m]; };
      if (internal::UnevenTokens(heaviest, N + p.tokens, parts)) {
        int64_t j0, j1;
        internal::BalanceColumns(H, sizeof(T), parts, part, &j0, &j1);
        TokenUnpermuteWithRoutingMapTask columns = p;
        columns.permuted = p.permuted.FromColumn<T>(j0);
        columns.unpermuted = p.unpermuted.FromColumn<T>(j0);
        columns.hidden = j1 - j0;
        if (j0 < j1) UnpermuteRows<T>(columns, 0, p.tokens, count_of, q_of, stream, watch);
      } else {
        queue.TakeRangesByCost(
            p.tokens, chunks, [&](int64_t t) { return p.offsets[t] + t; },
            [&](int64_t begin, int64_t end) { UnpermuteRows<T>(p, begin, end, count_of, q_of, stream, watch); });
      }
    } else {
      const int64_t K = p.topk;
      queue.TakeRanges(p.tokens, chunks, [&](int64_t begin, int64_t end) {
        UnpermuteRows<T>(
            p, begin, end, [&](int64_t) { return K; }, [&](int64_t t, int64_t m) { return t * K + m; }, stream,
            watch);
      });
    }
    if (stream) hwy::FlushStream();
    WithFloatType(p.weight_dtype, [&](auto w) {
      index_queue.TakeRanges(N, internal::TailChunks(parts),
                             [&](int64_t i_begin, int64_t i_end) { WriteIndices<decltype(w)>(p, i_begin, i_end); });
    });
  });
}

void TokenUnpermuteWithRoutingMapImpl(const TokenUnpermuteWithRoutingMapTask& p) {
  WithFloatType(p.dtype, [&](auto zero) { UnpermuteTyped<decltype(zero)>(p); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunTokenUnpermuteWithRoutingMap, TokenUnpermuteWithRoutingMapImpl,
                     TokenUnpermuteWithRoutingMapTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
