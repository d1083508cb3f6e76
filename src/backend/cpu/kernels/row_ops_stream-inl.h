// Memory-traffic helpers of the unit-stride row kernels, compiled once per SIMD target (include after
// foreach_target.h): streaming (non-temporal) stores of fp32 vectors rounded to the element type, a streamed
// ZeroRow, and the software prefetch of the rows a kernel reads next. They sit apart from the arithmetic of
// row_ops-inl.h because they change only how bytes reach memory, never a value: StreamF32 rounds exactly as
// StoreF32 does.

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_STREAM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_STREAM_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_STREAM_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_STREAM_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// --- streaming (non-temporal) stores ----------------------------------------------------------------------
// For outputs far larger than the caches: the line is written without being read first, which saves a third
// of the memory traffic of a row copy. Only where a stored vector fills at least a 16-byte register (Stream
// widens smaller vectors) and, for f16, the conversion is a vector instruction.
template <typename T>
constexpr bool CanStream() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  return hn::MaxLanes(DF()) * sizeof(T) >= 16 && (!hwy::IsSame<T, hwy::float16_t>() || MOEGRAD_ROW_OPS_F16C);
#else
  return false;
#endif
}

// True when vector stores of T at dst (and at every whole vector, or cache line, after it) may stream: dst
// starts a cache line, which every vector store (at most a line wide) then stays aligned to.
template <typename T>
HWY_INLINE bool StreamAligned(const T* dst) {
  return CanStream<T>() && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
}

// StoreF32 with a non-temporal store; p aligned to the stored vector, CanStream<T>().
HWY_INLINE void StreamF32(DF d, VF v, float* p) { hn::Stream(OneNaN(v), d, p); }
HWY_INLINE void StreamF32(DF /*d*/, VF v, hwy::bfloat16_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  hn::Stream(BF16BitsRNE(v), du16, reinterpret_cast<uint16_t*>(p));
}
HWY_INLINE void StreamF32(DF d, VF v, hwy::float16_t* p) {
#if MOEGRAD_ROW_OPS_F16C
  (void)d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  hn::Stream(hn::DemoteTo(dh, OneNaN(v)), dh, p);
#else
  StoreF32(d, v, p);
#endif
}

template <bool kStream, typename T>
HWY_INLINE void PutF32(DF d, VF v, T* p) {
  if (kStream) StreamF32(d, v, p);
  else StoreF32(d, v, p);
}

// --- streamed zeroing, prefetch ---------------------------------------------------------------------------

// ZeroRow for a unit-stride row, with streaming stores when `stream`.
template <typename T>
HWY_INLINE void ZeroRowUnit(T* dst, int64_t n, bool stream) {
  constexpr int64_t kBytes = static_cast<int64_t>(hn::MaxLanes(DF()) * sizeof(float));
  char* p = reinterpret_cast<char*>(dst);
  int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (CanStream<float>() && stream && bytes >= 4 * kBytes) {
    const int64_t head = (kBytes - static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kBytes)) % kBytes;
    std::memset(p, 0, static_cast<size_t>(head));
    p += head;
    bytes -= head;
    const DF d;
    const VF zero = hn::Zero(d);
    for (; bytes >= kBytes; bytes -= kBytes, p += kBytes) hn::Stream(zero, d, reinterpret_cast<float*>(p));
  }
  std::memset(p, 0, static_cast<size_t>(bytes));
}

// --- rows read side by side -------------------------------------------------------------------------------

// A unit-stride output row summed from `count` source rows of n elements is read in groups of at most
// kSplitTerms rows through an fp32 row on the stack (SumTermsSplit, SumRowPtrsSplit) when it has at least
// kSplitFrom rows longer than the walk's `min_bytes` (and at most kSplitColumns columns): the first group's sums
// go to the fp32 row, the middle groups add to it, the last adds its rows to it and stores; the same additions in
// the same order as one pass over all the rows. Fewer rows read at once: DeepSeek-V3's K = 8 walks (rows of 14
// KiB in 16 bits, 28 KiB in f32) read faster so. Tokens of 5-7 rows (MoeInitRoutingV2Grad with half the pairs
// active) went 6 points of copy slower: those stay in one pass.
constexpr int64_t kSplitTerms = 4;
constexpr int64_t kSplitFrom = 8;
constexpr int64_t kSplitColumns = 16384;

template <typename T>
HWY_INLINE bool SplitsRows(int64_t count, int64_t n, int64_t min_bytes) {
  return count >= kSplitFrom && n * static_cast<int64_t>(sizeof(T)) > min_bytes && n <= kSplitColumns;
}

// The size of the group of rows that starts at row m0 of `count` (SplitsRows).
HWY_INLINE int64_t SplitGroupAt(int64_t m0, int64_t count) {
  return count - m0 < kSplitTerms ? count - m0 : kSplitTerms;
}

// Prefetches element a of a row of n elements, or element a - n of `next` (if any) past the end.
template <typename T>
HWY_INLINE void PrefetchAhead(const T* row, const T* next, int64_t a, int64_t n) {
  if (a < n) hwy::Prefetch(row + a);
  else if (next != nullptr && a - n < n) hwy::Prefetch(next + (a - n));
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_STREAM_INL_H_
