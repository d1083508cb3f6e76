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
#include "tests/support/valid_calls.h"

namespace moegrad::testing {
namespace {

// No backend runs this device: a value no build defines.
constexpr Device kNoBackend = static_cast<Device>(7);

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
  CheckOperator(InitRoutingV2Call());
  CheckOperator(InitRoutingV2GradCall());
  CheckOperator(TokenUnpermuteWithRoutingMapCall());
  CheckOperator(TokenUnpermuteWithRoutingMapGradCall());
}

TEST(Device, StatusIsNotInvalidArgument) {
  EXPECT_NE(static_cast<int>(StatusCode::kUnsupported), static_cast<int>(StatusCode::kInvalid));
  EXPECT_EQ(static_cast<int>(StatusCode::kUnsupported), ACLNN_ERR_INNER_FIND_KERNEL_ERROR);
}

}  // namespace
}  // namespace moegrad::testing
