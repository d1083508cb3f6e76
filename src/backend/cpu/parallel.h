// Partitions of [begin, end) over the worker threads (oneDNN balance211), fixed by the thread count, and the
// chunk queue of the token walks, whose chunks are fixed by their number but taken by whichever thread is
// free. Operators split work over output rows, so no result depends on the partition or on who takes what.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "src/core/int_math.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace moegrad::internal {

// The thread count for the next parallel region (src/backend/cpu/threads.cc).
int MaxThreads();

// Splits n items into `parts` ranges whose sizes differ by at most one; returns part `i`.
inline void Balance211(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  *begin = i * base + std::min<int64_t>(i, extra);
  *end = *begin + base + (i < extra ? 1 : 0);
}

// Whether ranges of whole tokens would leave threads idle: the heaviest token (its cost in the units of
// `total`) is over 1 / per_share of one part's share, by default half (one token routed to every expert slot
// at decode sizes, the padding token of a drop-and-pad call). Kernels then split the columns of every row, or
// the rows, instead; each output element adds the same terms in the same order either way. The forward permute
// asks for a whole share (half a share measured the same there: docs/performance.md, "Decode sizes and the
// token sweep on Zen 4").
inline bool UnevenTokens(int64_t heaviest, int64_t total, int parts, int64_t per_share = 2) {
  return parts > 1 && heaviest * per_share * parts > total;
}

// Columns [begin, end) of rows of h elements of `size` bytes for part i of `parts`: about equal shares, their
// boundaries on 64-byte lines so that no two parts write one cache line of an aligned row.
inline void BalanceColumns(int64_t h, int64_t size, int parts, int i, int64_t* begin, int64_t* end) {
  const int64_t line = std::max<int64_t>(1, 64 / std::max<int64_t>(size, 1));
  Balance211(CeilDiv(h, line), parts, i, begin, end);
  *begin = std::min(h, *begin * line);
  *end = std::min(h, *end * line);
}

// Calls fn(b, e) on disjoint ranges covering [begin, end); at most one range per thread and no range
// shorter than `grain` items (unless the whole range is). Runs inline inside another parallel region.
template <typename Fn>
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), CeilDiv(n, grain)));
#if defined(_OPENMP)
  if (omp_in_parallel()) threads = 1;
#endif
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads)
  {
    const int parts = omp_get_num_threads();
    int64_t b, e;
    Balance211(n, parts, omp_get_thread_num(), &b, &e);
    if (b < e) fn(begin + b, begin + e);
  }
#else
  fn(begin, end);
#endif
}

// Runs fn(part, parts) once for each part in [0, parts), parts = min(threads, MaxThreads()) (one thread,
// inline, inside another parallel region). For work whose split the caller computes itself, e.g. by bytes.
template <typename Fn>
void ParallelParts(int64_t threads, const Fn& fn) {
  int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, MaxThreads())));
#if defined(_OPENMP)
  if (omp_in_parallel()) parts = 1;
#endif
  if (parts <= 1) {
    fn(0, 1);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel num_threads(parts)
  fn(omp_get_thread_num(), omp_get_num_threads());
#else
  for (int i = 0; i < parts; ++i) fn(i, parts);
#endif
}

// Splits items [0, n) into `parts` contiguous ranges of about equal cost and returns part `i`. `prefix(k)` is
// the cost of items [0, k): non-decreasing in k, prefix(0) = 0. Part i starts at the first k with
// prefix(k) >= total * i / parts, so the split depends only on the costs, never on timing.
template <typename Prefix>
void BalanceByCost(int64_t n, int parts, int i, const Prefix& prefix, int64_t* begin, int64_t* end) {
  const int64_t total = prefix(n);
  auto start = [&](int part) -> int64_t {
    if (part <= 0) return 0;
    if (part >= parts) return n;
    const int64_t target = static_cast<int64_t>(static_cast<__int128>(total) * part / parts);
    int64_t lo = 0, hi = n;  // the first k in [0, n] with prefix(k) >= target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (prefix(mid) >= target) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  *begin = start(i);
  *end = start(i + 1);
}

// The chunks of a parallel region's main walk, handed out first come first served: each thread takes the
// next chunk when it is done with its last, so a thread that runs slower (a core shared with another process,
// a slower path to memory) takes fewer chunks instead of holding the others at the join. A chunk's items are
// fixed by its number (Balance211 or BalanceByCost over `chunks` parts), not by the thread that takes it, and
// every output row is still written by one thread with the same arithmetic: no result depends on who takes
// what. Made before the region and shared by its threads; one walk per queue.
class ChunkQueue {
 public:
  // Calls fn(c) for the chunks c in [0, chunks) that this thread takes, in ascending order.
  template <typename Fn>
  void Take(int64_t chunks, const Fn& fn) {
    for (int64_t c = next_.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next_.fetch_add(1, std::memory_order_relaxed)) {
      fn(c);
    }
  }
  // Calls fn(begin, end) for the chunks of [0, n) this thread takes, of about equal counts (Balance211).
  template <typename Fn>
  void TakeRanges(int64_t n, int64_t chunks, const Fn& fn) {
    Take(chunks, [&](int64_t c) {
      int64_t begin, end;
      Balance211(n, static_cast<int>(chunks), static_cast<int>(c), &begin, &end);
      if (begin < end) fn(begin, end);
    });
  }
  // The same with chunks of about equal cost, prefix(k) the cost of items [0, k) (BalanceByCost).
  template <typename Prefix, typename Fn>
  void TakeRangesByCost(int64_t n, int64_t chunks, const Prefix& prefix, const Fn& fn) {
    Take(chunks, [&](int64_t c) {
      int64_t begin, end;
      BalanceByCost(n, static_cast<int>(chunks), static_cast<int>(c), prefix, &begin, &end);
      if (begin < end) fn(begin, end);
    });
  }

 private:
  alignas(64) std::atomic<int64_t> next_{0};
};

// How many chunks `parts` threads cut a walk of `bytes` into: one for one thread, else about `per_thread`
// per thread but none under `chunk_bytes` (the prefetch of the next row restarts at each chunk's first row),
// and never fewer than the threads.
inline int64_t WalkChunks(int64_t bytes, int parts, int64_t chunk_bytes, int64_t per_thread = 8) {
  if (parts <= 1) return 1;
  const int64_t by_size = std::max<int64_t>(1, bytes / std::max<int64_t>(chunk_bytes, 1));
  return std::max<int64_t>(parts, std::min<int64_t>(by_size, parts * per_thread));
}

// How many chunks `parts` threads cut the small work after a walk into (index outputs, probability gradients):
// four per thread, one for one thread, so that a thread done with its part of the walk takes the share of one
// still in it rather than waiting at the join with its own share done.
inline int64_t TailChunks(int parts) { return parts <= 1 ? 1 : int64_t{4} * parts; }

}  // namespace moegrad::internal
