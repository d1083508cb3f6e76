#include "tools/moegrad/common/measure.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "moegrad/plan.hpp"
#include "tools/moegrad/common/stream_copy.h"

namespace moegrad::tool {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0.0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

AlignedBuffer::AlignedBuffer(uint64_t bytes)
    : data(bytes ? ::operator new(bytes, std::align_val_t(64)) : nullptr), size(bytes) {}

AlignedBuffer::~AlignedBuffer() {
  if (data) ::operator delete(data, std::align_val_t(64));
}

namespace {

// "491520K", "32M", "1024" (bytes) as bytes; 0 when it is none of these.
uint64_t ParseCacheSize(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return 0;
  const char unit = *end;
  return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
}

// How many CPUs a list such as "0-15,32-47" names.
int64_t CountCpuList(const std::string& list) {
  int64_t count = 0;
  const char* s = list.c_str();
  while (*s >= '0' && *s <= '9') {
    char* end = nullptr;
    const long first = std::strtol(s, &end, 10);
    long last = first;
    if (*end == '-') last = std::strtol(end + 1, &end, 10);
    count += std::max(0L, last - first + 1);
    s = *end == ',' ? end + 1 : end;
  }
  return count;
}

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

uint64_t LastLevelCacheBytes() {
  // cpu0's caches: the one of the highest level that holds data, times the number of such caches (the online
  // CPUs over those sharing cpu0's).
  const std::string base = "/sys/devices/system/cpu/cpu0/cache/index";
  int level = 0;
  uint64_t size = 0;
  int64_t sharing = 1;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = base + std::to_string(i) + "/";
    const std::string type = ReadLine(dir + "type");
    if (type.empty()) break;
    if (type == "Instruction") continue;
    const int l = std::atoi(ReadLine(dir + "level").c_str());
    const uint64_t bytes = ParseCacheSize(ReadLine(dir + "size"));
    if (l > level && bytes > 0) {
      level = l;
      size = bytes;
      sharing = std::max<int64_t>(1, CountCpuList(ReadLine(dir + "shared_cpu_list")));
    }
  }
  if (size > 0) {
    const int64_t online = std::max<int64_t>(1, CountCpuList(ReadLine("/sys/devices/system/cpu/online")));
    return size * static_cast<uint64_t>(std::max<int64_t>(1, online / sharing));
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  for (const int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) return static_cast<uint64_t>(v);
  }
#endif
  return 0;
}

uint64_t AvailableMemory() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof(line), f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kib) << 10;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
}

uint64_t EvictionBytes(uint64_t llc_bytes, uint64_t available_bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t twice = llc_bytes > kMaxEvictionBytes ? kMaxEvictionBytes : 2 * llc_bytes;
  const uint64_t eighth = available_bytes / 8 / kMiB * kMiB;  // rounded down: never over the eighth
  return std::clamp(std::min((twice + kMiB - 1) / kMiB * kMiB, eighth), kMinEvictionBytes, kMaxEvictionBytes);
}

uint64_t DefaultEvictionBytes() { return EvictionBytes(LastLevelCacheBytes(), AvailableMemory()); }

EvictionCopy::EvictionCopy(uint64_t bytes) : bytes(bytes), src(bytes), dst(bytes) {
  std::memset(src.data, 1, bytes);
  std::memset(dst.data, 0, bytes);
}

double MedianSeconds(const std::function<void()>& fn, int warmup, int min_runs, int max_runs,
                     double budget_seconds) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  double spent = 0.0;
  while (static_cast<int>(times.size()) < max_runs &&
         (static_cast<int>(times.size()) < min_runs || spent < budget_seconds)) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    times.push_back(s);
    spent += s;
  }
  return Median(std::move(times));
}

namespace {

// Calls fn(begin, end, part) on up to `threads` threads over 64-byte aligned parts of [0, bytes). The team is
// at most kMaxThreads (the library's limit) and one thread per 64 bytes: libgomp sizes per-thread start data
// on the calling thread's stack, which a team of 100000 overflows, and more threads than lines copy nothing.
template <typename Fn>
void ForEachPart(size_t bytes, int threads, const Fn& fn) {
  size_t team = std::min(static_cast<size_t>(std::max(threads, 1)), static_cast<size_t>(kMaxThreads));
  team = std::max<size_t>(std::min(team, bytes / 64), 1);
#pragma omp parallel num_threads(static_cast<int>(team))
  {
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t i = static_cast<size_t>(omp_get_thread_num());
    const size_t chunk = (bytes / parts) & ~size_t{63};
    const size_t begin = i * chunk;
    fn(begin, i + 1 == parts ? bytes : begin + chunk, i);
  }
}

// Calls fn(begin, end, thread) over [0, bytes) cut into chunks of 64-byte multiples, about sixteen per
// thread, that up to `threads` threads take first come first served: a thread slowed by a shared core takes
// fewer chunks instead of holding the others at the join, as the library's kernels do with their token walks
// (a static split would make the yardstick slower than the kernels it measures on such a machine).
template <typename Fn>
void ForEachChunk(size_t bytes, int threads, const Fn& fn) {
  size_t team = std::min(static_cast<size_t>(std::max(threads, 1)), static_cast<size_t>(kMaxThreads));
  team = std::max<size_t>(std::min(team, bytes / 64), 1);
  if (team == 1) {
    fn(size_t{0}, bytes, size_t{0});
    return;
  }
  const size_t chunk = std::max<size_t>(64, (bytes / (16 * team)) & ~size_t{63});
  std::atomic<size_t> next{0};
#pragma omp parallel num_threads(static_cast<int>(team))
  {
    const size_t i = static_cast<size_t>(omp_get_thread_num());
    for (size_t begin = next.fetch_add(chunk, std::memory_order_relaxed); begin < bytes;
         begin = next.fetch_add(chunk, std::memory_order_relaxed)) {
      fn(begin, std::min(bytes, begin + chunk), i);
    }
  }
}

}  // namespace

namespace {
CopyWalk g_walk = CopyWalk::kFourPagesInStep;
}  // namespace

CopyWalk YardstickWalk() { return g_walk; }
void SetYardstickWalk(CopyWalk walk) { g_walk = walk; }

void ParallelCopy(void* dst, const void* src, size_t bytes, int threads) {
  const bool stream = bytes >= kStreamCopyMinBytes;
  const CopyWalk walk = g_walk;
  ForEachChunk(bytes, threads, [&](size_t begin, size_t end, size_t) {
    char* d = static_cast<char*>(dst) + begin;
    const char* s = static_cast<const char*>(src) + begin;
    if (stream) {
      StreamCopy(d, s, end - begin, walk);
    } else {
      std::memcpy(d, s, end - begin);
    }
  });
}

double PairedWithCopy(const std::function<void()>& fn, double fn_bytes, void* dst, const void* src,
                      size_t copy_bytes, int threads, double* ratio, double* copy_bandwidth, int min_runs,
                      int max_runs, double budget_seconds) {
  using Clock = std::chrono::steady_clock;
  auto seconds_of = [](const std::function<void()>& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const std::function<void()> copy = [&] { ParallelCopy(dst, src, copy_bytes, threads); };
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> times, ratios, copies;
  double spent = 0.0;
  while (static_cast<int>(times.size()) < max_runs &&
         (static_cast<int>(times.size()) < min_runs || spent < budget_seconds)) {
    const double c = seconds_of(copy);
    const double t = seconds_of(fn);
    const double copy_bw = 2.0 * static_cast<double>(copy_bytes) / c;
    times.push_back(t);
    copies.push_back(copy_bw);
    ratios.push_back(fn_bytes / t / copy_bw);
    spent += c + t;
  }
  *ratio = Median(ratios);
  *copy_bandwidth = Median(copies);
  return Median(times);
}

namespace {

struct FreeAligned {
  void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
};
using Buffer = std::unique_ptr<char, FreeAligned>;

// Source and destination of `bytes` each, every page touched first by the thread that will copy it.
std::pair<Buffer, Buffer> CopyBuffers(size_t bytes, int threads) {
  Buffer src(static_cast<char*>(::operator new(bytes, std::align_val_t(64))));
  Buffer dst(static_cast<char*>(::operator new(bytes, std::align_val_t(64))));
  ForEachPart(bytes, threads, [&](size_t begin, size_t end, size_t i) {
    std::memset(src.get() + begin, static_cast<int>(i + 1), end - begin);
    std::memset(dst.get() + begin, 0, end - begin);
  });
  return {std::move(src), std::move(dst)};
}

}  // namespace

uint64_t ParallelRead(const void* src, size_t bytes, int threads, CopyWalk walk) {
  std::vector<uint64_t> sums(static_cast<size_t>(kMaxThreads), 0);
  ForEachChunk(bytes, threads, [&](size_t begin, size_t end, size_t i) {
    sums[i] += StreamRead(static_cast<const char*>(src) + begin, end - begin, walk);
  });
  uint64_t sum = 0;
  for (uint64_t s : sums) sum += s;
  return sum;
}

void ParallelWrite(void* dst, size_t bytes, uint8_t value, int threads) {
  ForEachChunk(bytes, threads, [&](size_t begin, size_t end, size_t) {
    StreamWrite(static_cast<char*>(dst) + begin, end - begin, value);
  });
}

CopyWalkChoice ChooseCopyWalk(int threads, size_t bytes, int pairs) {
  using Clock = std::chrono::steady_clock;
  const auto [src, dst] = CopyBuffers(bytes, threads);
  std::vector<double> rates[std::size(kCopyWalks)];
  for (int i = 0; i <= pairs; ++i) {  // the first pair warms up
    for (size_t w = 0; w < std::size(kCopyWalks); ++w) {
      SetYardstickWalk(kCopyWalks[w]);
      const auto t0 = Clock::now();
      ParallelCopy(dst.get(), src.get(), bytes, threads);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i > 0) rates[w].push_back(2.0 * static_cast<double>(bytes) / seconds);
    }
  }
  CopyWalkChoice choice;
  choice.in_step_bytes_per_second = Median(rates[0]);
  choice.in_order_bytes_per_second = Median(rates[1]);
  choice.walk = choice.in_order_bytes_per_second > choice.in_step_bytes_per_second ? CopyWalk::kSequential
                                                                                   : CopyWalk::kFourPagesInStep;
  SetYardstickWalk(choice.walk);
  return choice;
}

CopyReadWrite CopyReadWriteBandwidth(int threads, size_t bytes, int pairs) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto [src, dst] = CopyBuffers(bytes, threads);
  std::vector<double> copies, reads[std::size(kCopyWalks)], ratios[std::size(kCopyWalks)], writes, write_ratios;
  volatile uint64_t sink = 0;
  for (int i = 0; i <= pairs; ++i) {  // the first pair warms up
    for (size_t w = 0; w < std::size(kCopyWalks); ++w) {
      const auto t0 = Clock::now();
      ParallelCopy(dst.get(), src.get(), bytes, threads);
      const auto t1 = Clock::now();
      sink = sink + ParallelRead(dst.get(), bytes, threads, kCopyWalks[w]);  // streamed to memory: not in the caches
      const auto t2 = Clock::now();
      if (i == 0) continue;
      copies.push_back(2.0 * static_cast<double>(bytes) / seconds(t0, t1));
      reads[w].push_back(static_cast<double>(bytes) / seconds(t1, t2));
      ratios[w].push_back(reads[w].back() / copies.back());
    }
    const auto t0 = Clock::now();
    ParallelCopy(dst.get(), src.get(), bytes, threads);
    const auto t1 = Clock::now();
    ParallelWrite(dst.get(), bytes, static_cast<uint8_t>(i), threads);
    const auto t2 = Clock::now();
    if (i == 0) continue;
    const double copy = 2.0 * static_cast<double>(bytes) / seconds(t0, t1);
    writes.push_back(static_cast<double>(bytes) / seconds(t1, t2));
    write_ratios.push_back(writes.back() / copy);
  }
  const int w = Median(reads[1]) > Median(reads[0]) ? 1 : 0;
  CopyReadWrite r;
  r.copy_bytes_per_second = Median(copies);
  r.read_walk = kCopyWalks[w];
  r.read_bytes_per_second = Median(reads[w]);
  r.read_over_copy = Median(ratios[w]);
  r.write_bytes_per_second = Median(writes);
  r.write_over_copy = Median(write_ratios);
  return r;
}

}  // namespace moegrad::tool
