// One-pass sums of gathered unit-stride rows, compiled once per SIMD target (include after foreach_target.h):
// dst = rne(rows[0] + ... + rows[count - 1]) with the rows given as pointers (SumRowPtrs) or, for many rows, by
// a function (SumManyRowsUnit), and a range of output rows each summing the rows an index names (GatherSums:
// permute grad, init-routing grad). They are bit-identical to SumRowsOf of row_ops-inl.h with every scale 1
// (the same additions, left to right from the first row), which they replace on unit-stride rows, and read
// several rows side by side, prefetched, with streaming stores for large outputs.

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_GATHER_SUM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_GATHER_SUM_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_GATHER_SUM_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_GATHER_SUM_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// How far ahead of the loads SumRowPtrsUnit prefetches each of its rows.
constexpr int64_t kGatherPrefetchBytes = 1024;

// dst = rne(rows[0] + rows[1] + ... + rows[count - 1]) for unit-stride rows, count >= 1, summed left to right:
// SumRowsOf with every scale 1 (a multiplication by 1 is exact, and the compiler drops it there too). Two vectors per
// step (four for 16-bit rows on AVX2), so that each step reads whole cache lines of 16-bit rows. Each row is
// prefetched ahead of the loads, and near its end so is the same row of the next call's next_rows[0..next_count).
// With kAccIn the sums start from the fp32 row acc (acc + rows[0] + ...), with kAccOut they go to acc, not to dst:
// SumRowPtrsSplit's groups; acc holds them in the walk's own element order, which only these calls read.
template <typename T, bool kStream, bool kAccIn = false, bool kAccOut = false>
HWY_NOINLINE void SumRowPtrsUnit(int64_t count, const T* const* rows, int64_t next_count, const T* const* next_rows,
                                 T* HWY_RESTRICT dst, int64_t n, float* HWY_RESTRICT acc = nullptr) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kAhead = kGatherPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  const T* r0 = rows[0];
  constexpr int kPairs = PairsPerLine<T>();
  // kP vector pairs of every row from column j, summed and stored.
  auto step = [&](auto pairs, int64_t j) HWY_ATTR {
    constexpr int kP = decltype(pairs)::value;
    VF a[2 * kP];
    for (int q = 0; q < kP; ++q) {
      const int64_t o = j + 2 * kL * q;
      LoadPairLanes(r0 + o, &a[2 * q], &a[2 * q + 1]);
      if (kAccIn) {
        a[2 * q] = hn::Add(hn::LoadU(d, acc + o), a[2 * q]);
        a[2 * q + 1] = hn::Add(hn::LoadU(d, acc + o + kL), a[2 * q + 1]);
      }
    }
    for (int64_t m = 1; m < count; ++m) {
      for (int q = 0; q < kP; ++q) {
        VF v0, v1;
        LoadPairLanes(rows[m] + j + 2 * kL * q, &v0, &v1);
        a[2 * q] = hn::Add(a[2 * q], v0);
        a[2 * q + 1] = hn::Add(a[2 * q + 1], v1);
      }
    }
    StorePairsLanes<kStream, kAccOut, kP>(a, dst + j, kAccOut ? acc + j : nullptr);
  };
  int64_t j = 0;
  for (; j + 2 * kL * kPairs <= n; j += 2 * kL * kPairs) {
    for (int64_t m = 0; m < count; ++m) {
      const T* next = m < next_count ? next_rows[m] : nullptr;
      for (int64_t o = 0; o < 2 * kL * kPairs; o += kLine) PrefetchAhead(rows[m], next, j + kAhead + o, n);
    }
    step(std::integral_constant<int, kPairs>(), j);
  }
  for (; kPairs > 1 && j + 2 * kL <= n; j += 2 * kL) step(std::integral_constant<int, 1>(), j);
  for (; j + kL <= n; j += kL) {
    VF v = LoadF32(d, r0 + j);
    if (kAccIn) v = hn::Add(hn::LoadU(d, acc + j), v);
    for (int64_t m = 1; m < count; ++m) v = hn::Add(v, LoadF32(d, rows[m] + j));
    if (kAccOut) hn::StoreU(v, d, acc + j);
    else PutF32<kStream>(d, v, dst + j);
  }
  for (; j < n; ++j) {
    float v = ToF32(r0[j]);
    if (kAccIn) v = acc[j] + v;
    for (int64_t m = 1; m < count; ++m) v += ToF32(rows[m][j]);
    if (kAccOut) acc[j] = v;
    else dst[j] = FromF32<T>(v);
  }
}

// SumRowPtrsUnit for any number of rows, `row_at(m)` giving row m: a block of columns at a time is summed in
// an fp32 buffer, eight rows per pass over it (the next eight prefetched meanwhile), so that no row pointer is
// looked up per vector and several rows stream at once.
template <typename T, bool kStream, typename RowAt>
HWY_NOINLINE void SumManyRowsUnit(int64_t count, const RowAt& row_at, T* HWY_RESTRICT dst, int64_t n) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kBlock = 2048;  // a multiple of every vector length: 8 KiB of fp32 sums
  constexpr int64_t kGroup = 8;
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  HWY_ALIGN float acc[kBlock];
  const int64_t vec_end = n / kL * kL;  // vector code below this column, element by element above, as in SumRowsOf
  const T* group[2][kGroup];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t j1 = std::min(n, j0 + kBlock);
    const int64_t v1 = std::min(j1, vec_end);
    int cur = 0;
    for (int64_t m = 0; m < std::min(count, kGroup); ++m) group[cur][m] = row_at(m);
    for (int64_t m0 = 0; m0 < count; m0 += kGroup) {
      const int64_t rows = std::min(kGroup, count - m0);
      const int64_t next_rows = std::max<int64_t>(0, std::min(kGroup, count - m0 - kGroup));
      for (int64_t m = 0; m < next_rows; ++m) group[cur ^ 1][m] = row_at(m0 + kGroup + m);
      const T* const* r = group[cur];
      int64_t j = j0;
      for (; j < v1; j += kL) {
        if ((j - j0) % kLine == 0) {
          for (int64_t m = 0; m < next_rows; ++m) hwy::Prefetch(group[cur ^ 1][m] + j);
        }
        VF v = m0 == 0 ? LoadF32(d, r[0] + j) : hn::Add(hn::Load(d, acc + (j - j0)), LoadF32(d, r[0] + j));
        for (int64_t m = 1; m < rows; ++m) v = hn::Add(v, LoadF32(d, r[m] + j));
        hn::Store(v, d, acc + (j - j0));
      }
      for (; j < j1; ++j) {
        float v = m0 == 0 ? ToF32(r[0][j]) : acc[j - j0] + ToF32(r[0][j]);
        for (int64_t m = 1; m < rows; ++m) v += ToF32(r[m][j]);
        acc[j - j0] = v;
      }
      cur ^= 1;
    }
    int64_t j = j0;
    for (; j < v1; j += kL) PutF32<kStream>(d, hn::Load(d, acc + (j - j0)), dst + j);
    for (; j < j1; ++j) dst[j] = FromF32<T>(acc[j - j0]);
  }
}

// SumRowPtrsUnit over rows that SplitsRows longer than kGatherSplitBytes: in groups of kSplitTerms rows through
// an fp32 row. DeepSeek-V3's gather sums of 8 rows (the dispatch gradients, four and five alternated runs) went
// from 81-88% of copy to 87-91%, in f32 (28 KiB rows) and in 16 bits (14 KiB); Qwen3-30B-A3B's rows of 4-8 KiB
// went 4-8 points slower in groups, and stay in one pass. The same groups a block of 2048 columns at a time (an
// fp32 row that stays in L1), against one pass: 16-bit +2..+4 (whole rows in groups: +5..+7), f32 -4..-6 (whole
// rows in groups: +4..+8); not kept.
constexpr int64_t kGatherSplitBytes = 8192;

template <typename T, bool kStream>
HWY_NOINLINE void SumRowPtrsSplit(int64_t count, const T* const* rows, int64_t next_count,
                                  const T* const* next_rows, T* HWY_RESTRICT dst, int64_t n) {
  HWY_ALIGN float acc[kSplitColumns];
  for (int64_t m0 = 0; m0 < count;) {
    const int64_t size = SplitGroupAt(m0, count);
    const int64_t m1 = m0 + size;  // the next group
    const bool last = m1 >= count;
    const T* const* ahead = last ? next_rows : rows + m1;
    const int64_t ahead_count = last ? next_count : SplitGroupAt(m1, count);
    if (m0 == 0) {
      SumRowPtrsUnit<T, false, false, true>(size, rows, ahead_count, ahead, dst, n, acc);
    } else if (!last) {
      SumRowPtrsUnit<T, false, true, true>(size, rows + m0, ahead_count, ahead, dst, n, acc);
    } else {
      SumRowPtrsUnit<T, kStream, true, false>(size, rows + m0, ahead_count, ahead, dst, n, acc);
    }
    m0 = m1;
  }
}

// SumRowsOf with every scale 1 for unit-stride rows given as pointers (SumRowPtrsSplit where SplitsRows);
// streams the stores when `stream` and dst is aligned for it.
template <typename T>
HWY_INLINE void SumRowPtrs(int64_t count, const T* const* rows, int64_t next_count, const T* const* next_rows,
                           T* dst, bool stream, int64_t n) {
  if (count == 0) return ZeroRowUnit(dst, n, stream);
  if (SplitsRows<T>(count, n, kGatherSplitBytes)) {
    if (CanStream<T>() && stream && StreamAligned(dst)) {
      SumRowPtrsSplit<T, CanStream<T>()>(count, rows, next_count, next_rows, dst, n);
    } else {
      SumRowPtrsSplit<T, false>(count, rows, next_count, next_rows, dst, n);
    }
    return;
  }
  if (CanStream<T>() && stream && StreamAligned(dst)) {
    SumRowPtrsUnit<T, CanStream<T>()>(count, rows, next_count, next_rows, dst, n);
  } else {
    SumRowPtrsUnit<T, false>(count, rows, next_count, next_rows, dst, n);
  }
}

// Up to this many rows are summed in one pass over the columns (more take a block of columns at a time).
constexpr int64_t kGatherCached = 32;

// Row t of dst = rne(sum of the count_of(t) rows row_of(t, 0..count) of src), in that order (zero when there are
// none), for t in [begin, end): SumRowsOf with every scale 1, on any strides. Each row's source pointers are
// looked up once, one row ahead, so that the next row's sources can be prefetched while this one's end.
template <typename T, typename CountOf, typename RowOf>
void GatherSums(const RowView& src, const RowView& dst, int64_t n, int64_t begin, int64_t end,
                const CountOf& count_of, const RowOf& row_of, bool stream) {
  const bool unit = src.col_stride == 1 && dst.col_stride == 1;
  const T* rows[2][kGatherCached] = {};
  int64_t counts[2] = {0, 0};
  auto look_up = [&](int64_t t, int slot) {
    counts[slot] = count_of(t);
    if (counts[slot] > kGatherCached) return;
    for (int64_t m = 0; m < counts[slot]; ++m) rows[slot][m] = src.Row<const T>(row_of(t, m));
  };
  int cur = 0;
  if (begin < end) look_up(begin, cur);
  for (int64_t t = begin; t < end; ++t) {
    const int nxt = cur ^ 1;
    counts[nxt] = 0;
    if (t + 1 < end) look_up(t + 1, nxt);
    const int64_t count = counts[cur];
    T* out = dst.Row<T>(t);
    auto row_at = [&](int64_t m) { return src.Row<const T>(row_of(t, m)); };
    if (!unit) {
      SumRowsOf<T>(
          count, [&](int64_t m, float* scale) { *scale = 1.0f; return row_at(m); }, src.col_stride, out,
          dst.col_stride, n);
    } else if (count <= kGatherCached) {
      SumRowPtrs<T>(count, rows[cur], counts[nxt] <= kGatherCached ? counts[nxt] : 0, rows[nxt], out, stream, n);
    } else if (CanStream<T>() && stream && StreamAligned(out)) {
      SumManyRowsUnit<T, CanStream<T>()>(count, row_at, out, n);
    } else {
      SumManyRowsUnit<T, false>(count, row_at, out, n);
    }
    cur = nxt;
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_GATHER_SUM_INL_H_
