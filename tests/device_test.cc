// The backend seam: a call whose tensors are on a device this build has no backend for, or on several devices,
// fails in phase one with StatusCode::kUnsupported (ACLNN_ERR_INNER_FIND_KERNEL_ERROR) and a one-line message,
// from the C++ and the C API alike, and writes nothing. The same calls on the host succeed (so only the device
// makes them fail).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "src/testing/acl_access.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

// No backend runs this device: a value no build defines.
constexpr Device kNoBackend = static_cast<Device>(7);

// One valid call: its tensors in OpInfo<Args>::kTensors order (absent ones empty) and its attributes.
template <typename Args>
struct Call {
  std::vector<std::optional<TestTensor>> tensors;
  Args attrs;  // the attributes; its views are set by MakeArgs

  Args MakeArgs() const {
    Args a = attrs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      OpInfo<Args>::kTensors[i].Set(a, tensors[i] ? &tensors[i]->view() : nullptr);
    }
    return a;
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

TestTensor Filled(DType dtype, std::vector<int64_t> sizes, const std::vector<int64_t>& values = {}) {
  TestTensor t(dtype, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kInt32 || dtype == DType::kInt8) t.SetI(i, values.empty() ? 1 : values[i]);
    else t.SetF(i, 0.25f * static_cast<float>(i % 7));
  }
  return t;
}

Call<FinalizeRoutingV2GradArgs> FinalizeRoutingV2GradCall() {  // R 2, K 2, H 4, dropless, scales
  Call<FinalizeRoutingV2GradArgs> c;
  const DType f = DType::kFloat32;
  c.tensors = {Filled(f, {2, 4}), Filled(DType::kInt32, {4}, {0, 1, 2, 3}), Filled(f, {4, 4}), Filled(f, {2, 2}),
               std::nullopt, std::nullopt, Filled(f, {4, 4}), Filled(f, {2, 2})};
  return c;
}

Call<TokenPermuteWithRoutingMapGradArgs> TokenPermuteWithRoutingMapGradCall() {  // T 2, E 2, K 2, H 4
  Call<TokenPermuteWithRoutingMapGradArgs> c;
  c.tensors = {Filled(DType::kFloat32, {4, 4}), std::nullopt, Filled(DType::kInt32, {4}, {0, 1, 2, 3}), std::nullopt,
               Filled(DType::kFloat32, {2, 4}), std::nullopt};
  c.attrs.num_experts = 2;
  c.attrs.tokens_num = 2;
  return c;
}

Call<FinalizeRoutingV2Args> FinalizeRoutingV2Call() {  // R 2, K 2, H 4, mode 2
  Call<FinalizeRoutingV2Args> c;
  c.tensors = {Filled(DType::kFloat32, {4, 4}), Filled(DType::kInt32, {4}, {0, 1, 2, 3}), std::nullopt, std::nullopt,
               std::nullopt, Filled(DType::kFloat32, {2, 2}), std::nullopt, Filled(DType::kFloat32, {2, 4})};
  c.attrs.drop_pad_mode = 2;
  return c;
}

Call<TokenPermuteWithRoutingMapArgs> TokenPermuteWithRoutingMapCall() {  // T 2, E 2, every token to both
  Call<TokenPermuteWithRoutingMapArgs> c;
  c.tensors = {Filled(DType::kFloat32, {2, 4}), Filled(DType::kInt8, {2, 2}), std::nullopt,
               Filled(DType::kFloat32, {4, 4}), std::nullopt, Filled(DType::kInt32, {4}, {0, 0, 0, 0})};
  c.attrs.num_out_tokens = 4;
  return c;
}

// The C API call of one operator over aclTensors in kTensors order.
using AclCall = std::function<aclnnStatus(const std::vector<aclTensor*>&, uint64_t*, aclOpExecutor**)>;

template <typename Args>
AclCall AclCallOf();

template <>
AclCall AclCallOf<FinalizeRoutingV2GradArgs>() {
  return [](const std::vector<aclTensor*>& t, uint64_t* ws, aclOpExecutor** ex) {
    return aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], t[5], 0, 0, 0, 0, t[6], t[7],
                                                         ws, ex);
  };
}
template <>
AclCall AclCallOf<TokenPermuteWithRoutingMapGradArgs>() {
  return [](const std::vector<aclTensor*>& t, uint64_t* ws, aclOpExecutor** ex) {
    return aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(t[0], t[1], t[2], t[3], 2, 2, false, t[4], t[5], ws,
                                                                  ex);
  };
}
template <>
AclCall AclCallOf<FinalizeRoutingV2Args>() {
  return [](const std::vector<aclTensor*>& t, uint64_t* ws, aclOpExecutor** ex) {
    return aclnnMoeFinalizeRoutingV2GetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], t[5], t[6], 2, t[7], ws, ex);
  };
}
template <>
AclCall AclCallOf<TokenPermuteWithRoutingMapArgs>() {
  return [](const std::vector<aclTensor*>& t, uint64_t* ws, aclOpExecutor** ex) {
    return aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(t[0], t[1], t[2], 4, false, t[3], t[4], t[5], ws, ex);
  };
}

// The call's tensors as aclTensors, each on `device_of(i)`.
template <typename Args>
std::vector<aclTensor*> AclTensors(Call<Args>& c, const std::function<Device(size_t)>& device_of) {
  std::vector<aclTensor*> out;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (!c.tensors[i]) {
      out.push_back(nullptr);
      continue;
    }
    TestTensor& t = *c.tensors[i];
    const int64_t storage = t.storage_elements();
    aclTensor* a = aclCreateTensor(t.sizes_vector().data(), t.sizes_vector().size(),
                                   static_cast<aclDataType>(t.dtype()), t.strides_vector().data(), t.offset_elements(),
                                   ACL_FORMAT_ND, &storage, 1, t.storage());
    EXPECT_NE(a, nullptr) << aclGetRecentErrMsg();
    SetDevice(a, device_of(i));
    out.push_back(a);
  }
  return out;
}

void ExpectOneLineNaming(const std::string& msg, const char* op, const std::vector<std::string>& words) {
  EXPECT_EQ(msg.rfind(op, 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << w << " not in: " << msg;
}

// Index of the first and of the last present tensor of the call.
template <typename Args>
std::pair<size_t, size_t> FirstAndLast(const Call<Args>& c) {
  size_t first = c.tensors.size(), last = 0;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (!c.tensors[i]) continue;
    first = std::min(first, i);
    last = i;
  }
  return {first, last};
}

template <typename Args>
void CheckOperator(Call<Args> c) {
  using Info = OpInfo<Args>;
  SCOPED_TRACE(Info::kName);
  const auto [first, last] = FirstAndLast(c);

  // Control: on the host the very same calls succeed.
  {
    Plan plan;
    const Status s = Info::kPlan(c.MakeArgs(), &plan);
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<aclTensor*> t = AclTensors(c, [](size_t) { return Device::kHost; });
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    ASSERT_EQ(AclCallOf<Args>()(t, &ws, &ex), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
    for (aclTensor* a : t) aclDestroyTensor(a);
  }

  const auto before = c.Snapshot();
  // C++ API, every tensor on a device without a backend: phase one and the one-call form.
  {
    Args a = c.MakeArgs();
    for (const TensorArg<Args>& arg : Info::kTensors) {
      if (arg.Get(a) == nullptr) continue;
      TensorView v = *arg.Get(a);
      v.device = kNoBackend;
      arg.Set(a, &v);
    }
    Plan plan;
    Status s = Info::kPlan(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_FALSE(plan.valid());
    ExpectOneLineNaming(s.message(), Info::kName, {"no backend", "device 7"});
    s = Info::kRun(a);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  }
  // C++ API, the last tensor on another device than the first.
  {
    Args a = c.MakeArgs();
    TensorView v = *Info::kTensors[last].Get(a);
    v.device = kNoBackend;
    Info::kTensors[last].Set(a, &v);
    Plan plan;
    const Status s = Info::kPlan(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    ExpectOneLineNaming(s.message(), Info::kName,
                        {Info::kTensors[last].name, Info::kTensors[first].name, "share one device"});
  }
  // C API: the same two cases through aclnn...GetWorkspaceSize.
  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "mixed devices" : "no backend");
    std::vector<aclTensor*> t =
        AclTensors(c, [&](size_t i) { return !mixed || i == last ? kNoBackend : Device::kHost; });
    uint64_t ws = 12345;
    aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(&ws);
    EXPECT_EQ(AclCallOf<Args>()(t, &ws, &ex), ACLNN_ERR_INNER_FIND_KERNEL_ERROR);
    EXPECT_EQ(ex, nullptr);
    ExpectOneLineNaming(aclGetRecentErrMsg(), Info::kName, {mixed ? "share one device" : "no backend"});
    for (aclTensor* a : t) aclDestroyTensor(a);
  }
  c.ExpectUnchanged(before);
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
