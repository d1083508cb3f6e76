// The CPU backend's thread count: SetThreads, else MOEGRAD_NUM_THREADS (1..4096), else every CPU the process
// may use.
#include <sched.h>

#include <atomic>
#include <cstdlib>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/parallel.h"

namespace moegrad {
namespace {

std::atomic<int> g_num_threads{0};  // 0: the default

int DefaultThreads() {
  static const int threads = [] {
    if (const char* env = std::getenv("MOEGRAD_NUM_THREADS")) {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v >= 1 && v <= 4096) return static_cast<int>(v);
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    return 1;
  }();
  return threads;
}

}  // namespace

int internal::MaxThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : DefaultThreads();
}

void backend::cpu::SetThreads(int n) { g_num_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }
int backend::cpu::Threads() { return internal::MaxThreads(); }

}  // namespace moegrad
