// A deterministic static partition of [begin, end) over the worker threads (oneDNN balance211): every call
// with the same thread count hands the same ranges to the same threads, and operators split work over
// output rows so no result depends on the partition at all.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace moegrad::internal {

// The thread count for the next parallel region (SetNumThreads, else MOEGRAD_NUM_THREADS, else every CPU).
int MaxThreads();

// Splits n items into `parts` ranges whose sizes differ by at most one; returns part `i`.
inline void Balance211(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  *begin = i * base + std::min<int64_t>(i, extra);
  *end = *begin + base + (i < extra ? 1 : 0);
}

// Calls fn(b, e) on disjoint ranges covering [begin, end); at most one range per thread and no range
// shorter than `grain` items (unless the whole range is). Runs inline inside another parallel region.
template <typename Fn>
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), (n + grain - 1) / grain));
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

}  // namespace moegrad::internal
