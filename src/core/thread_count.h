// The library's worker-thread limit and the syntax of MOEGRAD_NUM_THREADS. Header-only, so that the tests
// (through src/testing/thread_count.h) check the very code the CPU backend runs.
#pragma once

#include <cerrno>
#include <cstdlib>

namespace moegrad::core {

// The most worker threads any call uses (moegrad::kMaxThreads of the public API).
inline constexpr int kMaxThreads = 4096;

// True when `s` is a decimal integer in 1..kMaxThreads: digits only, no sign, space or suffix; stores it in
// *out. Anything else (null, empty, "abc", "8 ", "1e3", "100000", a value past INT64_MAX) is false.
inline bool ParseThreadCount(const char* s, int* out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (errno == ERANGE || *end != '\0' || v < 1 || v > kMaxThreads) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace moegrad::core
