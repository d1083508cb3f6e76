// Bit-exact row copies of the operators that only move bytes (the forward permute, MoeInitRoutingV2): memcpy,
// or for outputs far larger than the caches 16-byte streaming stores (baseline x86-64), and zero rows the
// same way. Not compiled per SIMD target: no value is widened or rounded.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace moegrad::kernels {

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
inline void FlushStreams() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_sfence();
#endif
}

// Copies one source row to each of `count` destination rows of `bytes` bytes (16-byte aligned): the source is
// read from memory once and then from the cache, every destination written with streaming stores. While
// the copies run, `next` (the next token's row, or null) is prefetched a slice per copy, so that it is in the
// cache when its own copies start.
inline void StreamCopyToMany(const char* src, const char* next, char* const* dsts, int64_t count, int64_t bytes) {
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

// Zeroes `bytes` bytes at dst (every float dtype's +0 is all zero bits), with streaming stores when `stream`
// (after a memset up to the first 16-byte boundary).
inline void ZeroBytes(char* dst, int64_t bytes, bool stream) {
#if defined(__x86_64__) || defined(_M_X64)
  if (stream && bytes >= 64) {
    const int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
    std::memset(dst, 0, static_cast<size_t>(head));
    dst += head;
    bytes -= head;
    const __m128i zero = _mm_setzero_si128();
    for (; bytes >= 16; bytes -= 16, dst += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(dst), zero);
  }
#else
  (void)stream;
#endif
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

}  // namespace moegrad::kernels
