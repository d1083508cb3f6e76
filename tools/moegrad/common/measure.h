// Timing and the machine's copy bandwidth, the yardstick of `moegrad bench`'s "% of copy" column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tools/moegrad/common/stream_copy.h"

namespace moegrad::tool {

// `bytes` bytes aligned to 64 (none when 0), freed with the buffer.
struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  void* data;
  uint64_t size;
};

// The data cache of the highest level this machine reports, all its instances together (a two-socket machine
// has two L3s), in bytes: from /sys/devices/system/cpu (Linux), else sysconf; 0 when it reports none.
uint64_t LastLevelCacheBytes();

// Bytes of memory a run may use: MemAvailable of /proc/meminfo (more means swapping or the OOM killer), else
// every physical page, else UINT64_MAX.
uint64_t AvailableMemory();

// The size of each buffer of the eviction copy for a last-level cache of `llc_bytes` and `available_bytes` of
// memory: twice the cache (reading it once through a cache with adaptive replacement leaves part of the old
// lines), but no more than an eighth of the memory (a machine with a cache that large and little memory gets a
// copy that evicts less rather than no benchmark); at least kMinEvictionBytes, at most kMaxEvictionBytes, in
// whole MiB.
constexpr uint64_t kMinEvictionBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxEvictionBytes = uint64_t{4} << 30;
uint64_t EvictionBytes(uint64_t llc_bytes, uint64_t available_bytes);

// EvictionBytes on this machine: its LastLevelCacheBytes() and AvailableMemory(). What `moegrad bench` copies
// before each timed call unless --evict-mib says otherwise, and what `moegrad info` names.
uint64_t DefaultEvictionBytes();

// Source and destination of the copy that leaves the caches full of other data before a timed call (by default
// DefaultEvictionBytes() each): `moegrad bench` pairs every timed call with one (PairedWithCopy),
// moegrad_bench's cold rows evict with one.
struct EvictionCopy {
  explicit EvictionCopy(uint64_t bytes = DefaultEvictionBytes());
  uint64_t bytes;
  AlignedBuffer src, dst;
};

// Runs fn `warmup` times, then at least min_runs and at most max_runs times, stopping once about
// budget_seconds have been spent; returns the median time of one run in seconds.
double MedianSeconds(const std::function<void()>& fn, int warmup = 2, int min_runs = 5, int max_runs = 1000,
                     double budget_seconds = 0.5);

// Times fn right after each of a series of parallel copies of `copy_bytes` from src to dst (2 warm-up calls of
// fn first; at least min_runs pairs, then more up to max_runs while the pairs took under budget_seconds).
// Returns the median time of fn; *ratio gets the median over the pairs of (fn_bytes / fn's time) / (2 *
// copy_bytes / the copy's time), *copy_bandwidth the median copy bandwidth (read + write bytes per second).
double PairedWithCopy(const std::function<void()>& fn, double fn_bytes, void* dst, const void* src,
                      size_t copy_bytes, int threads, double* ratio, double* copy_bandwidth, int min_runs = 7,
                      int max_runs = 41, double budget_seconds = 1.0);

// A copy of at least this many bytes streams its stores (StreamCopy): it moves 8 MiB and writes 1 MiB or more,
// where the library's kernels stream theirs (kernel_types.h). Smaller copies are memcpy. memcpy would stream
// a large copy too, but from a size the C library derives from the last-level cache the machine reports:
// on a guest shown its whole host's 480 MiB L3, half of a 256 MiB copy per thread stays under that size and
// memcpy reads every destination line before writing it, at about half the streaming copy's rate.
constexpr size_t kStreamCopyMinBytes = size_t{4} << 20;

// A copy of `bytes` split into `threads` contiguous parts, one per thread (OpenMP), each StreamCopy from
// kStreamCopyMinBytes in all (with YardstickWalk()) and memcpy below; at most kMaxThreads threads and one per 64
// bytes, whatever `threads` is.
void ParallelCopy(void* dst, const void* src, size_t bytes, int threads);

// The walk of ParallelCopy: four pages in step until SetYardstickWalk or ChooseCopyWalk sets
// another (the process's benchmarks call ChooseCopyWalk once, before they time anything).
CopyWalk YardstickWalk();
void SetYardstickWalk(CopyWalk walk);

// Times a ParallelCopy of `bytes` with each walk in alternation (`pairs` pairs after one to warm up), makes the
// faster median the yardstick's walk (SetYardstickWalk) and returns both medians, read + written bytes per
// second. The yardstick is the fastest copy the machine allows, so that "% of copy" does not flatter a kernel
// on a machine where one walk is slow.
struct CopyWalkChoice {
  CopyWalk walk = CopyWalk::kFourPagesInStep;
  double in_step_bytes_per_second = 0.0;
  double in_order_bytes_per_second = 0.0;
  double chosen_bytes_per_second() const {
    return walk == CopyWalk::kFourPagesInStep ? in_step_bytes_per_second : in_order_bytes_per_second;
  }
};
CopyWalkChoice ChooseCopyWalk(int threads, size_t bytes = size_t{256} << 20, int pairs = 5);

// The sum of the bytes of src (mod 2^64), read by `threads` threads (StreamRead of one contiguous part each with
// `walk`, at most kMaxThreads and one per 64 bytes).
uint64_t ParallelRead(const void* src, size_t bytes, int threads, CopyWalk walk);

// Sets `bytes` bytes of dst to `value` with `threads` threads (StreamWrite of one contiguous part each, at most
// kMaxThreads and one per 64 bytes).
void ParallelWrite(void* dst, size_t bytes, uint8_t value, int threads);

// The copy (with the yardstick's walk), its read half alone and its write half alone, measured in alternation on
// buffers of `bytes` (a copy, a read of what it just wrote, which its streaming stores left in memory, not in the
// caches, a copy, ..., and once a pair a copy and a write of streaming stores alone) with `threads` threads, the
// reads with each walk in turn: the copy's median bytes per second (read + written bytes), the faster read walk,
// its median bytes per second and the median over its pairs of read / copy, and the same for the writes. A kernel
// of which a fraction f of the bytes are reads (f = K/(K+1) for one that sums K rows into one) cannot run faster
// than about read / f, which on cores that keep few reads in flight is below the copy rate; one of which a
// fraction w of the bytes are writes (w = K/(K+1) for a dispatch that writes each row it reads K times), faster
// than about write / w.
struct CopyReadWrite {
  double copy_bytes_per_second = 0.0;
  CopyWalk read_walk = CopyWalk::kFourPagesInStep;
  double read_bytes_per_second = 0.0;
  double read_over_copy = 0.0;
  double write_bytes_per_second = 0.0;
  double write_over_copy = 0.0;
};
CopyReadWrite CopyReadWriteBandwidth(int threads, size_t bytes, int pairs = 7);

}  // namespace moegrad::tool
