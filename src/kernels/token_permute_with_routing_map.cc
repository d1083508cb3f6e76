// MoeTokenPermuteWithRoutingMap kernels. Unlike the arithmetic kernels these are not compiled per SIMD
// target: rows are copied bit for bit (no widening or rounding), with memcpy or, for large outputs, 16-byte
// streaming stores (baseline x86-64), and the index passes are integer counting.
#include "src/kernels/token_permute_with_routing_map.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "src/core/inverse_index.h"
#include "src/core/parallel.h"

namespace moegrad::kernels {
namespace {

void BlockRange(const PermuteProblem& p, int64_t b, int64_t* t0, int64_t* t1) {
  *t0 = b * p.block_tokens;
  *t1 = std::min(p.tokens, *t0 + p.block_tokens);
}

const uint8_t* MapRow(const PermuteProblem& p, int64_t t) { return p.map + t * p.map_row_stride; }

template <typename T>
void CopyRow(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t n) {
  if (src_stride == 1 && dst_stride == 1) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  for (int64_t j = 0; j < n; ++j) dst[j * dst_stride] = src[j * src_stride];
}

// How far ahead of the loads the source rows are prefetched.
constexpr int64_t kPrefetchBytes = 1024;

// Makes this thread's streaming stores visible to every other thread (they are weakly ordered).
void FlushStreams() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_sfence();
#endif
}

// Copies one source row to each of `count` destination rows of `bytes` bytes (16-byte aligned): the source is
// read from memory once and then from the cache, every destination written with streaming stores. While
// the copies run, `next` (the next token's row, or null) is prefetched a slice per copy, so that it is in the
// cache when its own copies start.
void StreamCopyToMany(const char* src, const char* next, char* const* dsts, int64_t count, int64_t bytes) {
#if defined(__x86_64__) || defined(_M_X64)
  const int64_t lines = bytes / 64;
  for (int64_t m = 0; m < count; ++m) {
    char* dst = dsts[m];
    // Copy m prefetches lines [m * lines / count, (m + 1) * lines / count) of next, one per 64 bytes copied.
    int64_t pf = m * lines / count;
    const int64_t pf_end = (m + 1) * lines / count;
    int64_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      if (m == 0 && i + kPrefetchBytes < bytes) _mm_prefetch(src + i + kPrefetchBytes, _MM_HINT_T0);
      if (next != nullptr && pf < pf_end) _mm_prefetch(next + 64 * pf++, _MM_HINT_T0);
      const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), v0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), v1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), v2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), v3);
    }
    if (i < bytes) std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
  }
#else
  (void)next;
  for (int64_t m = 0; m < count; ++m) std::memcpy(dsts[m], src, static_cast<size_t>(bytes));
#endif
}

// Elements are moved as unsigned integers of their width: the one dtype switch of this operator.
template <typename T>
void RowsTyped(const PermuteProblem& p, const PermuteScratch& s) {
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
  if (p.drop_and_pad) {
    internal::BuildInverseIndex(
        p.tokens, N, [&](int64_t q) { return int64_t{s.src[q]}; }, s.token_offsets, s.token_slots);
  }
  auto count_of = [&](int64_t t) { return p.drop_and_pad ? s.token_offsets[t + 1] - s.token_offsets[t] : K; };
  auto row_of = [&](int64_t t, int64_t m) -> int64_t {
    return p.drop_and_pad ? s.token_slots[s.token_offsets[t] + m] : p.sorted_indices.At<const int32_t>(t * K + m);
  };
  const int64_t moved = (N + p.tokens) * std::max<int64_t>(1, copy_bytes);
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    // Permuted probs and (drop-and-pad) sortedIndices, in permuted-row order: this part's rows [q0, q1).
    int64_t q0, q1;
    internal::Balance211(N, parts, part, &q0, &q1);
    // Expert of the first row: drop-and-pad rows come in blocks of C; dropless experts own
    // [starts[e], starts[e + 1]), some of them empty.
    int64_t e = 0;
    if (!p.drop_and_pad && with_probs && q0 < q1) e = std::upper_bound(s.starts, s.starts + E + 1, q0) - s.starts - 1;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t t = s.src[q];
      if (p.drop_and_pad) p.sorted_indices.At<int32_t>(q) = static_cast<int32_t>(t);
      if (!with_probs) continue;
      if (p.drop_and_pad) {
        e = q / p.capacity;
      } else {
        while (q >= s.starts[e + 1]) ++e;
      }
      const T* src = reinterpret_cast<const T*>(p.probs) + t * p.probs_row_stride + e * p.probs_col_stride;
      p.dst_probs.At<T>(q) = *src;
    }
    // Permuted token rows in token order: each token row is read once and written to all its rows. Tokens
    // [t0, t1) of about equal rows moved (the token's own row plus those it is copied to).
    int64_t t0, t1;
    internal::BalanceByCost(
        p.tokens, parts, part, [&](int64_t t) { return p.drop_and_pad ? s.token_offsets[t] + t : t * (K + 1); },
        &t0, &t1);
    constexpr int64_t kMaxDsts = 64;
    char* dsts[kMaxDsts];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t count = count_of(t);
      const T* src = p.src_tokens.Row<const T>(t);
      if (!stream) {
        for (int64_t m = 0; m < count; ++m) {
          CopyRow<T>(src, p.src_tokens.col_stride, p.dst_tokens.Row<T>(row_of(t, m)), p.dst_tokens.col_stride, H);
        }
        continue;
      }
      const char* next = t + 1 < t1 ? reinterpret_cast<const char*>(p.src_tokens.Row<const T>(t + 1)) : nullptr;
      // Destinations a batch at a time; a row that does not start on 16 bytes is copied with memcpy.
      for (int64_t m0 = 0; m0 < count; m0 += kMaxDsts) {
        int64_t n = 0;
        for (int64_t m = m0; m < std::min(count, m0 + kMaxDsts); ++m) {
          T* dst = p.dst_tokens.Row<T>(row_of(t, m));
          if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) dsts[n++] = reinterpret_cast<char*>(dst);
          else CopyRow<T>(src, 1, dst, 1, H);
        }
        StreamCopyToMany(reinterpret_cast<const char*>(src), m0 + kMaxDsts >= count ? next : nullptr, dsts, n,
                         copy_bytes);
      }
    }
    if (stream) FlushStreams();
  });
}

}  // namespace

namespace {

// The routing map with unit column stride, 16 bytes at a time (SSE2, the x86-64 baseline).

// count[e] += the rows t in [t0, t1) routed to expert e: byte counters in registers, 255 rows and 256
// experts at a time. Experts past the last multiple of 16 are counted one by one.
void CountRoutedUnit(const PermuteProblem& p, int64_t t0, int64_t t1, int64_t* count) {
  const int64_t E = p.experts;
  int64_t e_vec = 0;
#if defined(__x86_64__) || defined(_M_X64)
  e_vec = E / 16 * 16;
  const __m128i zero = _mm_setzero_si128();
  const __m128i ones = _mm_set1_epi8(-1);
  alignas(16) uint8_t part[256];
  for (int64_t e0 = 0; e0 < e_vec; e0 += 256) {
    const int64_t vecs = std::min<int64_t>(256, e_vec - e0) / 16;
    for (int64_t r0 = t0; r0 < t1; r0 += 255) {
      const int64_t r1 = std::min(t1, r0 + 255);
      __m128i c[16];
      for (int64_t v = 0; v < vecs; ++v) c[v] = zero;
      for (int64_t t = r0; t < r1; ++t) {
        const uint8_t* row = MapRow(p, t) + e0;
        for (int64_t v = 0; v < vecs; ++v) {
          // A routed byte compares unequal to zero: ~(x == 0) is all ones (-1), so subtracting it adds one.
          const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * v));
          c[v] = _mm_sub_epi8(c[v], _mm_xor_si128(_mm_cmpeq_epi8(x, zero), ones));
        }
      }
      for (int64_t v = 0; v < vecs; ++v) _mm_store_si128(reinterpret_cast<__m128i*>(part + 16 * v), c[v]);
      for (int64_t i = 0; i < 16 * vecs; ++i) count[e0 + i] += part[i];
    }
  }
#endif
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = MapRow(p, t);
    for (int64_t e = e_vec; e < E; ++e) count[e] += row[e] != 0 ? 1 : 0;
  }
}

// Calls fn(e) for each expert e with row[e] non-zero, ascending, until fn returns false; unit stride.
template <typename Fn>
void ForEachRoutedUnit(const uint8_t* row, int64_t E, const Fn& fn) {
  int64_t e0 = 0;
#if defined(__x86_64__) || defined(_M_X64)
  const __m128i zero = _mm_setzero_si128();
  for (; e0 + 16 <= E; e0 += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + e0));
    unsigned bits = ~static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, zero))) & 0xFFFFu;
    for (; bits != 0; bits &= bits - 1) {
      if (!fn(e0 + __builtin_ctz(bits))) return;
    }
  }
#endif
  for (; e0 < E; ++e0) {
    if (row[e0] != 0 && !fn(e0)) return;
  }
}

}  // namespace

void PermuteCount(const PermuteProblem& p, const PermuteScratch& s) {
  const int64_t E = p.experts;
  internal::ParallelFor(0, p.blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* count = s.counts + b * E;
      for (int64_t e = 0; e < E; ++e) count[e] = 0;
      int64_t t0, t1;
      BlockRange(p, b, &t0, &t1);
      s.bad[2 * b] = -1;
      s.bad[2 * b + 1] = 0;
      if (p.map_col_stride == 1) {
        CountRoutedUnit(p, t0, t1, count);
        if (p.drop_and_pad) continue;
        for (int64_t t = t0; t < t1; ++t) {
          int64_t routed = 0;
          ForEachRoutedUnit(MapRow(p, t), E, [&](int64_t) { ++routed; return true; });
          if (routed != p.topk) {
            s.bad[2 * b] = t;
            s.bad[2 * b + 1] = routed;
            break;
          }
        }
        continue;
      }
      for (int64_t t = t0; t < t1; ++t) {
        const uint8_t* row = MapRow(p, t);
        int64_t routed = 0;
        for (int64_t e = 0; e < E; ++e) {
          const int64_t hit = row[e * p.map_col_stride] != 0;
          count[e] += hit;
          routed += hit;
        }
        if (!p.drop_and_pad && routed != p.topk && s.bad[2 * b] < 0) {
          s.bad[2 * b] = t;
          s.bad[2 * b + 1] = routed;
        }
      }
    }
  });
}

void PermuteIndices(const PermuteProblem& p, const PermuteScratch& s) {
  const int64_t E = p.experts;
  for (int64_t e = 0; e < E; ++e) s.totals[e] = 0;
  for (int64_t b = 0; b < p.blocks; ++b) {
    for (int64_t e = 0; e < E; ++e) s.totals[e] += s.counts[b * E + e];
  }
  s.starts[0] = 0;
  for (int64_t e = 0; e < E; ++e) s.starts[e + 1] = s.starts[e] + s.totals[e];
  // counts[b][e] becomes block b's first position in expert e: dropless, a permuted row; drop-and-pad,
  // the number of tokens routed to e before the block.
  for (int64_t e = 0; e < E; ++e) s.running[e] = p.drop_and_pad ? 0 : s.starts[e];
  for (int64_t b = 0; b < p.blocks; ++b) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t c = s.counts[b * E + e];
      s.counts[b * E + e] = s.running[e];
      s.running[e] += c;
    }
  }

  const int64_t K = p.topk;
  const int64_t C = p.capacity;
  internal::ParallelFor(0, p.blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* cursor = s.counts + b * E;
      int64_t t0, t1;
      BlockRange(p, b, &t0, &t1);
      if (p.drop_and_pad && p.map_col_stride == 1) {
        // An unrouted token t lands at totals[e] + (t - cursor[e]) in expert e, a position that never falls
        // as t grows; when it is past C for every expert at the block's first token, no unrouted token of
        // the block is kept, and only the routed entries need visiting.
        bool fills = false;
        for (int64_t e = 0; e < E && !fills; ++e) fills = s.totals[e] + (t0 - cursor[e]) < C;
        if (!fills) {
          for (int64_t t = t0; t < t1; ++t) {
            ForEachRoutedUnit(MapRow(p, t), E, [&](int64_t e) {
              const int64_t pos = cursor[e]++;
              if (pos < C) s.src[e * C + pos] = static_cast<int32_t>(t);
              return true;
            });
          }
          continue;
        }
      }
      for (int64_t t = t0; t < t1; ++t) {
        const uint8_t* row = MapRow(p, t);
        if (!p.drop_and_pad) {
          // Slot t*K + k is the k-th expert of token t in ascending expert order (the stable argsort of
          // the expert-major token list); its permuted row is that expert's next free position.
          int64_t k = 0;
          auto place = [&](int64_t e) {
            const int64_t q = cursor[e]++;
            p.sorted_indices.At<int32_t>(t * K + k) = static_cast<int32_t>(q);
            s.src[q] = static_cast<int32_t>(t);
            return ++k < K;
          };
          if (p.map_col_stride == 1) {
            if (K > 0) ForEachRoutedUnit(row, E, place);
            continue;
          }
          for (int64_t e = 0; e < E && k < K; ++e) {
            if (row[e * p.map_col_stride] != 0) place(e);
          }
          continue;
        }
        // Expert e lists its routed tokens (ascending), then the unrouted ones (ascending), first C kept.
        for (int64_t e = 0; e < E; ++e) {
          int64_t pos;
          if (row[e * p.map_col_stride] != 0) {
            pos = cursor[e]++;
          } else {
            pos = s.totals[e] + (t - cursor[e]);
          }
          if (pos < C) s.src[e * C + pos] = static_cast<int32_t>(t);
        }
      }
    }
  });
}

void PermuteRows(const PermuteProblem& p, const PermuteScratch& s) {
  if (p.element_bytes == 2) return RowsTyped<uint16_t>(p, s);
  return RowsTyped<uint32_t>(p, s);
}

}  // namespace moegrad::kernels
