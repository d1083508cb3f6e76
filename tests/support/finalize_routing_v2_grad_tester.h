// Builder-style tester of MoeFinalizeRoutingV2Grad (after XNNPACK's operator testers):
//
//   FinalizeRoutingV2GradTester().tokens(7).hidden(33).topk(3).mode(1).experts(4).capacity(5)
//       .scales(true).bias(true).duplicates(true).layout(Layout::kPadded).seed(2).Test(DType::kBFloat16);
//   FinalizeRoutingV2GradTester().tokens(7).hidden(33).seed(3).Test({DType::kBFloat16, DType::kFloat32});
//
// builds random inputs in TestTensors (random slack around every view; scales and gradScalesOut in the weights'
// dtype, the other float tensors in the tokens', the two the same or not), runs the operator through the chosen
// API, runs the scalar reference on separate outputs and checks the contract of
// docs/ops/finalize_routing_v2_grad.md: gradExpandedX bit-identical to the reference, rows nobody writes zero,
// gradScales within the fp32 summation bound, no byte outside an output view written, gradScalesOut untouched
// without scales, inputs untouched.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {

// The tensors and attributes of one call. Absent tensors are nullopt (required ones too, for error tests).
struct FinalizeRoutingV2GradCase {
  DType dtype = DType::kFloat32;         // gradY, expandedX, bias, gradExpandedXOut
  DType weight_dtype = DType::kFloat32;  // scales, gradScalesOut
  int64_t drop_pad_mode = 0;
  int64_t active_num = 0;
  int64_t expert_num = 0;
  int64_t expert_capacity = 0;
  std::optional<TestTensor> grad_y, expanded_row_idx, expanded_x, scales, expert_idx, bias;
  std::optional<TestTensor> grad_expanded_x, grad_scales;

  // The tensors in the C signature's order (OpInfo's), 0 = gradY .. 7 = gradScalesOut.
  std::array<std::optional<TestTensor>*, 8> Tensors();
  std::array<const std::optional<TestTensor>*, 8> Tensors() const;
  // The call: its tensors (null for absent ones) and attributes.
  TestCall<FinalizeRoutingV2GradArgs> Call();
  // The C++ API's arguments.
  FinalizeRoutingV2GradArgs Args() const;
};

// aclTensors over a case's TestTensors (null for absent ones), destroyed with this object:
// AclFinalizeRoutingV2GradCall call(c.Call()).
using AclFinalizeRoutingV2GradCall = AclCall<FinalizeRoutingV2GradArgs>;

class FinalizeRoutingV2GradTester {
 public:
  FinalizeRoutingV2GradTester& tokens(int64_t v) {
    tokens_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& hidden(int64_t v) {
    hidden_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& topk(int64_t v) {
    topk_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& mode(int64_t v) {
    mode_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& experts(int64_t v) {
    experts_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& capacity(int64_t v) {
    capacity_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& active_num(int64_t v) {
    active_num_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& scales(bool v) {
    scales_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& bias(bool v) {
    bias_ = v;
    return *this;
  }
  // Index values drawn independently (rows written by several pairs, rows written by none) instead of
  // the forward's one-to-one layout.
  FinalizeRoutingV2GradTester& duplicates(bool v) {
    duplicates_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& layout(Layout v) {
    in_layout_ = out_layout_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& input_layout(Layout v) {
    in_layout_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& output_layout(Layout v) {
    out_layout_ = v;
    return *this;
  }
  // Without scales: pass expandedX anyway (validated, not read) / a gradScalesOut that must stay untouched /
  // an expertIdx full of out-of-range values (not read without bias).
  FinalizeRoutingV2GradTester& pass_expanded_x(bool v) {
    pass_expanded_x_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& pass_grad_scales(bool v) {
    pass_grad_scales_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& pass_expert_idx(bool v) {
    pass_expert_idx_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& seed(uint64_t v) {
    seed_ = v;
    return *this;
  }
  FinalizeRoutingV2GradTester& api(Api v) {
    api_ = v;
    return *this;
  }

  int64_t rows() const;  // rows of expandedX / gradExpandedX
  std::string Describe(DTypes dtypes) const;

  // A valid case: random inputs, outputs full of random bytes. One DType: both groups in it.
  FinalizeRoutingV2GradCase Build(DTypes dtypes) const;
  FinalizeRoutingV2GradCase Build(DType dtype) const { return Build({dtype, dtype}); }
  // Runs the operator once through api() and checks everything against the reference.
  void Test(DTypes dtypes) const;
  void Test(DType dtype) const { Test({dtype, dtype}); }
  // Test() on every SIMD target with 1, 2 and 3 threads; every run's output storage must be bit-identical.
  void TestDeterminism(DTypes dtypes) const;
  void TestDeterminism(DType dtype) const { TestDeterminism({dtype, dtype}); }

 private:
  // Runs the operator on `c` through api(); returns its status (0 on success) and the message.
  int Run(FinalizeRoutingV2GradCase& c, std::string* message) const;
  // Checks the outputs of `c` against the reference; `before` is the case as it was before the call.
  void Check(const FinalizeRoutingV2GradCase& c, const FinalizeRoutingV2GradCase& before) const;

  int64_t tokens_ = 5, hidden_ = 17, topk_ = 2, mode_ = 0, experts_ = 4, capacity_ = 3, active_num_ = 0;
  bool scales_ = true, bias_ = false, duplicates_ = false;
  bool pass_expanded_x_ = false, pass_grad_scales_ = false, pass_expert_idx_ = false;
  Layout in_layout_ = Layout::kContiguous, out_layout_ = Layout::kContiguous;
  uint64_t seed_ = 1;
  Api api_ = Api::kCpp;
};

}  // namespace moegrad::testing
