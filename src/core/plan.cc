// Plan (the C++ handle of a planned call), the workspace rules of phase two, and the thread settings.
#include "moegrad/plan.hpp"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "src/core/parallel.h"
#include "src/core/plan_base.h"
#include "src/core/status_util.h"

namespace moegrad {
namespace internal {

Status PlanBase::Run(void* workspace, uint64_t workspace_bytes) const {
  if (workspace == nullptr && workspace_bytes != 0) {
    return MakeStatus(StatusCode::kNullptr, "%s: workspace is null but workspaceSize is %llu", op_name_,
                      static_cast<unsigned long long>(workspace_bytes));
  }
  if (workspace_bytes < workspace_size_) {
    return MakeStatus(StatusCode::kInvalid,
                      "%s: workspaceSize %llu is smaller than the %llu bytes the first phase reported", op_name_,
                      static_cast<unsigned long long>(workspace_bytes),
                      static_cast<unsigned long long>(workspace_size_));
  }
  return Execute(workspace);
}

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

int MaxThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : DefaultThreads();
}

}  // namespace internal

Plan::Plan() = default;
Plan::Plan(std::unique_ptr<internal::PlanBase> impl) : impl_(std::move(impl)) {}
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
Plan::~Plan() = default;

uint64_t Plan::workspace_size() const { return impl_ ? impl_->workspace_size() : 0; }

Status Plan::Run(void* workspace, uint64_t workspace_bytes) const {
  if (!impl_) return Status(StatusCode::kNullptr, "Plan::Run: the plan is empty");
  return impl_->Run(workspace, workspace_bytes);
}

Status Plan::Run() const {
  if (!impl_) return Status(StatusCode::kNullptr, "Plan::Run: the plan is empty");
  const uint64_t bytes = impl_->workspace_size();
  if (bytes == 0) return impl_->Run(nullptr, 0);
  void* ws = ::operator new(bytes, std::align_val_t(64), std::nothrow);
  if (ws == nullptr) {
    return MakeStatus(StatusCode::kRuntimeError, "%s: cannot allocate a workspace of %llu bytes",
                      impl_->op_name(), static_cast<unsigned long long>(bytes));
  }
  Status s = impl_->Run(ws, bytes);
  ::operator delete(ws, std::align_val_t(64));
  return s;
}

void SetNumThreads(int n) { internal::g_num_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }
int NumThreads() { return internal::MaxThreads(); }
const char* Version() { return MOEGRAD_VERSION; }

}  // namespace moegrad
