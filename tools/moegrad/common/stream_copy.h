// A copy with streaming (non-temporal) stores: the copy of the benchmarks' yardstick for buffers far larger
// than the caches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moegrad::tool {

// How the yardstick walks a buffer: four pages in step (four streams of loads in flight, which the hardware
// prefetchers follow within a page each) or page after page (one stream). Which is faster depends on the
// machine: four pages in step on the Intel Xeon guest measured (49 GB/s against 38), page after page on the
// AMD EPYC Zen 5 guest (60 GB/s against 49); the benchmarks time both and take the faster (ChooseCopyWalk in
// measure.h).
enum class CopyWalk { kFourPagesInStep, kSequential };

// Every walk, in the order the benchmarks time them.
inline constexpr CopyWalk kCopyWalks[] = {CopyWalk::kFourPagesInStep, CopyWalk::kSequential};

// "four pages in step" or "page after page".
const char* CopyWalkName(CopyWalk walk);

// Copies `bytes` bytes from src to dst (not overlapping) with vector loads and streaming stores on the best
// SIMD target of the machine (plain stores where the target has no streaming store), fenced before it
// returns. A copy of a buffer far larger than the caches writes past them, as the library's kernels write a
// large call's output, instead of reading every destination line first.
void StreamCopy(void* dst, const void* src, size_t bytes, CopyWalk walk = CopyWalk::kFourPagesInStep);

// Reads `bytes` bytes from src as StreamCopy with the same walk reads its source and returns the sum of the
// bytes (mod 2^64), so that no load can be left out: the read half of the copy alone, the yardstick of a kernel
// whose bytes are mostly reads.
uint64_t StreamRead(const void* src, size_t bytes, CopyWalk walk = CopyWalk::kFourPagesInStep);

// Sets `bytes` bytes of dst to `value` with streaming stores in order, fenced before it returns: the write half
// of the copy alone, the yardstick of a kernel whose bytes are mostly writes (a dispatch writes each row it reads
// K times).
void StreamWrite(void* dst, size_t bytes, uint8_t value);

}  // namespace moegrad::tool
