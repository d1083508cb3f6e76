// The CPU backend's thread count: SetThreads, else MOEGRAD_NUM_THREADS (1..kMaxThreads), else every CPU the
// process may use.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/parallel.h"
#include "src/core/thread_count.h"

namespace moegrad {
namespace {

std::atomic<int> g_num_threads{0};  // 0: the default

int CpuCount() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return std::min(CPU_COUNT(&set), core::kMaxThreads);
  }
  return 1;
}

// Read once per process: a value that is set but not a thread count is reported once, on stderr, and the
// default used instead (a typo must not go unnoticed, nor stop a program that merely links the library).
int DefaultThreads() {
  static const int threads = [] {
    const char* env = std::getenv("MOEGRAD_NUM_THREADS");
    int n = 0;
    if (env != nullptr && core::ParseThreadCount(env, &n)) return n;
    const int cpus = CpuCount();
    if (env != nullptr) {
      std::fprintf(stderr, "moegrad: MOEGRAD_NUM_THREADS=%s is not an integer in 1..%d; using %d threads (every CPU)\n",
                   env, core::kMaxThreads, cpus);
    }
    return cpus;
  }();
  return threads;
}

}  // namespace

int internal::MaxThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : DefaultThreads();
}

void backend::cpu::SetThreads(int n) {
  g_num_threads.store(n > 0 ? std::min(n, core::kMaxThreads) : 0, std::memory_order_relaxed);
}
int backend::cpu::Threads() { return internal::MaxThreads(); }

}  // namespace moegrad
