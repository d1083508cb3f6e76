// How a test calls an operator: the API (C++ one call, C++ plan, aclnn's two phases), aclTensors over TestTensors,
// and one call over TestTensors in the order of OpInfo<Args> (TestCall, AclCall), run through any of the APIs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "moegrad/plan.hpp"
#include "tests/support/op_entry.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {

enum class Api { kCpp, kCppPlan, kAclnn };
const char* ApiName(Api api);  // "cpp", "cpp-plan", "aclnn"

struct AclTensorDeleter {
  void operator()(aclTensor* t) const { aclDestroyTensor(t); }
};
using AclTensorPtr = std::unique_ptr<aclTensor, AclTensorDeleter>;

// An aclTensor over a TestTensor's whole storage (view offset and strides kept); null data when asked.
aclTensor* AclOf(TestTensor& t, bool null_data = false);
// The same view of `t`, but over the storage of `other` (which must be at least as large).
aclTensor* AclOfOver(TestTensor& t, TestTensor& other);

// The message of a failed call: one line, starting with "<op>: " and containing `part`.
void ExpectErrorMessage(const std::string& message, const std::string& op, const std::string& part);

// The workspace of phase two: `bytes` (at least one) 64-byte aligned, from aclrtMalloc.
class Workspace {
 public:
  explicit Workspace(uint64_t bytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// One call over TestTensors: the tensors in OpInfo<Args>::kTensors order (null: absent) and the attributes in
// kAttrs order. The TestTensors must outlive it.
template <typename Args>
struct TestCall {
  using OpArgs = Args;
  std::array<TestTensor*, kNumTensors<Args>> tensors{};
  std::array<int64_t, kNumAttrs<Args>> attrs{};
  IntArrays<Args> arrays{};  // kIntArrays order, nullopt: absent

  // The C++ API's arguments: the tensors' views (an absent required tensor gets an empty view).
  Args CppArgs() const {
    std::array<const TensorView*, kNumTensors<Args>> views{};
    for (size_t i = 0; i < views.size(); ++i) views[i] = tensors[i] != nullptr ? &tensors[i]->view() : nullptr;
    return MakeArgs<Args>(views.data(), attrs.data(), &arrays);
  }
  // The outputs present, in kTensors order.
  std::vector<TestTensor*> Outputs() const {
    std::vector<TestTensor*> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (OpInfo<Args>::kTensors[i].role == ArgRole::kOutput && tensors[i] != nullptr) out.push_back(tensors[i]);
    }
    return out;
  }
  // Runs the operator through `api`; with kCppPlan and kAclnn one plan or (repeatable) executor runs `runs`
  // times. Returns the first failure, else success.
  Status Run(Api api, int runs = 1) const;
};

// The aclTensors of one call (null for absent tensors, destroyed with this object) and its attributes.
template <typename Args>
class AclCall {
 public:
  explicit AclCall(const TestCall<Args>& c);
  AclCall(const AclCall&) = delete;
  AclCall& operator=(const AclCall&) = delete;

  // Replaces tensor `index` (kTensors order) with `t` (owned from now on; may be null).
  void Replace(size_t index, aclTensor* t) { t_[index].reset(t); }
  // Tensor `index` (kTensors order), null when absent.
  aclTensor* tensor(size_t index) const { return t_[index].get(); }
  aclnnStatus PhaseOne(uint64_t* workspace_size, aclOpExecutor** executor) const;
  // Phase one, then phase two `runs` times on a workspace of exactly the reported size (the executor made
  // repeatable, and destroyed at the end, when runs > 1). Returns the first failure, else success.
  aclnnStatus Run(int runs = 1) const;

 private:
  std::array<AclTensorPtr, kNumTensors<Args>> t_;
  std::array<int64_t, kNumAttrs<Args>> attrs_;
  IntArrays<Args> arrays_;
};

// --- implementation ----------------------------------------------------------------------------------------

template <typename Args>
AclCall<Args>::AclCall(const TestCall<Args>& c) : attrs_(c.attrs), arrays_(c.arrays) {
  for (size_t i = 0; i < t_.size(); ++i) {
    if (c.tensors[i] == nullptr) continue;
    t_[i].reset(AclOf(*c.tensors[i]));
    if (t_[i] == nullptr) {
      ADD_FAILURE_AT(__FILE__, __LINE__) << "aclCreateTensor " << OpInfo<Args>::kTensors[i].name << ": "
                                         << aclGetRecentErrMsg();
    }
  }
}

template <typename Args>
aclnnStatus AclCall<Args>::PhaseOne(uint64_t* workspace_size, aclOpExecutor** executor) const {
  std::array<aclTensor*, kNumTensors<Args>> raw{};
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = t_[i].get();
  return AclnnPhaseOne<Args>(raw.data(), attrs_.data(), workspace_size, executor, &arrays_);
}

template <typename Args>
aclnnStatus AclCall<Args>::Run(int runs) const {
  uint64_t ws_size = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus st = PhaseOne(&ws_size, &executor);
  if (st != ACLNN_SUCCESS) return st;
  if (runs > 1 && (st = aclSetAclOpExecutorRepeatable(executor)) != ACLNN_SUCCESS) return st;
  Workspace ws(ws_size);
  for (int r = 0; r < runs && st == ACLNN_SUCCESS; ++r) {
    st = OpEntry<Args>::kAclnnPhaseTwo(ws_size > 0 ? ws.get() : nullptr, ws_size, executor, nullptr);
  }
  if (runs > 1) aclDestroyAclOpExecutor(executor);
  return st;
}

template <typename Args>
Status TestCall<Args>::Run(Api api, int runs) const {
  switch (api) {
    case Api::kCpp:
      return OpInfo<Args>::kRun(CppArgs());
    case Api::kCppPlan: {
      const Args a = CppArgs();
      Plan plan;
      Status s = OpInfo<Args>::kPlan(a, &plan);
      // Even runs on a workspace of exactly the planned size, odd ones on the plan's own.
      for (int r = 0; r < runs && s.ok(); ++r) {
        if (r % 2 == 0) {
          Workspace ws(plan.workspace_size());
          s = plan.Run(ws.get(), plan.workspace_size());
        } else {
          s = plan.Run();
        }
      }
      return s;
    }
    case Api::kAclnn: {
      const aclnnStatus st = AclCall<Args>(*this).Run(runs);
      return st == ACLNN_SUCCESS ? Status::Ok() : Status(static_cast<StatusCode>(st), aclGetRecentErrMsg());
    }
  }
  return Status(StatusCode::kInvalid, "unknown Api");
}

}  // namespace moegrad::testing
