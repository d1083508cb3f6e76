// The host AscendCL runtime (docs: spec acl_runtime.md) through its C API only: enum and status values,
// device / stream / memory calls, aclCreateTensor's view rules, the argument objects (scalars, arrays, tensor
// lists) and the tensor accessors, the two-phase executor life cycle (with MoeFinalizeRoutingV2Grad as the
// operator) and the per-thread error message. What the argument objects hold, which no public accessor returns,
// is read through the library's internal accessors (src/entry/acl/acl_internal.h, via src/testing/acl_access.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "src/testing/acl_access.h"

// Live operator-new allocations of this thread: the only way to see from outside that phase two frees a
// one-shot executor and that a repeatable one stays alive until aclDestroyAclOpExecutor.
namespace {
thread_local int64_t t_live_allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  ++t_live_allocations;
  return p;
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr) ++t_live_allocations;
  return p;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  --t_live_allocations;
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }

namespace {

// ---- values exactly as CANN (and the spec) list them ----
static_assert(ACL_DT_UNDEFINED == -1 && ACL_FLOAT == 0 && ACL_FLOAT16 == 1 && ACL_INT8 == 2 && ACL_INT32 == 3 &&
              ACL_UINT8 == 4 && ACL_INT16 == 6 && ACL_UINT16 == 7 && ACL_UINT32 == 8 && ACL_INT64 == 9 &&
              ACL_UINT64 == 10 && ACL_DOUBLE == 11 && ACL_BOOL == 12 && ACL_BF16 == 27);
static_assert(ACL_FORMAT_UNDEFINED == -1 && ACL_FORMAT_NCHW == 0 && ACL_FORMAT_NHWC == 1 && ACL_FORMAT_ND == 2);
static_assert(ACL_MEM_MALLOC_HUGE_FIRST == 0 && ACL_MEM_MALLOC_HUGE_ONLY == 1 && ACL_MEM_MALLOC_NORMAL_ONLY == 2);
static_assert(ACL_MEMCPY_HOST_TO_HOST == 0 && ACL_MEMCPY_HOST_TO_DEVICE == 1 && ACL_MEMCPY_DEVICE_TO_HOST == 2 &&
              ACL_MEMCPY_DEVICE_TO_DEVICE == 3);
static_assert(ACL_SUCCESS == 0 && ACL_ERROR_INVALID_PARAM == 100000 && ACL_ERROR_BAD_ALLOC == 200000);
static_assert(ACLNN_SUCCESS == 0 && ACLNN_ERR_PARAM_NULLPTR == 161001 && ACLNN_ERR_PARAM_INVALID == 161002 &&
              ACLNN_ERR_RUNTIME_ERROR == 361001 && ACLNN_ERR_INNER == 561000);

std::string RecentError() { return aclGetRecentErrMsg(); }

// A non-empty message on one line that mentions `what`.
::testing::AssertionResult IsErrorAbout(const std::string& what) {
  const std::string m = RecentError();
  if (m.empty() || m.find('\n') != std::string::npos || m.find(what) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << m << "\" is not one line about \"" << what << "\"";
  }
  return ::testing::AssertionSuccess();
}

TEST(AclRuntime, InitTwiceSetDeviceAndStreams) {
  EXPECT_EQ(aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  for (int32_t id : {1, -1, 7}) {
    EXPECT_EQ(aclrtSetDevice(id), ACL_ERROR_INVALID_PARAM) << id;
    EXPECT_TRUE(IsErrorAbout("aclrtSetDevice"));
    EXPECT_EQ(aclrtResetDevice(id), ACL_ERROR_INVALID_PARAM) << id;
  }

  aclrtStream a = nullptr, b = nullptr;
  ASSERT_EQ(aclrtCreateStream(&a), ACL_SUCCESS);
  ASSERT_EQ(aclrtCreateStream(&b), ACL_SUCCESS);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(aclrtSynchronizeStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtSynchronizeStream(nullptr), ACL_SUCCESS);  // the default stream
  EXPECT_EQ(aclrtDestroyStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtDestroyStream(b), ACL_SUCCESS);
  EXPECT_EQ(aclrtCreateStream(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(IsErrorAbout("aclrtCreateStream"));

  EXPECT_EQ(aclrtResetDevice(0), ACL_SUCCESS);
  EXPECT_EQ(aclFinalize(), ACL_SUCCESS);
}

TEST(AclRuntime, MallocIsAlignedAndRejectsBadArguments) {
  for (size_t size : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{1} << 20}) {
    for (aclrtMemMallocPolicy policy :
         {ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY}) {
      void* p = nullptr;
      ASSERT_EQ(aclrtMalloc(&p, size, policy), ACL_SUCCESS) << size;
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << size;
      std::memset(p, 0x5a, size);  // the whole size is usable host memory
      EXPECT_EQ(aclrtFree(p), ACL_SUCCESS);
    }
  }
  void* p = reinterpret_cast<void*>(0x10);
  EXPECT_EQ(aclrtMalloc(nullptr, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(IsErrorAbout("aclrtMalloc"));
  EXPECT_EQ(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMalloc(&p, 64, static_cast<aclrtMemMallocPolicy>(3)), ACL_ERROR_INVALID_PARAM);
  // Rounding SIZE_MAX up to 64 bytes wraps: a failed allocation, not a tiny one.
  EXPECT_EQ(aclrtMalloc(&p, SIZE_MAX, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_BAD_ALLOC);
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(IsErrorAbout("aclrtMalloc"));
  EXPECT_EQ(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
}

TEST(AclRuntime, MemcpyAllKindsAndMemset) {
  std::vector<uint8_t> host(100), back(100, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(3 * i + 1);
  void* dev1 = nullptr;
  void* dev2 = nullptr;
  ASSERT_EQ(aclrtMalloc(&dev1, 128, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  ASSERT_EQ(aclrtMalloc(&dev2, 128, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  std::memset(dev2, 0, 128);

  EXPECT_EQ(aclrtMemcpy(dev1, 128, host.data(), 100, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(aclrtMemcpy(dev2, 100, dev1, 100, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS);  // count == destMax
  EXPECT_EQ(aclrtMemcpy(back.data(), back.size(), dev2, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back, host);
  std::vector<uint8_t> copy(100, 0);
  EXPECT_EQ(aclrtMemcpy(copy.data(), copy.size(), host.data(), 60, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
  EXPECT_TRUE(std::equal(copy.begin(), copy.begin() + 60, host.begin()));
  EXPECT_EQ(copy[60], 0);
  EXPECT_EQ(aclrtMemcpy(copy.data(), 0, nullptr, 0, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);  // nothing to do

  // count > destMax: rejected, destination untouched.
  std::vector<uint8_t> dst(100, 0xee);
  EXPECT_EQ(aclrtMemcpy(dst.data(), 99, host.data(), 100, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(IsErrorAbout("destMax"));
  EXPECT_EQ(dst, std::vector<uint8_t>(100, 0xee));
  // (Unknown kinds lie outside the enum's C++ range; c_headers_check.c passes them from C.)
  EXPECT_EQ(aclrtMemcpy(nullptr, 100, host.data(), 10, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(dst.data(), 100, nullptr, 10, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(dst, std::vector<uint8_t>(100, 0xee));

  auto* d = static_cast<uint8_t*>(dev1);
  EXPECT_EQ(aclrtMemset(dev1, 128, 0x7c, 50), ACL_SUCCESS);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(d[i], 0x7c) << i;
  EXPECT_EQ(d[50], host[50]);
  EXPECT_EQ(aclrtMemset(dev1, 40, 0, 41), ACL_ERROR_INVALID_PARAM);  // count > maxCount
  EXPECT_TRUE(IsErrorAbout("aclrtMemset"));
  EXPECT_EQ(d[0], 0x7c);
  EXPECT_EQ(aclrtMemset(nullptr, 40, 0, 8), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtFree(dev1), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(dev2), ACL_SUCCESS);
}

// ---- aclCreateTensor ----

struct TensorSpec {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // empty: pass a null stride
  int64_t offset = 0;
  std::vector<int64_t> storage;
  aclDataType dtype = ACL_FLOAT;
};

std::vector<float> g_storage(4096);

aclTensor* Create(const TensorSpec& s) {
  return aclCreateTensor(s.dims.data(), s.dims.size(), s.dtype, s.strides.empty() ? nullptr : s.strides.data(),
                         s.offset, ACL_FORMAT_ND, s.storage.data(), s.storage.size(), g_storage.data());
}

TEST(AclCreateTensor, ContiguousStridedOffsetAndNullStride) {
  struct Case {
    TensorSpec spec;
    std::vector<int64_t> expect_strides;
    size_t element_size;
  };
  const Case cases[] = {
      {{{2, 3}, {3, 1}, 0, {6}}, {3, 1}, 4},
      {{{2, 3, 4}, {}, 0, {24}}, {12, 4, 1}, 4},                  // null stride: row-major
      {{{2, 3}, {1, 2}, 0, {6}}, {1, 2}, 4},                      // transposed, last element 5
      {{{2, 3}, {5, 1}, 4, {3, 4}}, {5, 1}, 4},                   // padded rows + offset, exactly fits (11)
      {{{3, 2}, {}, 7, {13}, ACL_FLOAT16}, {2, 1}, 2},            // offset, exactly fits (last element 12)
      {{{4, 3}, {0, 1}, 1, {4}, ACL_INT32}, {0, 1}, 4},           // broadcast rows
      {{{5}, {2}, 0, {9}, ACL_INT64}, {2}, 8},
      {{{}, {}, 3, {4}, ACL_BF16}, {}, 2},                        // rank 0
      {{{2, 2}, {}, 0, {2, 2}, ACL_BOOL}, {2, 1}, 1},
  };
  for (const Case& c : cases) {
    const TensorSpec& s = c.spec;
    aclTensor* t = Create(s);
    ASSERT_NE(t, nullptr) << RecentError();
    const moegrad::TensorView& v = moegrad::testing::ViewOf(t);
    EXPECT_EQ(v.rank, static_cast<int>(s.dims.size()));
    EXPECT_EQ(static_cast<int>(v.dtype), static_cast<int>(s.dtype));
    EXPECT_EQ(v.element_size(), c.element_size);
    for (int d = 0; d < v.rank; ++d) {
      EXPECT_EQ(v.sizes[d], s.dims[d]) << d;
      EXPECT_EQ(v.strides[d], c.expect_strides[d]) << d;
    }
    // Element (i...) at tensorData + offset + sum i_d * stride[d] elements: the view starts at the offset.
    EXPECT_EQ(static_cast<const char*>(v.data),
              reinterpret_cast<const char*>(g_storage.data()) + s.offset * static_cast<int64_t>(c.element_size));
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
  for (aclFormat f : {ACL_FORMAT_UNDEFINED, ACL_FORMAT_NCHW, ACL_FORMAT_NHWC, ACL_FORMAT_ND}) {
    const int64_t dims[] = {1, 2, 2, 1};
    aclTensor* t = aclCreateTensor(dims, 4, ACL_FLOAT, nullptr, 0, f, dims, 4, g_storage.data());
    EXPECT_NE(t, nullptr) << f;
    if (t != nullptr) aclDestroyTensor(t);
  }
}

TEST(AclCreateTensor, EmptyViews) {
  const TensorSpec cases[] = {
      {{0, 4}, {}, 0, {0}},
      {{3, 0}, {}, 0, {0}},
      {{0}, {1}, 5, {0}},                  // no element, so nothing lies outside the (empty) storage
      {{2, 0, 3}, {1000, 1, 1000}, 0, {1}},
  };
  for (const TensorSpec& s : cases) {
    aclTensor* t = Create(s);
    ASSERT_NE(t, nullptr) << RecentError();
    EXPECT_EQ(moegrad::testing::ViewOf(t).numel(), 0);
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
}

TEST(AclCreateTensor, RejectsBadViewsWithAMessage) {
  const int64_t big = int64_t{1} << 40;
  const struct {
    TensorSpec spec;
    const char* why;
  } cases[] = {
      {{{2, 3}, {3, 1}, 1, {6}}, "reaches element 6 of 6"},
      {{{2, 3}, {4, 1}, 0, {6}}, "row stride past the storage"},
      {{{2, 3}, {}, 0, {5}}, "contiguous view larger than the storage"},
      {{{3}, {}, 0, {0}}, "non-empty view on empty storage"},
      {{{}, {}, 4, {4}}, "rank-0 offset past the end"},
      {{{}, {}, 0, {0}}, "rank-0 view on empty storage"},
      {{{2, -3}, {}, 0, {6}}, "negative dimension"},
      {{{2, 3}, {3, -1}, 2, {6}}, "negative stride"},
      {{{2, 3}, {}, -1, {6}}, "negative offset"},
      {{{2, 3}, {}, 0, {-6}}, "negative storage dimension"},
      {{{2, 3}, {}, 0, {6}, ACL_DT_UNDEFINED}, "undefined dtype"},
      // Only values inside the enum's range are well-defined in C++; c_headers_check.c passes wilder ones.
      {{{2, 3}, {}, 0, {6}, static_cast<aclDataType>(-2)}, "unknown dtype -2"},
      {{{2, 3}, {}, 0, {6}, static_cast<aclDataType>(5)}, "unknown dtype 5"},
      {{{2, 3}, {}, 0, {6}, static_cast<aclDataType>(13)}, "unknown dtype 13"},
      {{{2, 3}, {}, 0, {6}, static_cast<aclDataType>(28)}, "unknown dtype 28"},
      {{{2, 3}, {}, 0, {6}, static_cast<aclDataType>(31)}, "unknown dtype 31"},
      {{{big, big}, {}, 0, {1}}, "element count overflows"},
      {{{big, big, big}, {}, 0, {big}}, "element count overflows (3-D)"},
      {{{2}, {INT64_MAX}, 0, {big}}, "offset of the last element overflows"},
      {{{2, 2}, {}, INT64_MAX - 1, {big}}, "offset + span overflows"},
      {{{2}, {}, 0, {big, big}}, "storage element count overflows"},
      {{{2}, {}, 0, {int64_t{1} << 62}}, "storage byte count overflows"},
      {{{1, 1, 1, 1, 1, 1, 1, 1, 1}, {}, 0, {1}}, "rank above 8"},
      {{{0}, {}, INT64_MAX, {0}}, "empty view whose byte offset overflows"},
  };
  for (const auto& c : cases) {
    aclSetAclOpExecutorRepeatable(nullptr);  // leaves an unrelated message behind
    EXPECT_EQ(Create(c.spec), nullptr) << c.why;
    EXPECT_TRUE(IsErrorAbout("aclCreateTensor")) << c.why;
  }
  const int64_t dims[] = {2, 3};
  EXPECT_EQ(aclCreateTensor(nullptr, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 2, g_storage.data()), nullptr);
  EXPECT_EQ(aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 2, g_storage.data()), nullptr);

  EXPECT_EQ(aclDestroyTensor(nullptr), ACLNN_SUCCESS);  // every destroy function accepts NULL
}

// ---- aclrtGetDeviceCount ----

TEST(AclRuntime, DeviceCountIsTheHostAlone) {
  uint32_t count = 77;
  EXPECT_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(aclrtSetDevice(static_cast<int32_t>(count) - 1), ACL_SUCCESS);  // every counted device exists
  EXPECT_EQ(aclrtGetDeviceCount(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(IsErrorAbout("aclrtGetDeviceCount: count is null"));
}

// ---- argument objects: aclScalar, aclIntArray / aclFloatArray / aclBoolArray, aclTensorList ----

// Every dtype the runtime knows, with its element size.
const struct {
  aclDataType dtype;
  size_t size;
} kDTypes[] = {{ACL_FLOAT, 4}, {ACL_FLOAT16, 2}, {ACL_INT8, 1},   {ACL_INT32, 4},  {ACL_UINT8, 1},
               {ACL_INT16, 2}, {ACL_UINT16, 2}, {ACL_UINT32, 4},  {ACL_INT64, 8},  {ACL_UINT64, 8},
               {ACL_DOUBLE, 8}, {ACL_BOOL, 1},  {ACL_BF16, 2}};

TEST(AclScalar, EveryDTypeRoundTripsItsBytes) {
  for (const auto& d : kDTypes) {
    // Exactly one element in its own allocation (AddressSanitizer catches a read past it), copied: changing
    // it afterwards leaves the scalar alone.
    std::vector<unsigned char> value(d.size);
    for (size_t i = 0; i < d.size; ++i) value[i] = static_cast<unsigned char>(0x81 + 37 * i);
    if (d.dtype == ACL_BOOL) value[0] = 1;
    const std::vector<unsigned char> original = value;
    aclScalar* s = aclCreateScalar(value.data(), d.dtype);
    ASSERT_NE(s, nullptr) << d.dtype << ": " << RecentError();
    value.assign(d.size, 0);
    EXPECT_EQ(static_cast<int>(moegrad::acl::ScalarDType(s)), static_cast<int>(d.dtype));
    EXPECT_EQ(std::memcmp(s->bytes, original.data(), d.size), 0) << d.dtype;
    EXPECT_EQ(aclDestroyScalar(s), ACLNN_SUCCESS);
  }
}

// A scalar of `dtype` holding `value` (of the dtype's C++ type, or its bits for FLOAT16 / BF16).
template <typename T>
aclScalar* ScalarOf(T value, aclDataType dtype) {
  return aclCreateScalar(&value, dtype);
}

TEST(AclScalar, InternalAccessorsReadTheValue) {
  using moegrad::acl::ScalarAsDouble;
  using moegrad::acl::ScalarAsInt64;
  const double inf = std::numeric_limits<double>::infinity();
  const struct {
    aclScalar* scalar;
    double as_double;
    bool is_int64;
    int64_t as_int64;
  } cases[] = {
      {ScalarOf(2.5f, ACL_FLOAT), 2.5, false, 0},
      {ScalarOf(-3.0f, ACL_FLOAT), -3.0, true, -3},
      {ScalarOf(uint16_t{0x3c00}, ACL_FLOAT16), 1.0, true, 1},          // fp16 1.0
      {ScalarOf(uint16_t{0xc140}, ACL_FLOAT16), -2.625, false, 0},      // fp16 -2.625
      {ScalarOf(uint16_t{0x4049}, ACL_BF16), 3.140625, false, 0},       // bf16 pi
      {ScalarOf(uint16_t{0xc300}, ACL_BF16), -128.0, true, -128},
      {ScalarOf(1e300, ACL_DOUBLE), 1e300, false, 0},                    // integral, outside int64
      {ScalarOf(-9223372036854775808.0, ACL_DOUBLE), -9223372036854775808.0, true, INT64_MIN},
      {ScalarOf(9223372036854775808.0, ACL_DOUBLE), 9223372036854775808.0, false, 0},  // 2^63
      {ScalarOf(-inf, ACL_DOUBLE), -inf, false, 0},
      {ScalarOf(int8_t{-7}, ACL_INT8), -7.0, true, -7},
      {ScalarOf(uint8_t{250}, ACL_UINT8), 250.0, true, 250},
      {ScalarOf(int16_t{-30000}, ACL_INT16), -30000.0, true, -30000},
      {ScalarOf(uint16_t{65535}, ACL_UINT16), 65535.0, true, 65535},
      {ScalarOf(int32_t{INT32_MIN}, ACL_INT32), -2147483648.0, true, INT32_MIN},
      {ScalarOf(uint32_t{4000000000u}, ACL_UINT32), 4e9, true, 4000000000},
      {ScalarOf(int64_t{INT64_MAX}, ACL_INT64), 9223372036854775807.0, true, INT64_MAX},  // exact as int64
      {ScalarOf(uint64_t{INT64_MAX}, ACL_UINT64), 9223372036854775807.0, true, INT64_MAX},
      {ScalarOf(uint64_t{1} << 63, ACL_UINT64), 9223372036854775808.0, false, 0},
      {ScalarOf(true, ACL_BOOL), 1.0, true, 1},
      {ScalarOf(false, ACL_BOOL), 0.0, true, 0},
  };
  int index = 0;
  for (const auto& c : cases) {
    ASSERT_NE(c.scalar, nullptr) << index << ": " << RecentError();
    double d = 0;
    EXPECT_TRUE(ScalarAsDouble(c.scalar, &d)) << index;
    EXPECT_EQ(d, c.as_double) << index;
    int64_t i = 12345;
    EXPECT_EQ(ScalarAsInt64(c.scalar, &i), c.is_int64) << index;
    EXPECT_EQ(i, c.is_int64 ? c.as_int64 : 12345) << index;  // untouched when false
    EXPECT_EQ(aclDestroyScalar(c.scalar), ACLNN_SUCCESS);
    ++index;
  }
  aclScalar* nan = ScalarOf(std::nanf(""), ACL_FLOAT);
  double d = 0;
  int64_t i = 0;
  EXPECT_TRUE(ScalarAsDouble(nan, &d));
  EXPECT_TRUE(std::isnan(d));
  EXPECT_FALSE(ScalarAsInt64(nan, &i));
  EXPECT_EQ(aclDestroyScalar(nan), ACLNN_SUCCESS);
  EXPECT_FALSE(ScalarAsDouble(nullptr, &d));
  EXPECT_FALSE(ScalarAsInt64(nullptr, &i));
}

TEST(AclScalar, RejectsBadDTypeAndNullValue) {
  double value = 1.0;
  // Only values inside the enum's range are well-defined in C++; c_headers_check.c passes wilder ones.
  for (int dtype : {-1, -2, 5, 13, 26, 28, 31}) {
    aclSetAclOpExecutorRepeatable(nullptr);  // leaves an unrelated message behind
    EXPECT_EQ(aclCreateScalar(&value, static_cast<aclDataType>(dtype)), nullptr) << dtype;
    EXPECT_TRUE(IsErrorAbout("aclCreateScalar: unknown dataType " + std::to_string(dtype)));
  }
  for (const auto& d : kDTypes) {
    EXPECT_EQ(aclCreateScalar(nullptr, d.dtype), nullptr) << d.dtype;
    EXPECT_TRUE(IsErrorAbout("aclCreateScalar: value is null"));
  }
}

TEST(AclArrays, CopyTheirValues) {
  std::vector<int64_t> ints = {3, -1, 0, INT64_MAX, INT64_MIN};
  const std::vector<int64_t> ints0 = ints;
  aclIntArray* ia = aclCreateIntArray(ints.data(), ints.size());
  ASSERT_NE(ia, nullptr) << RecentError();
  ints.assign(ints.size(), 42);
  EXPECT_EQ(moegrad::acl::IntArrayValues(ia), ints0);
  uint64_t size = 0;
  EXPECT_EQ(aclGetIntArraySize(ia, &size), ACLNN_SUCCESS);
  EXPECT_EQ(size, ints0.size());
  EXPECT_EQ(aclDestroyIntArray(ia), ACLNN_SUCCESS);

  // Every float bit pattern kept: -0, infinity, a NaN payload, a subnormal.
  const uint32_t bits0[] = {0x3fc00000u, 0x80000000u, 0x7f800000u, 0x7fc01234u, 0x00000001u};
  std::vector<float> floats(std::size(bits0));
  std::memcpy(floats.data(), bits0, sizeof(bits0));
  aclFloatArray* fa = aclCreateFloatArray(floats.data(), floats.size());
  ASSERT_NE(fa, nullptr) << RecentError();
  floats.assign(floats.size(), 7.0f);
  const std::vector<float>& fv = moegrad::acl::FloatArrayValues(fa);
  ASSERT_EQ(fv.size(), std::size(bits0));
  EXPECT_EQ(std::memcmp(fv.data(), bits0, sizeof(bits0)), 0);
  EXPECT_EQ(aclDestroyFloatArray(fa), ACLNN_SUCCESS);

  const bool bools0[] = {true, false, false, true, true};
  bool bools[std::size(bools0)];
  std::copy(std::begin(bools0), std::end(bools0), bools);
  aclBoolArray* ba = aclCreateBoolArray(bools, std::size(bools));
  ASSERT_NE(ba, nullptr) << RecentError();
  for (bool& b : bools) b = !b;
  const std::vector<bool>& bv = moegrad::acl::BoolArrayValues(ba);
  ASSERT_EQ(bv.size(), std::size(bools0));
  for (size_t i = 0; i < bv.size(); ++i) EXPECT_EQ(bv[i], bools0[i]) << i;
  EXPECT_EQ(aclDestroyBoolArray(ba), ACLNN_SUCCESS);

  // Size 0, with a null or a real value.
  for (bool null_value : {true, false}) {
    aclIntArray* ie = aclCreateIntArray(null_value ? nullptr : ints.data(), 0);
    aclFloatArray* fe = aclCreateFloatArray(null_value ? nullptr : floats.data(), 0);
    aclBoolArray* be = aclCreateBoolArray(null_value ? nullptr : bools, 0);
    ASSERT_TRUE(ie != nullptr && fe != nullptr && be != nullptr) << RecentError();
    size = 99;
    EXPECT_EQ(aclGetIntArraySize(ie, &size), ACLNN_SUCCESS);
    EXPECT_EQ(size, 0u);
    EXPECT_TRUE(moegrad::acl::IntArrayValues(ie).empty());
    EXPECT_TRUE(moegrad::acl::FloatArrayValues(fe).empty());
    EXPECT_TRUE(moegrad::acl::BoolArrayValues(be).empty());
    EXPECT_EQ(aclDestroyIntArray(ie), ACLNN_SUCCESS);
    EXPECT_EQ(aclDestroyFloatArray(fe), ACLNN_SUCCESS);
    EXPECT_EQ(aclDestroyBoolArray(be), ACLNN_SUCCESS);
  }
}

TEST(AclArrays, RejectNullValueWithElementsAndNullArguments) {
  EXPECT_EQ(aclCreateIntArray(nullptr, 3), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateIntArray: value is null but size is 3"));
  EXPECT_EQ(aclCreateFloatArray(nullptr, 1), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateFloatArray: value is null but size is 1"));
  EXPECT_EQ(aclCreateBoolArray(nullptr, 2), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateBoolArray: value is null but size is 2"));
  // A size no allocation can hold is refused before anything is read.
  const int64_t one = 1;
  EXPECT_EQ(aclCreateIntArray(&one, UINT64_MAX), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateIntArray: size 18446744073709551615 is too large"));

  const int64_t v[] = {4, 5};
  aclIntArray* a = aclCreateIntArray(v, 2);
  ASSERT_NE(a, nullptr) << RecentError();
  uint64_t size = 77;
  EXPECT_EQ(aclGetIntArraySize(nullptr, &size), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_TRUE(IsErrorAbout("aclGetIntArraySize: array is required but is null"));
  EXPECT_EQ(size, 77u);
  EXPECT_EQ(aclGetIntArraySize(a, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_TRUE(IsErrorAbout("aclGetIntArraySize: size is required but is null"));
  EXPECT_EQ(aclDestroyIntArray(a), ACLNN_SUCCESS);
}

TEST(AclArrays, DestroyingNullDoesNothing) {
  aclSetAclOpExecutorRepeatable(nullptr);
  const std::string before = RecentError();
  EXPECT_EQ(aclDestroyScalar(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyFloatArray(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyBoolArray(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyTensorList(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(RecentError(), before) << "a no-op set the error message";
}

// A fresh 2x3 float tensor on g_storage.
aclTensor* SmallTensor() {
  const int64_t dims[] = {2, 3};
  aclTensor* t = aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 2, g_storage.data());
  EXPECT_NE(t, nullptr) << RecentError();
  return t;
}

TEST(AclTensorList, OwnsAndDestroysItsTensors) {
  const int64_t before = t_live_allocations;
  const aclTensor* tensors[] = {SmallTensor(), SmallTensor(), SmallTensor()};
  aclTensorList* list = aclCreateTensorList(tensors, 3);
  ASSERT_NE(list, nullptr) << RecentError();
  const aclTensor* const expect[] = {tensors[0], tensors[1], tensors[2]};
  tensors[1] = nullptr;  // the list copied the pointers
  const std::vector<const aclTensor*>& held = moegrad::acl::TensorListTensors(list);
  ASSERT_EQ(held.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(held[i], expect[i]) << i;
  EXPECT_EQ(aclDestroyTensorList(list), ACLNN_SUCCESS);  // the tensors too (AddressSanitizer: no leak)
  EXPECT_EQ(t_live_allocations, before) << "aclDestroyTensorList left something allocated";

  for (const aclTensor* const* value : {static_cast<const aclTensor* const*>(nullptr), expect}) {
    aclTensorList* empty = aclCreateTensorList(value, 0);
    ASSERT_NE(empty, nullptr) << RecentError();
    EXPECT_TRUE(moegrad::acl::TensorListTensors(empty).empty());
    EXPECT_EQ(aclDestroyTensorList(empty), ACLNN_SUCCESS);
  }
}

TEST(AclTensorList, RejectsNullValueNullTensorsAndRepeats) {
  aclTensor* a = SmallTensor();
  aclTensor* b = SmallTensor();
  EXPECT_EQ(aclCreateTensorList(nullptr, 2), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateTensorList: value is null but size is 2"));
  const aclTensor* with_null[] = {a, nullptr, b};
  EXPECT_EQ(aclCreateTensorList(with_null, 3), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateTensorList: value[1] is null"));
  const aclTensor* repeated[] = {a, b, a};
  EXPECT_EQ(aclCreateTensorList(repeated, 3), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateTensorList: value[2] is value[0] again"));
  EXPECT_EQ(aclCreateTensorList(repeated, UINT64_MAX), nullptr);
  EXPECT_TRUE(IsErrorAbout("aclCreateTensorList: size 18446744073709551615 is too large"));
  // A failed list took nothing: the tensors are still the caller's (AddressSanitizer: no double free).
  EXPECT_EQ(aclDestroyTensor(a), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyTensor(b), ACLNN_SUCCESS);
}

// ---- the tensor accessors ----

// The accessors' view of `t` against what aclCreateTensor was given; *Shape / *Strides arrays freed with delete[].
void ExpectAccessorsGive(const aclTensor* t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                         int64_t offset, const std::vector<int64_t>& storage, aclDataType dtype, aclFormat format) {
  int64_t* values = nullptr;
  uint64_t n = 99;
  ASSERT_EQ(aclGetViewShape(t, &values, &n), ACLNN_SUCCESS) << RecentError();
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(std::vector<int64_t>(values, values + n), dims);
  delete[] values;
  values = nullptr;
  ASSERT_EQ(aclGetViewStrides(t, &values, &n), ACLNN_SUCCESS) << RecentError();
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(std::vector<int64_t>(values, values + n), strides);
  delete[] values;
  values = nullptr;
  ASSERT_EQ(aclGetStorageShape(t, &values, &n), ACLNN_SUCCESS) << RecentError();
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(std::vector<int64_t>(values, values + n), storage);
  delete[] values;
  int64_t got_offset = -1;
  EXPECT_EQ(aclGetViewOffset(t, &got_offset), ACLNN_SUCCESS);
  EXPECT_EQ(got_offset, offset);
  aclDataType got_dtype = ACL_DT_UNDEFINED;
  EXPECT_EQ(aclGetDataType(t, &got_dtype), ACLNN_SUCCESS);
  EXPECT_EQ(got_dtype, dtype);
  aclFormat got_format = format == ACL_FORMAT_ND ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
  EXPECT_EQ(aclGetFormat(t, &got_format), ACLNN_SUCCESS);
  EXPECT_EQ(got_format, format);
}

TEST(AclTensorAccessors, ReturnWhatCreateWasGiven) {
  const struct {
    std::vector<int64_t> dims, strides;  // strides empty: a null stride
    int64_t offset;
    std::vector<int64_t> storage;
    aclDataType dtype;
    aclFormat format;
    std::vector<int64_t> expect_strides;
  } cases[] = {
      {{2, 3}, {5, 1}, 4, {3, 4}, ACL_FLOAT, ACL_FORMAT_NCHW, {5, 1}},           // padded rows behind an offset
      {{2, 3}, {1, 2}, 0, {6}, ACL_INT32, ACL_FORMAT_ND, {1, 2}},                // transposed
      {{2, 3, 4}, {}, 0, {2, 3, 4}, ACL_FLOAT16, ACL_FORMAT_NHWC, {12, 4, 1}},  // null stride: row-major
      {{4, 3}, {0, 1}, 1, {4}, ACL_BOOL, ACL_FORMAT_UNDEFINED, {0, 1}},          // broadcast rows
      {{3, 2}, {}, 7, {13}, ACL_BF16, ACL_FORMAT_ND, {2, 1}},
      {{}, {}, 3, {4}, ACL_DOUBLE, ACL_FORMAT_ND, {}},                           // rank 0
      {{}, {}, 0, {}, ACL_UINT64, ACL_FORMAT_ND, {}},                            // rank 0, storage of rank 0
      {{0, 5}, {}, 9, {0}, ACL_INT8, ACL_FORMAT_ND, {5, 1}},                     // empty
  };
  for (const auto& c : cases) {
    aclTensor* t = aclCreateTensor(c.dims.data(), c.dims.size(), c.dtype,
                                   c.strides.empty() ? nullptr : c.strides.data(), c.offset, c.format,
                                   c.storage.data(), c.storage.size(), g_storage.data());
    ASSERT_NE(t, nullptr) << RecentError();
    ExpectAccessorsGive(t, c.dims, c.expect_strides, c.offset, c.storage, c.dtype, c.format);
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
  // Every dtype comes back as itself.
  const std::vector<int64_t> dims = {2}, strides = {1};
  for (const auto& d : kDTypes) {
    aclTensor* t = aclCreateTensor(dims.data(), 1, d.dtype, nullptr, 0, ACL_FORMAT_ND, dims.data(), 1,
                                   g_storage.data());
    ASSERT_NE(t, nullptr) << RecentError();
    ExpectAccessorsGive(t, dims, strides, 0, dims, d.dtype, ACL_FORMAT_ND);
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
}

TEST(AclTensorAccessors, RejectNullTensorAndNullOutPointers) {
  aclTensor* t = SmallTensor();
  int64_t* const stale = reinterpret_cast<int64_t*>(uintptr_t{0x40});
  int64_t* values = stale;
  uint64_t n = 77;
  int64_t offset = 77;
  aclDataType dtype = ACL_INT8;
  aclFormat format = ACL_FORMAT_NHWC;
  const struct {
    std::function<aclnnStatus()> call;
    const char* message;
  } cases[] = {
      {[&] { return aclGetViewShape(nullptr, &values, &n); }, "aclGetViewShape: tensor is required but is null"},
      {[&] { return aclGetViewShape(t, nullptr, &n); }, "aclGetViewShape: viewDims is required but is null"},
      {[&] { return aclGetViewShape(t, &values, nullptr); }, "aclGetViewShape: viewDimsNum is required but is null"},
      {[&] { return aclGetViewStrides(nullptr, &values, &n); }, "aclGetViewStrides: tensor is required but is null"},
      {[&] { return aclGetViewStrides(t, nullptr, &n); }, "aclGetViewStrides: stridesValue is required but is null"},
      {[&] { return aclGetViewStrides(t, &values, nullptr); },
       "aclGetViewStrides: stridesNum is required but is null"},
      {[&] { return aclGetStorageShape(nullptr, &values, &n); },
       "aclGetStorageShape: tensor is required but is null"},
      {[&] { return aclGetStorageShape(t, nullptr, &n); },
       "aclGetStorageShape: storageDims is required but is null"},
      {[&] { return aclGetStorageShape(t, &values, nullptr); },
       "aclGetStorageShape: storageDimsNum is required but is null"},
      {[&] { return aclGetViewOffset(nullptr, &offset); }, "aclGetViewOffset: tensor is required but is null"},
      {[&] { return aclGetViewOffset(t, nullptr); }, "aclGetViewOffset: offset is required but is null"},
      {[&] { return aclGetDataType(nullptr, &dtype); }, "aclGetDataType: tensor is required but is null"},
      {[&] { return aclGetDataType(t, nullptr); }, "aclGetDataType: dataType is required but is null"},
      {[&] { return aclGetFormat(nullptr, &format); }, "aclGetFormat: tensor is required but is null"},
      {[&] { return aclGetFormat(t, nullptr); }, "aclGetFormat: format is required but is null"},
  };
  for (const auto& c : cases) {
    aclSetAclOpExecutorRepeatable(nullptr);  // leaves an unrelated message behind
    EXPECT_EQ(c.call(), ACLNN_ERR_PARAM_NULLPTR) << c.message;
    EXPECT_TRUE(IsErrorAbout(c.message));
    // Nothing written, nothing allocated.
    EXPECT_EQ(values, stale) << c.message;
    EXPECT_EQ(n, 77u) << c.message;
    EXPECT_EQ(offset, 77) << c.message;
    EXPECT_EQ(dtype, ACL_INT8) << c.message;
    EXPECT_EQ(format, ACL_FORMAT_NHWC) << c.message;
  }
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
}

// ---- the two-phase executor, with MoeFinalizeRoutingV2Grad ----

// A dropless call with scales and bias, R = 3, K = 2, H = 5, E = 3. Inputs are small multiples of 1/4 and
// 1/8, so every product and sum is exact in fp32 and the expected values (plain loops over the spec's
// formulas) need no tolerance. `strided` stores gradY transposed behind an offset and gradExpandedX with
// padded rows behind an offset.
class FinalizeRoutingV2GradCall {
 public:
  static constexpr int64_t R = 3, K = 2, H = 5, E = 3, P = R * K;
  static constexpr float kPoison = -1234.5f;

  explicit FinalizeRoutingV2GradCall(bool strided = false) : strided_(strided) {
    const int32_t row_idx[P] = {3, 0, 5, 1, 2, 4};
    const int32_t expert_idx[P] = {0, 2, 1, 1, 2, 0};
    gy_.assign(strided ? 3 + R * H : R * H, 99.0f);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < H; ++j) GradY(r, j) = static_cast<float>(r * H + j - 7) / 4;
    }
    x_.resize(P * H);
    for (int64_t k = 0; k < P * H; ++k) x_[k] = static_cast<float>(k % 11 - 5) / 4;
    bias_.resize(E * H);
    for (int64_t k = 0; k < E * H; ++k) bias_[k] = static_cast<float>(k % 7 - 3) / 4;
    scales_.resize(P);
    for (int64_t i = 0; i < P; ++i) scales_[i] = static_cast<float>(i - 2) / 8;
    row_idx_.assign(row_idx, row_idx + P);
    expert_idx_.assign(expert_idx, expert_idx + P);
    gx_.resize(strided ? 2 + P * (H + 3) : P * H);
    gs_.resize(P);

    expect_gx_.assign(P * H, 0.0f);
    expect_gs_.assign(P, 0.0f);
    for (int64_t i = 0; i < P; ++i) {
      const int64_t v = row_idx_[i], e = expert_idx_[i], r = i / K;
      for (int64_t j = 0; j < H; ++j) {
        expect_gx_[v * H + j] += GradY(r, j) * scales_[i];
        expect_gs_[i] += (x_[v * H + j] + bias_[e * H + j]) * GradY(r, j);
      }
    }

    t_gy_ = strided ? Make(gy_, {R, H}, {1, R}, 3, ACL_FLOAT) : Make(gy_, {R, H}, {H, 1}, 0, ACL_FLOAT);
    t_idx_ = Make(row_idx_, {P}, {1}, 0, ACL_INT32);
    t_x_ = Make(x_, {P, H}, {H, 1}, 0, ACL_FLOAT);
    t_scales_ = Make(scales_, {R, K}, {K, 1}, 0, ACL_FLOAT);
    t_eidx_ = Make(expert_idx_, {R, K}, {K, 1}, 0, ACL_INT32);
    t_bias_ = Make(bias_, {E, H}, {H, 1}, 0, ACL_FLOAT);
    t_gx_ = strided ? Make(gx_, {P, H}, {H + 3, 1}, 2, ACL_FLOAT) : Make(gx_, {P, H}, {H, 1}, 0, ACL_FLOAT);
    t_gs_ = Make(gs_, {R, K}, {K, 1}, 0, ACL_FLOAT);
  }
  ~FinalizeRoutingV2GradCall() {
    for (aclTensor* t : {t_gy_, t_idx_, t_x_, t_scales_, t_eidx_, t_bias_, t_gx_, t_gs_}) {
      if (t != nullptr) aclDestroyTensor(t);
    }
  }

  aclnnStatus PhaseOne(uint64_t* workspace_size, aclOpExecutor** executor, int64_t mode = 0) const {
    return aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(t_gy_, t_idx_, t_x_, t_scales_, t_eidx_, t_bias_, mode,
                                                         0, 0, 0, t_gx_, t_gs_, workspace_size, executor);
  }
  aclnnStatus PhaseOneWithoutGradY(uint64_t* workspace_size, aclOpExecutor** executor) const {
    return aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(nullptr, t_idx_, t_x_, t_scales_, t_eidx_, t_bias_, 0,
                                                         0, 0, 0, t_gx_, t_gs_, workspace_size, executor);
  }

  // Every output byte, padding included, set to a value no run produces.
  void Poison() {
    gx_.assign(gx_.size(), kPoison);
    gs_.assign(gs_.size(), kPoison);
  }
  bool StillPoisoned() const {
    for (float v : gx_) if (v != kPoison) return false;
    for (float v : gs_) if (v != kPoison) return false;
    return true;
  }
  // Exactly the expected values in the view, and the padding of a strided output left alone.
  ::testing::AssertionResult HasExpectedOutputs() const {
    std::vector<bool> in_view(gx_.size(), false);
    for (int64_t v = 0; v < P; ++v) {
      for (int64_t j = 0; j < H; ++j) {
        const size_t at = strided_ ? 2 + v * (H + 3) + j : v * H + j;
        in_view[at] = true;
        if (gx_[at] != expect_gx_[v * H + j]) {
          return ::testing::AssertionFailure() << "gradExpandedX[" << v << "][" << j << "] = " << gx_[at]
                                               << ", expected " << expect_gx_[v * H + j];
        }
      }
    }
    for (size_t k = 0; k < gx_.size(); ++k) {
      if (!in_view[k] && gx_[k] != kPoison) return ::testing::AssertionFailure() << "padding " << k << " written";
    }
    for (int64_t i = 0; i < P; ++i) {
      if (gs_[i] != expect_gs_[i]) {
        return ::testing::AssertionFailure() << "gradScales[" << i << "] = " << gs_[i] << ", expected "
                                             << expect_gs_[i];
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  template <typename T>
  static aclTensor* Make(std::vector<T>& store, std::vector<int64_t> dims, std::vector<int64_t> strides,
                         int64_t offset, aclDataType dtype) {
    const int64_t storage = static_cast<int64_t>(store.size());
    aclTensor* t = aclCreateTensor(dims.data(), dims.size(), dtype, strides.data(), offset, ACL_FORMAT_ND,
                                   &storage, 1, store.data());
    EXPECT_NE(t, nullptr) << RecentError();
    return t;
  }
  float& GradY(int64_t r, int64_t j) { return strided_ ? gy_[3 + j * R + r] : gy_[r * H + j]; }
  float GradY(int64_t r, int64_t j) const { return strided_ ? gy_[3 + j * R + r] : gy_[r * H + j]; }

  bool strided_;
  std::vector<float> gy_, x_, bias_, scales_, gx_, gs_, expect_gx_, expect_gs_;
  std::vector<int32_t> row_idx_, expert_idx_;
  aclTensor *t_gy_ = nullptr, *t_idx_ = nullptr, *t_x_ = nullptr, *t_scales_ = nullptr, *t_eidx_ = nullptr,
            *t_bias_ = nullptr, *t_gx_ = nullptr, *t_gs_ = nullptr;
};

// A device workspace of `bytes` (at least 1 so a zero-size request still gives a pointer).
struct Workspace {
  explicit Workspace(uint64_t bytes) {
    EXPECT_EQ(aclrtMalloc(&ptr, bytes ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  }
  ~Workspace() { aclrtFree(ptr); }
  void* ptr = nullptr;
};

// First calls set up thread pools and dispatch tables; measuring allocations starts after one full call.
void WarmUp() {
  FinalizeRoutingV2GradCall c;
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(c.PhaseOne(&ws, &ex), ACLNN_SUCCESS) << RecentError();
  Workspace w(ws);
  ASSERT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws, ex, nullptr), ACLNN_SUCCESS) << RecentError();
}

TEST(AclExecutor, OneShotIsConsumedByPhaseTwo) {
  WarmUp();
  for (bool strided : {false, true}) {
    FinalizeRoutingV2GradCall c(strided);
    c.Poison();
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    const int64_t before = t_live_allocations;
    ASSERT_EQ(c.PhaseOne(&ws, &ex), ACLNN_SUCCESS) << RecentError();
    const int64_t after_phase_one = t_live_allocations;
    ASSERT_NE(ex, nullptr);
    EXPECT_GT(ws, 0u);  // the inverse index lives there: the workspace rules below are not vacuous
    EXPECT_TRUE(c.StillPoisoned());  // phase one only plans
    Workspace w(ws);
    ASSERT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws, ex, nullptr), ACLNN_SUCCESS) << RecentError();
    const int64_t after_phase_two = t_live_allocations;
    EXPECT_GT(after_phase_one, before);
    EXPECT_EQ(after_phase_two, before) << "phase two did not free the one-shot executor";
    EXPECT_TRUE(c.HasExpectedOutputs()) << "strided " << strided;
  }
}

TEST(AclExecutor, RepeatableRunsManyTimesUntilDestroyed) {
  WarmUp();
  FinalizeRoutingV2GradCall c(true);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  const int64_t before = t_live_allocations;
  ASSERT_EQ(c.PhaseOne(&ws, &ex), ACLNN_SUCCESS) << RecentError();
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  Workspace w(ws + 64);
  for (int run = 0; run < 4; ++run) {
    c.Poison();
    if (run == 2) {  // a failed run neither writes nor consumes a repeatable executor
      EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws - 1, ex, nullptr), ACLNN_ERR_PARAM_INVALID);
      EXPECT_TRUE(c.StillPoisoned());
    }
    // Larger workspaces than reported are fine.
    ASSERT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws + 64 * (run % 2), ex, nullptr), ACLNN_SUCCESS)
        << RecentError();
    EXPECT_TRUE(c.HasExpectedOutputs()) << "run " << run;
  }
  const int64_t while_alive = t_live_allocations;
  ASSERT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
  const int64_t after_destroy = t_live_allocations;
  EXPECT_GT(while_alive, before);
  EXPECT_EQ(after_destroy, before) << "aclDestroyAclOpExecutor did not free the executor";
}

TEST(AclExecutor, PhaseTwoWorkspaceRulesAndNullExecutor) {
  WarmUp();
  FinalizeRoutingV2GradCall c;
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  // The same failure once on a repeatable executor, so that the error message buffer has already grown
  // when the one-shot executor's allocations are counted below.
  ASSERT_EQ(c.PhaseOne(&ws, &ex), ACLNN_SUCCESS) << RecentError();
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  Workspace w(ws);
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws - 1, ex, nullptr), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(nullptr, ws, ex, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  ASSERT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);

  c.Poison();
  const struct {
    void* workspace;
    uint64_t size;
    aclnnStatus expect;
    const char* about;
  } cases[] = {{w.ptr, ws - 1, ACLNN_ERR_PARAM_INVALID, "workspaceSize"},
               {w.ptr, 0, ACLNN_ERR_PARAM_INVALID, "workspaceSize"},
               {nullptr, ws, ACLNN_ERR_PARAM_NULLPTR, "workspace"}};
  for (const auto& k : cases) {
    const int64_t before = t_live_allocations;
    ASSERT_EQ(c.PhaseOne(&ws, &ex), ACLNN_SUCCESS) << RecentError();
    const aclnnStatus s = aclnnMoeFinalizeRoutingV2Grad(k.workspace, k.size, ex, nullptr);
    const int64_t after = t_live_allocations;
    EXPECT_EQ(s, k.expect) << k.size;
    EXPECT_TRUE(IsErrorAbout(k.about));
    EXPECT_TRUE(IsErrorAbout("MoeFinalizeRoutingV2Grad"));
    EXPECT_TRUE(c.StillPoisoned()) << "outputs written by a failed phase two";
    EXPECT_EQ(after, before) << "a failed phase two did not consume the one-shot executor";
  }

  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(w.ptr, ws, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_TRUE(IsErrorAbout("executor"));
  EXPECT_EQ(aclSetAclOpExecutorRepeatable(nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(aclDestroyAclOpExecutor(nullptr), ACLNN_SUCCESS);  // every destroy function accepts NULL
  EXPECT_TRUE(c.StillPoisoned());
}

TEST(AclExecutor, FailedPhaseOneLeavesExecutorNull) {
  FinalizeRoutingV2GradCall c;
  aclOpExecutor* const stale = reinterpret_cast<aclOpExecutor*>(uintptr_t{0x40});
  uint64_t ws = 777;
  aclOpExecutor* ex = stale;
  EXPECT_EQ(c.PhaseOne(&ws, &ex, /*mode=*/2), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(ex, nullptr);
  EXPECT_TRUE(IsErrorAbout("dropPadMode"));
  EXPECT_TRUE(IsErrorAbout("MoeFinalizeRoutingV2Grad"));

  ex = stale;
  EXPECT_EQ(c.PhaseOneWithoutGradY(&ws, &ex), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(ex, nullptr);
  EXPECT_TRUE(IsErrorAbout("gradY"));

  ex = stale;
  EXPECT_EQ(c.PhaseOne(nullptr, &ex), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(ex, nullptr);
  EXPECT_TRUE(IsErrorAbout("workspaceSize"));
  EXPECT_EQ(c.PhaseOne(&ws, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_TRUE(IsErrorAbout("executor"));
}

// ---- aclGetRecentErrMsg ----

TEST(AclRecentErrMsg, PerThreadAndOneLine) {
  ASSERT_EQ(aclrtSetDevice(5), ACL_ERROR_INVALID_PARAM);
  const std::string mine = RecentError();
  ASSERT_TRUE(IsErrorAbout("aclrtSetDevice"));

  std::string fresh = "unset", after_malloc, after_op;
  std::thread worker([&] {
    fresh = RecentError();
    aclrtMalloc(nullptr, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    after_malloc = RecentError();
    FinalizeRoutingV2GradCall c;
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    c.PhaseOne(&ws, &ex, /*mode=*/3);
    after_op = RecentError();
  });
  worker.join();
  EXPECT_EQ(fresh, "");
  EXPECT_NE(after_malloc.find("aclrtMalloc"), std::string::npos) << after_malloc;
  EXPECT_NE(after_op.find("MoeFinalizeRoutingV2Grad"), std::string::npos) << after_op;
  EXPECT_NE(after_op.find("dropPadMode"), std::string::npos) << after_op;
  EXPECT_EQ(after_op.find('\n'), std::string::npos) << after_op;
  EXPECT_EQ(RecentError(), mine) << "another thread's error replaced this thread's";

  // The main thread's own latest error wins over its earlier one.
  ASSERT_EQ(aclrtMemset(nullptr, 1, 0, 2), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(IsErrorAbout("aclrtMemset"));
}

}  // namespace
