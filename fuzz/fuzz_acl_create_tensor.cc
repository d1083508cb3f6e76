// Fuzzes aclCreateTensor: any rank, sizes, strides, offset, storage, dtype and format, null arrays. It must
// accept exactly the views that lie inside their storage with every count representable in 64 bits, and
// reject the rest with a one-line message.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/tensor.hpp"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s (%s)\n", what, aclGetRecentErrMsg());
  std::abort();
}

int64_t Value(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return fdp.ConsumeIntegral<int64_t>();
    case 1: return int64_t{1} << fdp.ConsumeIntegralInRange<int>(0, 62);
    case 2: return -fdp.ConsumeIntegralInRange<int64_t>(0, 3);
    default: return fdp.ConsumeIntegralInRange<int64_t>(0, 9);
  }
}

// Values C++ may hold in these enums (their declared ranges), known and unknown alike.
bool KnownDType(int v) { return (v >= 0 && v <= 12 && v != 5) || v == 27; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  const uint64_t rank = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint64_t>(0, 4)
                                          : fdp.ConsumeIntegralInRange<uint64_t>(0, 10);
  const uint64_t storage_rank = fdp.ConsumeIntegralInRange<uint64_t>(0, 3);
  const int dtype = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int>(0, 3) : fdp.ConsumeIntegralInRange<int>(-32, 31);
  const int format = fdp.ConsumeBool() ? 2 : fdp.ConsumeIntegralInRange<int>(-4, 3);
  const bool null_dims = fdp.ConsumeIntegralInRange<int>(0, 31) == 0;
  const bool null_storage = fdp.ConsumeIntegralInRange<int>(0, 31) == 0;
  const bool null_stride = fdp.ConsumeBool();
  const int64_t offset = fdp.ConsumeBool() ? 0 : Value(fdp);
  std::vector<int64_t> dims(rank + 1), strides(rank + 1), storage(storage_rank + 1);
  for (uint64_t d = 0; d < rank; ++d) dims[d] = Value(fdp);
  for (uint64_t d = 0; d < rank; ++d) strides[d] = Value(fdp);
  for (uint64_t d = 0; d < storage_rank; ++d) storage[d] = fdp.ConsumeBool() ? Value(fdp) : 64;
  void* tensor_data = fdp.ConsumeBool() ? reinterpret_cast<void*>(uintptr_t{0x1000}) : nullptr;

  aclTensor* t = aclCreateTensor(null_dims ? nullptr : dims.data(), rank, static_cast<aclDataType>(dtype),
                                 null_stride ? nullptr : strides.data(), offset, static_cast<aclFormat>(format),
                                 null_storage ? nullptr : storage.data(), storage_rank, tensor_data);

  // The oracle, in 128-bit arithmetic.
  using i128 = __int128;
  const i128 kMax = INT64_MAX;
  bool ok = rank <= 8 && (rank == 0 || !null_dims) && (storage_rank == 0 || !null_storage) && KnownDType(dtype) &&
            format >= -1 && format <= 2 && offset >= 0;
  if (ok) {
    const i128 esize = static_cast<i128>(moegrad::ElementSize(static_cast<moegrad::DType>(dtype)));
    i128 contiguous = 1, last = offset, storage_elems = 1;
    bool empty = false;
    std::vector<int64_t> st(rank);
    for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
      st[d] = null_stride ? static_cast<int64_t>(contiguous) : strides[d];
      ok = ok && dims[d] >= 0 && st[d] >= 0;
      contiguous *= dims[d] > 0 ? dims[d] : 1;
      ok = ok && contiguous <= kMax;
      if (!ok) break;
      empty = empty || dims[d] == 0;
    }
    for (uint64_t d = 0; ok && d < storage_rank; ++d) {
      ok = storage[d] >= 0;
      storage_elems *= storage[d];
      ok = ok && storage_elems <= kMax;
    }
    for (uint64_t d = 0; ok && !empty && d < rank; ++d) {
      last += static_cast<i128>(dims[d] - 1) * st[d];
      ok = last <= kMax;
    }
    ok = ok && (empty || last < storage_elems) && storage_elems * esize <= kMax && offset * esize <= kMax;
  }
  const std::string msg = aclGetRecentErrMsg();
  if (t == nullptr) {
    if (ok) Fail("rejected a valid tensor");
    if (msg.rfind("aclCreateTensor: ", 0) != 0 || msg.find('\n') != std::string::npos) Fail("bad message");
    return 0;
  }
  if (!ok) Fail("accepted an invalid tensor");
  if (aclDestroyTensor(t) != ACLNN_SUCCESS) Fail("aclDestroyTensor failed");
  return 0;
}
