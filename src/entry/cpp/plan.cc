// Plan (the C++ handle of a planned call) and the library-wide settings of moegrad/plan.hpp and tensor.hpp.
#include "moegrad/plan.hpp"

#include <new>

#include "moegrad/tensor.hpp"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/thread_count.h"
#include "src/entry/public_types.h"
#include "src/ops/plan.h"

namespace moegrad {

Plan::Plan() = default;
Plan::Plan(std::unique_ptr<internal::PlanBase> impl) : impl_(std::move(impl)) {}
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
Plan::~Plan() = default;

uint64_t Plan::workspace_size() const { return impl_ ? impl_->workspace_size() : 0; }

Status Plan::Run(void* workspace, uint64_t workspace_bytes) const {
  if (!impl_) return Status(StatusCode::kNullptr, "Plan::Run: the plan is empty");
  return entry::ToPublic(impl_->Run(workspace, workspace_bytes, nullptr));
}

Status Plan::Run() const {
  if (!impl_) return Status(StatusCode::kNullptr, "Plan::Run: the plan is empty");
  const uint64_t bytes = impl_->workspace_size();
  if (bytes == 0) return entry::ToPublic(impl_->Run(nullptr, 0, nullptr));
  void* ws = ::operator new(bytes, std::align_val_t(64), std::nothrow);
  if (ws == nullptr) {
    return entry::ToPublic(core::MakeStatus(core::StatusCode::kRuntimeError,
                                            "%s: cannot allocate a workspace of %llu bytes", impl_->op_name(),
                                            static_cast<unsigned long long>(bytes)));
  }
  const core::Status s = impl_->Run(ws, bytes, nullptr);
  ::operator delete(ws, std::align_val_t(64));
  return entry::ToPublic(s);
}

static_assert(kMaxThreads == core::kMaxThreads, "the public and internal thread limits differ");

void SetNumThreads(int n) { backend::cpu::SetThreads(n); }
int NumThreads() { return backend::cpu::Threads(); }
const char* SimdTarget() { return backend::cpu::SimdTarget(); }
const char* Version() { return MOEGRAD_VERSION; }
const char* DTypeName(DType t) { return core::DTypeName(static_cast<core::DType>(t)); }

}  // namespace moegrad
