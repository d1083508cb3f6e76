// moegrad/status.hpp: the outcome of every moegrad call. Codes are the aclnn status values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace moegrad {

enum class StatusCode : int32_t {
  kOk = 0,
  kNullptr = 161001,       // ACLNN_ERR_PARAM_NULLPTR: a required tensor is missing
  kInvalid = 161002,       // ACLNN_ERR_PARAM_INVALID: any other bad argument
  kRuntimeError = 361001,  // ACLNN_ERR_RUNTIME_ERROR: valid but not possible here (e.g. allocation failed)
  kInner = 561000,         // ACLNN_ERR_INNER: a bug in moegrad
  kUnsupported = 561003,   // ACLNN_ERR_INNER_FIND_KERNEL_ERROR: valid, but no backend of this build runs it
                           // (the tensors are on a device it has no kernels for, or on several devices)
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // One line naming the operator, the argument, the offending value and the rule; empty when ok().
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace moegrad
