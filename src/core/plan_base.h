// The operator layer's planned call: phase one builds it after every metadata rule has passed; phase two
// (Run) checks the workspace, then the operator validates index data and computes.
#pragma once

#include <cstdint>

#include "moegrad/status.hpp"

namespace moegrad::internal {

class PlanBase {
 public:
  explicit PlanBase(const char* op_name) : op_name_(op_name) {}
  virtual ~PlanBase() = default;
  PlanBase(const PlanBase&) = delete;
  PlanBase& operator=(const PlanBase&) = delete;

  const char* op_name() const { return op_name_; }
  uint64_t workspace_size() const { return workspace_size_; }

  // Workspace rules of the two-phase API, then Execute().
  Status Run(void* workspace, uint64_t workspace_bytes) const;

 protected:
  // Validates index data completely, then writes the outputs. Never writes anything before returning an
  // error. `workspace` holds workspace_size() bytes, 64-byte aligned pieces laid out by phase one.
  virtual Status Execute(void* workspace) const = 0;

  uint64_t workspace_size_ = 0;

 private:
  const char* op_name_;
};

}  // namespace moegrad::internal
