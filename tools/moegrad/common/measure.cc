#include "tools/moegrad/common/measure.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
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

EvictionCopy::EvictionCopy() : src(kBytes), dst(kBytes) {
  std::memset(src.data, 1, kBytes);
  std::memset(dst.data, 0, kBytes);
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

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t bytes, int threads) {
  const bool stream = bytes >= kStreamCopyMinBytes;
  ForEachPart(bytes, threads, [&](size_t begin, size_t end, size_t) {
    char* d = static_cast<char*>(dst) + begin;
    const char* s = static_cast<const char*>(src) + begin;
    if (stream) {
      StreamCopy(d, s, end - begin);
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

double CopyBandwidth(int threads, size_t bytes) {
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<char, Free> src(static_cast<char*>(::operator new(bytes, std::align_val_t(64))));
  std::unique_ptr<char, Free> dst(static_cast<char*>(::operator new(bytes, std::align_val_t(64))));
  // Touch every page from the thread that will copy it.
  ForEachPart(bytes, threads, [&](size_t begin, size_t end, size_t i) {
    std::memset(src.get() + begin, static_cast<int>(i + 1), end - begin);
    std::memset(dst.get() + begin, 0, end - begin);
  });
  const double seconds = MedianSeconds([&] { ParallelCopy(dst.get(), src.get(), bytes, threads); }, 1, 5, 9, 0.3);
  return 2.0 * static_cast<double>(bytes) / seconds;
}

}  // namespace moegrad::tool
