// A planned call: phase one (the operator's Plan) has checked every rule and chosen the backend; phase two
// (Run) checks the workspace and hands the problem to that backend.
#pragma once

#include <cstdint>
#include <memory>
#include <new>

#include "moegrad/op_info.hpp"
#include "src/backend/backend.h"
#include "src/core/status_util.h"
#include "src/core/types.h"

namespace moegrad::internal {

class PlanBase {
 public:
  PlanBase(const char* op_name, uint64_t workspace_size) : op_name_(op_name), workspace_size_(workspace_size) {}
  virtual ~PlanBase() = default;
  PlanBase(const PlanBase&) = delete;
  PlanBase& operator=(const PlanBase&) = delete;

  const char* op_name() const { return op_name_; }
  uint64_t workspace_size() const { return workspace_size_; }

  // The workspace rules of the two-phase API, then Execute().
  core::Status Run(void* workspace, uint64_t workspace_bytes, core::Stream stream) const;

 protected:
  // Validates index data completely, then writes the outputs; nothing is written before an error.
  virtual core::Status Execute(void* workspace, core::Stream stream) const = 0;

 private:
  const char* op_name_;
  uint64_t workspace_size_;
};

}  // namespace moegrad::internal

namespace moegrad::ops {

using PlanPtr = std::unique_ptr<internal::PlanBase>;

// The plan of every operator: its problem and the backend that runs it.
template <typename Problem>
class OpPlan final : public internal::PlanBase {
 public:
  OpPlan(const Problem& problem, const backend::OpBackend<Problem>* backend, uint64_t workspace_size)
      : PlanBase(Problem::kName, workspace_size), problem_(problem), backend_(backend) {}

 protected:
  core::Status Execute(void* workspace, core::Stream stream) const override {
    return backend_->Run(problem_, workspace, stream);
  }

 private:
  const Problem problem_;
  const backend::OpBackend<Problem>* backend_;
};

// For static_assert: two names are the same string.
constexpr bool SameName(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || SameName(a + 1, b + 1));
}

// The end of every phase one of the operator whose arguments are `Args`: the backend of `device` (UNSUPPORTED
// when this build has none), the workspace size it needs, and the plan.
template <typename Args, typename Problem>
core::Status MakePlan(const Problem& problem, core::Device device, PlanPtr* plan) {
  static_assert(SameName(Problem::kName, OpInfo<Args>::kName), "one name per operator");
  const backend::OpBackend<Problem>* backend = backend::Find<Problem>(device);
  if (backend == nullptr) {
    return core::MakeStatus(core::StatusCode::kUnsupported,
                            "%s: no backend of this build runs tensors on device %d; it runs them on the host",
                            Problem::kName, static_cast<int>(device));
  }
  uint64_t workspace = 0;
  MOEGRAD_RETURN_IF_ERROR(backend->WorkspaceSize(problem, &workspace));
  PlanPtr out(new (std::nothrow) OpPlan<Problem>(problem, backend, workspace));
  if (!out) {
    return core::MakeStatus(core::StatusCode::kRuntimeError, "%s: cannot allocate the plan", Problem::kName);
  }
  *plan = std::move(out);
  return core::Status::Ok();
}

}  // namespace moegrad::ops
