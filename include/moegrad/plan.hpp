// moegrad/plan.hpp: a validated, planned operator call (the C++ face of an aclOpExecutor).
#pragma once

#include <cstdint>
#include <memory>

#include "moegrad/export.hpp"
#include "moegrad/status.hpp"

namespace moegrad {

namespace internal {
class PlanBase;
}  // namespace internal

// Made by a Plan* function once every shape, dtype and attribute has been checked. Run() may be called any
// number of times; the tensors the plan was made from must stay alive (and keep their addresses) meanwhile.
class MOEGRAD_API Plan {
 public:
  Plan();
  explicit Plan(std::unique_ptr<internal::PlanBase> impl);
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  ~Plan();

  bool valid() const { return impl_ != nullptr; }
  // Bytes of scratch memory Run() needs from the caller.
  uint64_t workspace_size() const;
  // Checks index data (nothing is written when that fails), then computes. `workspace` holds at least
  // workspace_size() bytes; it may be null when that is 0.
  Status Run(void* workspace, uint64_t workspace_bytes) const;
  // Same, with a workspace this call allocates.
  Status Run() const;

  internal::PlanBase* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<internal::PlanBase> impl_;
};

// The most worker threads a call uses; also the range 1..kMaxThreads of MOEGRAD_NUM_THREADS.
inline constexpr int kMaxThreads = 4096;

// Worker threads of every later call: n in 1..kMaxThreads (a larger n means kMaxThreads); n <= 0 restores the
// default: MOEGRAD_NUM_THREADS, or every CPU the process may use (at most kMaxThreads). A MOEGRAD_NUM_THREADS
// that is set but not an integer in 1..kMaxThreads is reported once per process on stderr and ignored.
// Results are bit-identical for every value.
MOEGRAD_API void SetNumThreads(int n);
MOEGRAD_API int NumThreads();
// The SIMD target the kernels dispatch to on this CPU, e.g. "AVX3".
MOEGRAD_API const char* SimdTarget();
MOEGRAD_API const char* Version();

}  // namespace moegrad
