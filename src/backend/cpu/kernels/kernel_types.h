// What the CPU kernels share: the streaming-store and threading thresholds, and the core types they read.
#pragma once

#include <cstdint>

#include "hwy/base.h"
#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::kernels {

using core::DType;
using core::FlatView;
using core::RowView;

// A call that moves at least kStreamMinBytes in all (reads and writes) writes an output of at least
// kStreamMinOutBytes with streaming (non-temporal) stores: the rows it reads push the output out of the caches
// before anyone could read it there, and a streamed line is not read before it is written (a plain store
// reads it first: a third more traffic for a row copy).
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;
constexpr int64_t kStreamMinOutBytes = int64_t{1} << 20;
constexpr bool StreamOutput(int64_t out_bytes, int64_t moved_bytes) {
  return out_bytes >= kStreamMinOutBytes && moved_bytes >= kStreamMinBytes;
}
// A thread of a parallel kernel should move at least this much, or the fork/join costs more than it saves.
constexpr int64_t kBytesPerThread = int64_t{256} << 10;
// A parallel walk over tokens is cut into chunks of at least this much that the threads take as each finishes
// its last (internal::ChunkQueue), about eight per thread.
constexpr int64_t kChunkBytes = int64_t{1} << 20;
// What a call's thread count is measured by: the bytes it moves, counted twice for 16-bit rows with dot
// products (they convert every element they read, round every one they write, and their dots take about as
// long as moving the bytes on AVX2), so that a one-token call of 300 KB with dots runs on two threads.
constexpr int64_t ThreadWork(int64_t moved_bytes, bool dots, int64_t element_bytes) {
  return dots && element_bytes == 2 ? 2 * moved_bytes : moved_bytes;
}

// Calls fn(T()) with T the element type of a float dtype: float, hwy::float16_t or hwy::bfloat16_t (the
// operator layer admits no other). The one dtype switch of every kernel.
template <typename Fn>
void WithFloatType(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float());
    case DType::kFloat16: return fn(hwy::float16_t());
    case DType::kBFloat16: return fn(hwy::bfloat16_t());
    default: return;
  }
}

}  // namespace moegrad::kernels

// In a kernel file's HWY_ONCE part: defines `void Entry(const Arg& a)` (declared in the kernel's header) to
// run `Impl` of the best SIMD target this CPU supports.
#define MOEGRAD_KERNEL_ENTRY(Entry, Impl, Arg) \
  HWY_EXPORT(Impl);                            \
  void Entry(const Arg& a) { HWY_DYNAMIC_DISPATCH(Impl)(a); }
// The same for `void Entry(const Arg& a, Arg2 b)`.
#define MOEGRAD_KERNEL_ENTRY2(Entry, Impl, Arg, Arg2) \
  HWY_EXPORT(Impl);                                   \
  void Entry(const Arg& a, Arg2 b) { HWY_DYNAMIC_DISPATCH(Impl)(a, b); }
