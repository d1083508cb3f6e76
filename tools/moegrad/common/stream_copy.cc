// The copy of the benchmarks' yardstick, one copy per SIMD target: vector loads and streaming
// (non-temporal) stores, as the library's kernels write an output of a call far larger than the caches; and
// its read half alone and its write half alone.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tools/moegrad/common/stream_copy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "tools/moegrad/common/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace moegrad::tool::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Blocks of four pages walked in step from offset i, two vectors of `n` bytes of each page in turn: calls
// step(at) for the pair at offsets at and at + n, for every pair of every whole block below `bytes`; returns
// the offset after the last block (i when a page is not a whole number of pairs). Four streams of loads in
// flight instead of one (the hardware prefetchers follow a stream within its page). On an Intel Xeon guest
// (AVX-512) this copies 256 MiB at 49 GB/s against 38 GB/s page after page; a prefetch 512 bytes ahead in each
// page adds nothing. The C library's memcpy streams a large copy the same way.
template <typename Step>
HWY_INLINE size_t FourPagesInStep(size_t i, size_t bytes, size_t n, const Step& step) {
  constexpr size_t kPage = 4096;
  if (kPage % (2 * n) != 0) return i;
  for (; i + 4 * kPage <= bytes; i += 4 * kPage) {
    for (size_t o = 0; o < kPage; o += 2 * n) {
      for (size_t p = 0; p < 4; ++p) step(i + p * kPage + o);
    }
  }
  return i;
}

// memcpy up to the first destination address aligned to a vector, then aligned streaming stores of unaligned
// loads (four pages in step when `in_step`, else in order), the tail by memcpy; the streamed stores are fenced
// before returning.
void StreamCopyBytes(uint8_t* HWY_RESTRICT dst, const uint8_t* HWY_RESTRICT src, size_t bytes, bool in_step) {
  const hn::ScalableTag<uint8_t> d;
  const size_t n = hn::Lanes(d);
  const size_t misaligned = reinterpret_cast<uintptr_t>(dst) & (n - 1);
  size_t i = std::min(bytes, misaligned ? n - misaligned : 0);
  std::memcpy(dst, src, i);
  const auto copy_pair = [&](size_t at) {
    const auto v0 = hn::LoadU(d, src + at);
    const auto v1 = hn::LoadU(d, src + at + n);
    hn::Stream(v0, d, dst + at);
    hn::Stream(v1, d, dst + at + n);
  };
  if (in_step) i = FourPagesInStep(i, bytes, n, copy_pair);
  for (; i + 4 * n <= bytes; i += 4 * n) {
    const auto v0 = hn::LoadU(d, src + i);
    const auto v1 = hn::LoadU(d, src + i + n);
    const auto v2 = hn::LoadU(d, src + i + 2 * n);
    const auto v3 = hn::LoadU(d, src + i + 3 * n);
    hn::Stream(v0, d, dst + i);
    hn::Stream(v1, d, dst + i + n);
    hn::Stream(v2, d, dst + i + 2 * n);
    hn::Stream(v3, d, dst + i + 3 * n);
  }
  for (; i + n <= bytes; i += n) hn::Stream(hn::LoadU(d, src + i), d, dst + i);
  std::memcpy(dst + i, src + i, bytes - i);
  hwy::FlushStream();
}

// The sum of the bytes of src: SumsOf8 of each vector into 64-bit lanes, two accumulators, four pages in step
// as in StreamCopyBytes when `in_step`, else two vectors at a time in order; the rest vector by vector, then
// byte by byte.
uint64_t StreamReadBytes(const uint8_t* HWY_RESTRICT src, size_t bytes, bool in_step) {
  const hn::ScalableTag<uint8_t> d;
  const hn::Repartition<uint64_t, decltype(d)> d64;
  const size_t n = hn::Lanes(d);
  auto acc0 = hn::Zero(d64);
  auto acc1 = hn::Zero(d64);
  const auto read_pair = [&](size_t at) {
    acc0 = hn::Add(acc0, hn::SumsOf8(hn::LoadU(d, src + at)));
    acc1 = hn::Add(acc1, hn::SumsOf8(hn::LoadU(d, src + at + n)));
  };
  size_t i = 0;
  if (in_step) {
    i = FourPagesInStep(0, bytes, n, read_pair);
  } else {
    for (; i + 2 * n <= bytes; i += 2 * n) read_pair(i);
  }
  for (; i + n <= bytes; i += n) acc0 = hn::Add(acc0, hn::SumsOf8(hn::LoadU(d, src + i)));
  uint64_t sum = hn::GetLane(hn::SumOfLanes(d64, hn::Add(acc0, acc1)));
  for (; i < bytes; ++i) sum += src[i];
  return sum;
}

// Sets `bytes` bytes of dst to `value`: memset up to the first address aligned to a vector, then aligned
// streaming stores in order, four vectors at a time, the tail by memset; fenced before returning. The write half
// of StreamCopyBytes alone (its stores, without its loads).
void StreamWriteBytes(uint8_t* HWY_RESTRICT dst, size_t bytes, uint8_t value) {
  const hn::ScalableTag<uint8_t> d;
  const size_t n = hn::Lanes(d);
  const size_t misaligned = reinterpret_cast<uintptr_t>(dst) & (n - 1);
  size_t i = std::min(bytes, misaligned ? n - misaligned : 0);
  std::memset(dst, value, i);
  const auto v = hn::Set(d, value);
  for (; i + 4 * n <= bytes; i += 4 * n) {
    hn::Stream(v, d, dst + i);
    hn::Stream(v, d, dst + i + n);
    hn::Stream(v, d, dst + i + 2 * n);
    hn::Stream(v, d, dst + i + 3 * n);
  }
  for (; i + n <= bytes; i += n) hn::Stream(v, d, dst + i);
  std::memset(dst + i, value, bytes - i);
  hwy::FlushStream();
}

}  // namespace moegrad::tool::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::tool {

HWY_EXPORT(StreamCopyBytes);
HWY_EXPORT(StreamReadBytes);
HWY_EXPORT(StreamWriteBytes);

const char* CopyWalkName(CopyWalk walk) {
  return walk == CopyWalk::kFourPagesInStep ? "four pages in step" : "page after page";
}

void StreamCopy(void* dst, const void* src, size_t bytes, CopyWalk walk) {
  HWY_DYNAMIC_DISPATCH(StreamCopyBytes)(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes,
                                        walk == CopyWalk::kFourPagesInStep);
}

uint64_t StreamRead(const void* src, size_t bytes, CopyWalk walk) {
  return HWY_DYNAMIC_DISPATCH(StreamReadBytes)(static_cast<const uint8_t*>(src), bytes,
                                               walk == CopyWalk::kFourPagesInStep);
}

void StreamWrite(void* dst, size_t bytes, uint8_t value) {
  HWY_DYNAMIC_DISPATCH(StreamWriteBytes)(static_cast<uint8_t*>(dst), bytes, value);
}

}  // namespace moegrad::tool
#endif  // HWY_ONCE
