// The routing map (one byte per (token, expert), non-zero = routed) with unit column stride, read in
// vectors of up to 64 bytes: per-expert counts over a range of tokens, and the routed experts of one token.
// Compiled once per SIMD target (include after foreach_target.h); the forward and backward permute kernels
// share it.

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROUTING_MAP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROUTING_MAP_INL_H_
#undef MOEGRAD_KERNELS_ROUTING_MAP_INL_H_
#else
#define MOEGRAD_KERNELS_ROUTING_MAP_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 64 bytes of the map per vector, so that a vector's routed entries fit one 64-bit word of mask bits;
// the columns left past the last whole vector go 16 at a time, then one at a time.
using DMap = hn::CappedTag<uint8_t, 64>;
using DMap16 = hn::CappedTag<uint8_t, 16>;

// count[e] += the rows t in [t0, t1) routed to expert e, for the whole vectors of d from column e_begin on;
// returns the first column not counted. Row t starts at map + t * row_stride. Byte counters in registers, up
// to 255 rows at a time, four vectors of columns at a time; then added to count.
template <class D>
HWY_INLINE int64_t CountRoutedVectors(D d, const uint8_t* map, int64_t row_stride, int64_t t0, int64_t t1,
                                      int64_t e_begin, int64_t E, int64_t* count) {
  using V = hn::Vec<D>;
  constexpr int64_t kV = 4;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t e_end = e_begin + (E - e_begin) / n * n;
  HWY_ALIGN uint8_t part[kV * hn::MaxLanes(D())];
  const V zero = hn::Zero(d);
  for (int64_t e0 = e_begin; e0 < e_end; e0 += kV * n) {
    const int64_t nv = std::min(kV, (e_end - e0) / n);
    for (int64_t r0 = t0; r0 < t1; r0 += 255) {
      const int64_t r1 = std::min(t1, r0 + 255);
      V c[kV] = {zero, zero, zero, zero};
      for (int64_t t = r0; t < r1; ++t) {
        const uint8_t* m = map + t * row_stride + e0;
        // A true lane of the mask is all ones (-1): subtracting it counts one.
        for (int64_t v = 0; v < nv; ++v) {
          c[v] = hn::Sub(c[v], hn::VecFromMask(d, hn::Ne(hn::LoadU(d, m + v * n), zero)));
        }
      }
      for (int64_t v = 0; v < nv; ++v) hn::Store(c[v], d, part + v * n);
      for (int64_t i = 0; i < nv * n; ++i) count[e0 + i] += part[i];
    }
  }
  return e_end;
}

// count[e] += the rows t in [t0, t1) routed to expert e (map byte non-zero), e in [0, E); row t starts at
// map + t * row_stride.
HWY_INLINE void CountRoutedUnit(const uint8_t* map, int64_t row_stride, int64_t t0, int64_t t1, int64_t E,
                                int64_t* count) {
  int64_t e = CountRoutedVectors(DMap(), map, row_stride, t0, t1, 0, E, count);
  if (hn::Lanes(DMap()) > hn::Lanes(DMap16())) e = CountRoutedVectors(DMap16(), map, row_stride, t0, t1, e, E, count);
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* m = map + t * row_stride;
    for (int64_t c = e; c < E; ++c) count[c] += m[c] != 0 ? 1 : 0;
  }
}

// Calls fn(e) for the routed e (row[e] non-zero) among the whole vectors of d from *e0 on, ascending, and
// advances *e0 past them; false as soon as fn returns false.
template <class D, typename Fn>
HWY_INLINE bool ForEachRoutedVectors(D d, const uint8_t* row, int64_t* e0, int64_t E, const Fn& fn) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  for (; *e0 + n <= E; *e0 += n) {
    uint8_t bytes[8] = {};
    hn::StoreMaskBits(d, hn::Ne(hn::LoadU(d, row + *e0), hn::Zero(d)), bytes);
    uint64_t bits;
    std::memcpy(&bits, bytes, sizeof(bits));
    for (; bits != 0; bits &= bits - 1) {
      if (!fn(*e0 + static_cast<int64_t>(hwy::Num0BitsBelowLS1Bit_Nonzero64(bits)))) return false;
    }
  }
  return true;
}

// Calls fn(e) for each e in [0, E) with row[e] non-zero, ascending, until fn returns false; unit stride.
template <typename Fn>
HWY_INLINE void ForEachRouted(const uint8_t* row, int64_t E, const Fn& fn) {
  int64_t e0 = 0;
  if (!ForEachRoutedVectors(DMap(), row, &e0, E, fn)) return;
  if (hn::Lanes(DMap()) > hn::Lanes(DMap16()) && !ForEachRoutedVectors(DMap16(), row, &e0, E, fn)) return;
  for (; e0 < E; ++e0) {
    if (row[e0] != 0 && !fn(e0)) return;
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROUTING_MAP_INL_H_
