// A copy with streaming (non-temporal) stores: the copy of the benchmarks' yardstick for buffers far larger
// than the caches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moegrad::tool {

// Copies `bytes` bytes from src to dst (not overlapping) with vector loads and streaming stores on the best
// SIMD target of the machine (plain stores where the target has no streaming store), fenced before it
// returns. A copy of a buffer far larger than the caches writes past them, as the library's kernels write a
// large call's output, instead of reading every destination line first.
void StreamCopy(void* dst, const void* src, size_t bytes);

// Reads `bytes` bytes from src as StreamCopy reads its source (vector loads, four pages in step) and returns
// the sum of the bytes (mod 2^64), so that no load can be left out: the read half of the copy alone, the
// yardstick of a kernel whose bytes are mostly reads.
uint64_t StreamRead(const void* src, size_t bytes);

}  // namespace moegrad::tool
