// MoeInitRoutingV2 row copies. Like the forward permute's, not compiled per SIMD target: rows are copied bit
// for bit (no widening or rounding), with memcpy or, for large outputs, 16-byte streaming stores (baseline
// x86-64; row_copy.h). The index passes are in init_routing_v2_index.cc.
#include "src/backend/cpu/kernels/init_routing_v2.h"

#include <algorithm>
#include <cstdint>

#include "src/backend/cpu/kernels/row_copy.h"
#include "src/backend/cpu/parallel.h"

namespace moegrad::kernels {
namespace {

// Elements are moved as unsigned integers of their width: the one dtype switch of this operator.
template <typename T>
void InitRoutingV2RowsTyped(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s) {
  const int64_t N = p.tokens;
  const int64_t H = p.hidden;
  const int64_t K = p.topk;
  const int64_t C = p.capacity;
  const int64_t E = p.experts;
  const int64_t copy_bytes = H * static_cast<int64_t>(sizeof(T));
  const int64_t zero_rows = p.mode == 1 ? s.zero_rows[E] : 0;
  const int64_t moved = (s.token_rows[N] + zero_rows) * std::max<int64_t>(1, copy_bytes);
  const bool unit = p.src_x.col_stride == 1 && p.dst_x.col_stride == 1;
  const bool stream = unit && StreamOutput(p.out_rows * copy_bytes, moved);
  // The row pair t*K + k fills: expandedRowIdx, unless the pair is dropped (-1) or past the active rows.
  auto row_of = [&](int64_t t, int64_t k) -> int64_t {
    const int64_t v = p.row_idx.At<const int32_t>(t * K + k);
    return (p.mode == 1 ? v >= 0 : v < p.active) ? v : -1;
  };
  internal::ChunkQueue queue;
  internal::ChunkQueue zero_queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int /*part*/, int parts) {
    // Chunks of tokens [t0, t1) of about equal rows moved (the token's own row plus those it is copied to),
    // taken as each thread finishes its last (ChunkQueue): each token row is read once and written to all its
    // rows.
    constexpr int64_t kMaxDsts = 64;
    char* dsts[kMaxDsts];
    // Whether token t is copied anywhere: a token whose pairs are all dropped or past the active rows is not
    // read, and the row prefetched during a token's copies is the next token that is.
    auto copied = [&](int64_t t) { return s.token_rows[t + 1] - s.token_rows[t] > 1; };
    auto copy_tokens = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const T* src = p.src_x.Row<const T>(t);
        if (!stream) {
          for (int64_t k = 0; k < K; ++k) {
            const int64_t v = row_of(t, k);
            if (v >= 0) CopyRow<T>(src, p.src_x.col_stride, p.dst_x.Row<T>(v), p.dst_x.col_stride, H);
          }
          continue;
        }
        if (!copied(t)) continue;
        int64_t t_next = t + 1;
        while (t_next < t1 && !copied(t_next)) ++t_next;
        const char* next = t_next < t1 ? reinterpret_cast<const char*>(p.src_x.Row<const T>(t_next)) : nullptr;
        // Destinations a batch at a time; a row that does not start on 16 bytes is copied with memcpy.
        for (int64_t k0 = 0; k0 < K; k0 += kMaxDsts) {
          int64_t n = 0;
          for (int64_t k = k0; k < std::min(K, k0 + kMaxDsts); ++k) {
            const int64_t v = row_of(t, k);
            if (v < 0) continue;
            T* dst = p.dst_x.Row<T>(v);
            if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) dsts[n++] = reinterpret_cast<char*>(dst);
            else CopyRow<T>(src, 1, dst, 1, H);
          }
          StreamCopyToMany(reinterpret_cast<const char*>(src), k0 + kMaxDsts >= K ? next : nullptr, dsts, n,
                           copy_bytes);
        }
      }
    };
    queue.TakeRangesByCost(N, internal::WalkChunks(moved, parts, kChunkBytes),
                           [&](int64_t t) { return s.token_rows[t]; }, copy_tokens);
    // dropPadMode 1: the rows no pair fills, [filled, C) of every expert, as +0 (all zero bits), in chunks of
    // them [z0, z1) taken from a second queue, expert e's from zero_rows[e].
    auto zero_range = [&](int64_t z0, int64_t z1) {
      int64_t e = std::upper_bound(s.zero_rows, s.zero_rows + E + 1, z0) - s.zero_rows - 1;
      for (int64_t z = z0; z < z1; ++z) {
        while (z >= s.zero_rows[e + 1]) ++e;
        T* dst = p.dst_x.Row<T>(e * C + C - (s.zero_rows[e + 1] - z));
        if (p.dst_x.col_stride == 1) {
          ZeroBytes(reinterpret_cast<char*>(dst), copy_bytes, stream);
        } else {
          for (int64_t j = 0; j < H; ++j) dst[j * p.dst_x.col_stride] = T(0);
        }
      }
    };
    if (zero_rows > 0) {
      zero_queue.TakeRanges(zero_rows, internal::WalkChunks(zero_rows * copy_bytes, parts, kChunkBytes), zero_range);
    }
    if (stream) FlushStreams();
  });
}

}  // namespace

void RunInitRoutingV2(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s) {
  if (p.element_bytes == 2) return InitRoutingV2RowsTyped<uint16_t>(p, s);
  return InitRoutingV2RowsTyped<uint32_t>(p, s);
}

}  // namespace moegrad::kernels
