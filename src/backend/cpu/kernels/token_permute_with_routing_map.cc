// MoeTokenPermuteWithRoutingMap row copies. Unlike the arithmetic kernels these are not compiled per SIMD
// target: rows are copied bit for bit (no widening or rounding), with memcpy or, for large outputs, 16-byte
// streaming stores (baseline x86-64; row_copy.h). The index passes, which read the routing map in vectors, are
// in token_permute_with_routing_map_index.cc.
#include "src/backend/cpu/kernels/token_permute_with_routing_map.h"

#include <algorithm>
#include <cstdint>

#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/kernels/row_copy.h"
#include "src/backend/cpu/parallel.h"

namespace moegrad::kernels {
namespace {

// permuteProbs[q] = probs[t][e], moved as an unsigned integer W of the probs' width.
template <typename W>
HWY_INLINE void CopyProb(const TokenPermuteWithRoutingMapTask& p, int64_t q, int64_t t, int64_t e) {
  p.dst_probs.At<W>(q) = reinterpret_cast<const W*>(p.probs)[t * p.probs_row_stride + e * p.probs_col_stride];
}

// Elements are moved as unsigned integers of their width: the one dtype switch of this operator's token rows.
template <typename T>
void TokenPermuteWithRoutingMapRowsTyped(const TokenPermuteWithRoutingMapTask& p,
                                         const TokenPermuteWithRoutingMapScratch& s) {
  const int64_t H = p.hidden;
  const int64_t E = p.experts;
  const int64_t K = p.topk;
  const int64_t N = p.out_rows;
  const bool with_probs = p.dst_probs.data != nullptr;
  const int64_t copy_bytes = H * static_cast<int64_t>(sizeof(T));
  const bool unit = p.src_tokens.col_stride == 1 && p.dst_tokens.col_stride == 1;
  const bool stream = unit && StreamOutput(N * copy_bytes, (N + p.tokens) * copy_bytes);
  // The permuted rows each token is copied to: dropless, rows sortedIndices[t * K + k] (written by
  // PermuteIndices); drop-and-pad, the slots q with src[q] == t, from an inverse index (counting sort).
  // The heaviest token costs its own row and the rows it is copied to.
  int64_t heaviest = K + 1;
  if (p.drop_and_pad) {
    heaviest = 1 + internal::BuildInverseIndex(
                       p.tokens, N, [&](int64_t q) { return int64_t{s.src[q]}; }, s.token_offsets, s.token_slots);
  }
  auto row_of = [&](int64_t t, int64_t m) -> int64_t {
    return p.drop_and_pad ? s.token_slots[s.token_offsets[t] + m] : p.sorted_indices.At<const int32_t>(t * K + m);
  };
  const int64_t moved = (N + p.tokens) * std::max<int64_t>(1, copy_bytes);
  internal::ChunkQueue queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    // Permuted probs and (drop-and-pad) sortedIndices: this part's rows [q0, q1) (drop-and-pad probs: the
    // slots at inverse-index positions [q0, q1)). Drop-and-pad rows come in blocks of C experts; dropless
    // experts own [starts[e], starts[e + 1]), some of them empty.
    int64_t q0, q1;
    internal::Balance211(N, parts, part, &q0, &q1);
    // Probs have their own width (their dtype is independent of the tokens'); one branch per element.
    auto copy_prob = [&](int64_t q, int64_t t, int64_t e) {
      if (p.weight_element_bytes == 2) CopyProb<uint16_t>(p, q, t, e);
      else CopyProb<uint32_t>(p, q, t, e);
    };
    if (p.drop_and_pad) {
      for (int64_t q = q0; q < q1; ++q) p.sorted_indices.At<int32_t>(q) = s.src[q];
      // Probs token by token through the inverse index (C <= T: every slot holds a token), positions [q0, q1):
      // each token's probs row front to back, where slot order reads one element of a random row per slot.
      if (with_probs && q0 < q1) {
        int64_t t = internal::KeyOfPosition(s.token_offsets, p.tokens, q0);
        for (int64_t i = q0; i < q1; ++i) {
          while (s.token_offsets[t + 1] <= i) ++t;
          const int64_t q = s.token_slots[i];
          copy_prob(q, t, q / p.capacity);
        }
      }
    } else if (with_probs && q0 < q1) {
      int64_t e = std::upper_bound(s.starts, s.starts + E + 1, q0) - s.starts - 1;
      for (int64_t q = q0; q < q1; ++q) {
        while (q >= s.starts[e + 1]) ++e;
        copy_prob(q, s.src[q], e);
      }
    }
    // Permuted token rows in token order: each token row is read once and written to all its rows. Chunks of
    // tokens of about equal rows moved (the token's own row plus those it is copied to), taken as each thread
    // finishes its last (ChunkQueue); where one token is copied to more rows than a part's share (drop-and-pad
    // at decode sizes), equal shares of the (token, row) positions instead, whole rows each: a token's rows
    // then split between threads, each of which reads the token's row. Whole rows rather than columns of every
    // row, which made every thread walk the pages of every destination row (a TLB miss and a prefetcher
    // restart each): DeepSeek-V3's one-token drop-and-pad bf16 call at 64% of copy rather than 26%
    // (docs/performance.md, "Decode sizes and the token sweep on Zen 4").
    constexpr int64_t kMaxDsts = 64;
    char* dsts[kMaxDsts];
    // The first position of token t's rows (row m of token t is position first(t) + m).
    auto first = [&](int64_t t) { return p.drop_and_pad ? s.token_offsets[t] : t * K; };
    // Rows [m_begin, m_end) of token t; with streaming stores, `next` (the next token row to be read, or null)
    // is prefetched during them (plain stores leave it to the hardware: a prefetch there measured the same).
    auto copy_rows = [&](int64_t t, int64_t m_begin, int64_t m_end, const T* next) {
      const T* src = p.src_tokens.Row<const T>(t);
      if (!stream) {
        for (int64_t m = m_begin; m < m_end; ++m) {
          CopyRow<T>(src, p.src_tokens.col_stride, p.dst_tokens.Row<T>(row_of(t, m)), p.dst_tokens.col_stride, H);
        }
        return;
      }
      // Destinations a batch at a time; a row that does not start on 16 bytes is copied with memcpy.
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kMaxDsts) {
        int64_t n = 0;
        for (int64_t m = m0; m < std::min(m_end, m0 + kMaxDsts); ++m) {
          T* dst = p.dst_tokens.Row<T>(row_of(t, m));
          if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) dsts[n++] = reinterpret_cast<char*>(dst);
          else CopyRow<T>(src, 1, dst, 1, H);
        }
        StreamCopyToMany(reinterpret_cast<const char*>(src),
                         m0 + kMaxDsts >= m_end ? reinterpret_cast<const char*>(next) : nullptr, dsts, n, copy_bytes);
      }
    };
    // The rows of positions [i0, i1), token by token. A token no expert takes (drop-and-pad) has no positions
    // and is not read; the row prefetched during a token's copies is the next token that is.
    auto copy_positions = [&](int64_t i0, int64_t i1) {
      if (i0 >= i1) return;
      int64_t t = p.drop_and_pad ? internal::KeyOfPosition(s.token_offsets, p.tokens, i0) : i0 / K;
      for (int64_t i = i0; i < i1; ++t) {
        const int64_t end = std::min(i1, first(t + 1));
        if (end <= i) continue;
        const T* next = nullptr;
        if (stream && end < i1) {
          int64_t t_next = t + 1;
          while (t_next < p.tokens && first(t_next + 1) == first(t_next)) ++t_next;
          next = p.src_tokens.Row<const T>(t_next);
        }
        copy_rows(t, i - first(t), end - first(t), next);
        i = end;
      }
    };
    if (internal::UnevenTokens(heaviest, N + p.tokens, parts, /*per_share=*/1)) {
      int64_t i0, i1;
      internal::Balance211(first(p.tokens), parts, part, &i0, &i1);
      copy_positions(i0, i1);
    } else {
      queue.TakeRangesByCost(
          p.tokens, internal::WalkChunks(moved, parts, kChunkBytes),
          [&](int64_t t) { return p.drop_and_pad ? s.token_offsets[t] + t : t * (K + 1); },
          [&](int64_t t0, int64_t t1) { copy_positions(first(t0), first(t1)); });
    }
    if (stream) FlushStreams();
  });
}

}  // namespace

void PermuteRows(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s) {
  if (p.element_bytes == 2) return TokenPermuteWithRoutingMapRowsTyped<uint16_t>(p, s);
  return TokenPermuteWithRoutingMapRowsTyped<uint32_t>(p, s);
}

}  // namespace moegrad::kernels
