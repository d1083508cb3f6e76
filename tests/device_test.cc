// The backend seam: a call whose tensors are on a device this build has no backend for, or on several devices,
// fails in phase one with StatusCode::kUnsupported (ACLNN_ERR_INNER_FIND_KERNEL_ERROR) and a one-line message,
// from the C++ and the C API alike, and writes nothing. The same calls on the host succeed, so only the device
// makes them fail.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moegrad/op_info.hpp"
#include "src/testing/acl_access.h"
#include "tests/support/api.h"

namespace moegrad::testing {
namespace {

// No backend runs this device: a value no build defines.
constexpr Device kNoBackend = static_cast<Device>(7);

// The tensors of one valid call, set by their OpInfo names, and its attributes.
template <typename Args>
struct ValidCall {
  std::array<std::optional<TestTensor>, kNumTensors<Args>> tensors;
  std::array<int64_t, kNumAttrs<Args>> attrs{};

  ValidCall& Tensor(const char* name, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> ints = {}) {
    TestTensor t(dtype, std::move(sizes));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (dtype == DType::kInt32 || dtype == DType::kInt8) t.SetI(i, ints.empty() ? 1 : ints[i]);
      else t.SetF(i, 0.25f * static_cast<float>(i % 7));
    }
    tensors.at(TensorIndex<Args>(name)) = std::move(t);
    return *this;
  }
  ValidCall& Attr(const char* name, int64_t v) {
    attrs.at(AttrIndex<Args>(name)) = v;
    return *this;
  }
  TestCall<Args> Call() {
    TestCall<Args> c;
    for (size_t i = 0; i < tensors.size(); ++i) c.tensors[i] = tensors[i] ? &*tensors[i] : nullptr;
    c.attrs = attrs;
    return c;
  }
  std::vector<std::vector<uint8_t>> Snapshot() const {
    std::vector<std::vector<uint8_t>> s;
    for (const auto& t : tensors) s.push_back(t ? t->Snapshot() : std::vector<uint8_t>());
    return s;
  }
  void ExpectUnchanged(const std::vector<std::vector<uint8_t>>& before) const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i]) EXPECT_TRUE(tensors[i]->SameBytes(before[i])) << OpInfo<Args>::kTensors[i].name;
    }
  }
};

constexpr DType kF32 = DType::kFloat32, kI32 = DType::kInt32;

ValidCall<FinalizeRoutingV2GradArgs> FinalizeRoutingV2GradCall() {  // R 2, K 2, H 4, dropless, scales
  ValidCall<FinalizeRoutingV2GradArgs> v;
  v.Tensor("gradY", kF32, {2, 4}).Tensor("expandedRowIdx", kI32, {4}, {0, 1, 2, 3}).Tensor("expandedX", kF32, {4, 4});
  v.Tensor("scales", kF32, {2, 2}).Tensor("gradExpandedXOut", kF32, {4, 4}).Tensor("gradScalesOut", kF32, {2, 2});
  return v;
}

ValidCall<TokenPermuteWithRoutingMapGradArgs> TokenPermuteWithRoutingMapGradCall() {  // T 2, E 2, K 2, H 4
  ValidCall<TokenPermuteWithRoutingMapGradArgs> v;
  v.Tensor("permutedTokenOutputGrad", kF32, {4, 4}).Tensor("sortedIndices", kI32, {4}, {0, 1, 2, 3});
  v.Tensor("tokensGradOut", kF32, {2, 4}).Attr("numExperts", 2).Attr("tokensNum", 2);
  return v;
}

ValidCall<FinalizeRoutingV2Args> FinalizeRoutingV2Call() {  // R 2, K 2, H 4, mode 2
  ValidCall<FinalizeRoutingV2Args> v;
  v.Tensor("expandedX", kF32, {4, 4}).Tensor("expandedRowIdx", kI32, {4}, {0, 1, 2, 3});
  v.Tensor("scales", kF32, {2, 2}).Tensor("out", kF32, {2, 4}).Attr("dropPadMode", 2);
  return v;
}

ValidCall<TokenPermuteWithRoutingMapArgs> TokenPermuteWithRoutingMapCall() {  // T 2, E 2, every token to both
  ValidCall<TokenPermuteWithRoutingMapArgs> v;
  v.Tensor("tokens", kF32, {2, 4}).Tensor("routingMap", DType::kInt8, {2, 2}).Tensor("permuteTokensOut", kF32, {4, 4});
  v.Tensor("sortedIndicesOut", kI32, {4}, {0, 0, 0, 0}).Attr("numOutTokens", 4);
  return v;
}

// The first and the last tensor the call has.
template <typename Args>
std::pair<size_t, size_t> FirstAndLast(const TestCall<Args>& c) {
  size_t first = c.tensors.size(), last = 0;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (c.tensors[i] == nullptr) continue;
    first = std::min(first, i);
    last = i;
  }
  return {first, last};
}

// `a` with tensor i on device_of(i).
template <typename Args, typename DeviceOf>
Args OnDevices(Args a, const DeviceOf& device_of) {
  for (size_t i = 0; i < kNumTensors<Args>; ++i) {
    const TensorArg<Args>& arg = OpInfo<Args>::kTensors[i];
    if (arg.Get(a) == nullptr) continue;
    TensorView v = *arg.Get(a);
    v.device = device_of(i);
    arg.Set(a, &v);
  }
  return a;
}

template <typename Args>
void CheckOperator(ValidCall<Args> v) {
  using Info = OpInfo<Args>;
  SCOPED_TRACE(Info::kName);
  const TestCall<Args> c = v.Call();
  const auto [first, last] = FirstAndLast(c);

  // Control: on the host the very same call succeeds through every API.
  for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
    const Status s = c.Run(api);
    ASSERT_TRUE(s.ok()) << ApiName(api) << ": " << s.message();
  }

  const auto before = v.Snapshot();
  // C++ API, every tensor on a device without a backend: phase one and the one-call form.
  {
    const Args a = OnDevices(c.CppArgs(), [](size_t) { return kNoBackend; });
    Plan plan;
    Status s = Info::kPlan(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_FALSE(plan.valid());
    ExpectErrorMessage(s.message(), Info::kName, "no backend of this build runs tensors on device 7");
    s = Info::kRun(a);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  }
  // C++ API, the last tensor on another device than the first.
  {
    const size_t other = last;
    const Args a = OnDevices(c.CppArgs(), [&](size_t i) { return i == other ? kNoBackend : Device::kHost; });
    Plan plan;
    const Status s = Info::kPlan(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    ExpectErrorMessage(s.message(), Info::kName,
                       std::string(Info::kTensors[last].name) + " is on device 7 but " + Info::kTensors[first].name +
                           " is on device 0; the tensors of a call must share one device");
  }
  // C API: the same two cases through aclnn...GetWorkspaceSize.
  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "mixed devices" : "no backend");
    const AclCall<Args> acl(c);
    for (size_t i = 0; i < kNumTensors<Args>; ++i) {
      if (acl.tensor(i) != nullptr && (!mixed || i == last)) SetDevice(acl.tensor(i), kNoBackend);
    }
    uint64_t ws = 12345;
    aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(&ws);
    EXPECT_EQ(acl.PhaseOne(&ws, &ex), ACLNN_ERR_INNER_FIND_KERNEL_ERROR);
    EXPECT_EQ(ex, nullptr);
    ExpectErrorMessage(aclGetRecentErrMsg(), Info::kName, mixed ? "share one device" : "no backend");
  }
  v.ExpectUnchanged(before);
}

TEST(Device, UnsupportedDeviceFailsCleanlyInEveryOperator) {
  CheckOperator(FinalizeRoutingV2GradCall());
  CheckOperator(TokenPermuteWithRoutingMapGradCall());
  CheckOperator(FinalizeRoutingV2Call());
  CheckOperator(TokenPermuteWithRoutingMapCall());
}

TEST(Device, StatusIsNotInvalidArgument) {
  EXPECT_NE(static_cast<int>(StatusCode::kUnsupported), static_cast<int>(StatusCode::kInvalid));
  EXPECT_EQ(static_cast<int>(StatusCode::kUnsupported), ACLNN_ERR_INNER_FIND_KERNEL_ERROR);
}

}  // namespace
}  // namespace moegrad::testing
