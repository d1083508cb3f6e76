/**
 * What the CANN-style clients of tests/install/ share, written the way a CANN sample's common code is: the
 * CHECK_RET / LOG_PRINT macros, acl init, device buffers filled by aclrtMemcpy behind aclTensor descriptors,
 * phase two on an aclrtMalloc'd workspace followed by a synchronize, the release of everything, and a main
 * that runs every case and prints "RESULT: PASS" or "RESULT: FAIL" last. Included from next to the client, so
 * a client still builds with nothing but
 *   g++ -std=c++17 <name>_client.cpp -I<prefix>/include -L<libdir> -lmoegrad
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <vector>

#include "acl/acl.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

inline int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) {
    shapeSize *= i;
  }
  return shapeSize;
}

inline int Init(int32_t deviceId, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);

  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0, aclFormat::ACL_FORMAT_ND,
                            shape.data(), shape.size(), *deviceAddr);
  CHECK_RET(*tensor != nullptr, LOG_PRINT("aclCreateTensor failed: %s\n", aclGetRecentErrMsg()); return -1);
  return 0;
}

template <typename T>
int CopyToHost(std::vector<T>& hostData, const void* deviceAddr) {
  auto size = hostData.size() * sizeof(T);
  auto ret = aclrtMemcpy(hostData.data(), size, deviceAddr, size, ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret); return ret);
  return 0;
}

// Phase two of `opName` (its second function `phaseTwo`) on a workspace of workspaceSize bytes, then a
// synchronize of the stream; the workspace is released again.
inline int LaunchAndSynchronize(const char* opName,
                                aclnnStatus (*phaseTwo)(void*, uint64_t, aclOpExecutor*, aclrtStream),
                                uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream) {
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    auto ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  auto ret = phaseTwo(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("%s failed. ERROR: %d (%s)\n", opName, ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }
  return 0;
}

inline void Release(std::initializer_list<aclTensor*> tensors, std::initializer_list<void*> deviceAddrs) {
  for (aclTensor* tensor : tensors) {
    aclDestroyTensor(tensor);
  }
  for (void* addr : deviceAddrs) {
    aclrtFree(addr);
  }
}

// Init, runCase(case, stream, &passed) for every case (an error ends the run as a failure), release, and the
// result line. The return value is main's.
template <typename Case, size_t N>
int RunAllCases(const Case (&cases)[N], int (*runCase)(const Case&, aclrtStream, bool*)) {
  int32_t deviceId = 0;
  aclrtStream stream;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  bool passed = true;
  for (const Case& c : cases) {
    ret = runCase(c, stream, &passed);
    CHECK_RET(ret == 0, LOG_PRINT("RESULT: FAIL\n"); return 1);
  }

  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  LOG_PRINT("RESULT: %s\n", passed ? "PASS" : "FAIL");
  return passed ? 0 : 1;
}
