// The host AscendCL runtime: device 0 is the host, device memory is host memory, streams are synchronous; and the
// aclnn argument objects (tensors, scalars, arrays, tensor lists) with their accessors.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "src/entry/acl/acl_internal.h"

namespace {

using moegrad::acl::SetRecentError;

struct HostStream {
  int unused = 0;
};

aclError Invalid(const std::string& message) {
  SetRecentError(message);
  return ACL_ERROR_INVALID_PARAM;
}

aclTensor* CreateFailed(const std::string& message) {
  SetRecentError("aclCreateTensor: " + message);
  return nullptr;
}

// A failed aclCreate<Object>: NULL and the message, prefixed with the function's name.
template <typename Object>
Object* Failed(const char* function, const std::string& message) {
  SetRecentError(std::string(function) + ": " + message);
  return nullptr;
}

aclnnStatus NullArgument(const char* function, const char* argument) {
  SetRecentError(std::string(function) + ": " + argument + " is required but is null");
  return ACLNN_ERR_PARAM_NULLPTR;
}

// The value a C caller passed for a C enum parameter. In C any int may be passed; in C++ a value outside the
// enumerators is no value of the enum type, so it is read as the integer it is, never loaded as the enum.
template <typename Enum>
int ValueOf(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int), "a C enum is an int");
  int v = 0;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

bool KnownDType(int t) {
  switch (t) {
    case ACL_FLOAT: case ACL_FLOAT16: case ACL_INT8: case ACL_INT32: case ACL_UINT8: case ACL_INT16:
    case ACL_UINT16: case ACL_UINT32: case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_BOOL:
    case ACL_BF16:
      return true;
    default:
      return false;
  }
}

// The elements of an argument array: `size` values of the caller's type at `value`, copied. A bool array is
// read byte by byte, so that a C caller's byte other than 0 or 1 is true rather than an invalid bool.
template <typename Array, typename T>
Array* CreateArray(const char* function, const T* value, uint64_t size) {
  if (size > 0 && value == nullptr) {
    return Failed<Array>(function, "value is null but size is " + std::to_string(size));
  }
  if (size > static_cast<uint64_t>(PTRDIFF_MAX) / sizeof(T)) {
    return Failed<Array>(function, "size " + std::to_string(size) + " is too large");
  }
  auto* array = new (std::nothrow) Array;
  if (array == nullptr) return Failed<Array>(function, "out of memory");
  try {
    array->values.resize(static_cast<size_t>(size));
    if constexpr (std::is_same_v<T, bool>) {
      static_assert(sizeof(bool) == 1, "a C bool is one byte");
      const auto* bytes = reinterpret_cast<const unsigned char*>(value);
      for (size_t i = 0; i < array->values.size(); ++i) array->values[i] = bytes[i] != 0;
    } else if (size > 0) {
      std::memcpy(array->values.data(), value, static_cast<size_t>(size) * sizeof(T));
    }
  } catch (const std::bad_alloc&) {
    delete array;
    return Failed<Array>(function, "out of memory");
  }
  return array;
}

// *out = a new int64_t[n] holding dims[0..n) (the caller frees it with delete[]), *num = n.
aclnnStatus NewDims(const char* function, const int64_t* dims, size_t n, int64_t** out, uint64_t* num) {
  int64_t* copy = new (std::nothrow) int64_t[n];
  if (copy == nullptr) {
    SetRecentError(std::string(function) + ": cannot allocate " + std::to_string(n) + " dimensions");
    return ACLNN_ERR_RUNTIME_ERROR;
  }
  if (n > 0) std::memcpy(copy, dims, n * sizeof(int64_t));
  *out = copy;
  *num = n;
  return ACLNN_SUCCESS;
}

}  // namespace

extern "C" {

aclError aclInit(const char* /*configPath*/) { return ACL_SUCCESS; }
aclError aclFinalize(void) { return ACL_SUCCESS; }

aclError aclrtSetDevice(int32_t deviceId) {
  if (deviceId != 0) return Invalid("aclrtSetDevice: deviceId " + std::to_string(deviceId) + " does not exist; device 0 is the host");
  return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId) {
  if (deviceId != 0) return Invalid("aclrtResetDevice: deviceId " + std::to_string(deviceId) + " does not exist; device 0 is the host");
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) return Invalid("aclrtGetDeviceCount: count is null");
  *count = 1;
  return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  if (stream == nullptr) return Invalid("aclrtCreateStream: stream is null");
  *stream = new (std::nothrow) HostStream;
  if (*stream == nullptr) {
    SetRecentError("aclrtCreateStream: out of memory");
    return ACL_ERROR_BAD_ALLOC;
  }
  return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  if (stream == nullptr) return Invalid("aclrtDestroyStream: stream is null");
  delete static_cast<HostStream*>(stream);
  return ACL_SUCCESS;
}

// Every operator has finished by the time its second phase returns; a null stream is the default stream.
aclError aclrtSynchronizeStream(aclrtStream /*stream*/) { return ACL_SUCCESS; }

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  if (devPtr == nullptr) return Invalid("aclrtMalloc: devPtr is null");
  if (size == 0) return Invalid("aclrtMalloc: size is 0");
  const int policy_value = ValueOf(policy);
  if (policy_value != ACL_MEM_MALLOC_HUGE_FIRST && policy_value != ACL_MEM_MALLOC_HUGE_ONLY &&
      policy_value != ACL_MEM_MALLOC_NORMAL_ONLY) {
    return Invalid("aclrtMalloc: unknown policy " + std::to_string(policy_value));
  }
  const size_t rounded = (size + 63) / 64 * 64;
  *devPtr = rounded < size ? nullptr : std::aligned_alloc(64, rounded);
  if (*devPtr == nullptr) {
    SetRecentError("aclrtMalloc: cannot allocate " + std::to_string(size) + " bytes");
    return ACL_ERROR_BAD_ALLOC;
  }
  return ACL_SUCCESS;
}

aclError aclrtFree(void* devPtr) {
  if (devPtr == nullptr) return Invalid("aclrtFree: devPtr is null");
  std::free(devPtr);
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  const int kind_value = ValueOf(kind);
  if (kind_value < ACL_MEMCPY_HOST_TO_HOST || kind_value > ACL_MEMCPY_DEVICE_TO_DEVICE) {
    return Invalid("aclrtMemcpy: unknown kind " + std::to_string(kind_value));
  }
  if (count > destMax) {
    return Invalid("aclrtMemcpy: count " + std::to_string(count) + " exceeds destMax " + std::to_string(destMax));
  }
  if (count == 0) return ACL_SUCCESS;
  if (dst == nullptr || src == nullptr) return Invalid(std::string("aclrtMemcpy: ") + (dst ? "src" : "dst") + " is null");
  std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (count > maxCount) {
    return Invalid("aclrtMemset: count " + std::to_string(count) + " exceeds maxCount " + std::to_string(maxCount));
  }
  if (count == 0) return ACL_SUCCESS;
  if (devPtr == nullptr) return Invalid("aclrtMemset: devPtr is null");
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format, const int64_t* storageDims,
                           uint64_t storageDimsNum, void* tensorData) {
  if (viewDimsNum > static_cast<uint64_t>(moegrad::TensorView::kMaxRank)) {
    return CreateFailed("viewDimsNum " + std::to_string(viewDimsNum) + " exceeds the supported rank " +
                        std::to_string(moegrad::TensorView::kMaxRank));
  }
  if (viewDimsNum > 0 && viewDims == nullptr) return CreateFailed("viewDims is null but viewDimsNum is " + std::to_string(viewDimsNum));
  if (storageDimsNum > 0 && storageDims == nullptr) {
    return CreateFailed("storageDims is null but storageDimsNum is " + std::to_string(storageDimsNum));
  }
  const int dtype_value = ValueOf(dataType), format_value = ValueOf(format);
  if (!KnownDType(dtype_value)) return CreateFailed("unknown dataType " + std::to_string(dtype_value));
  if (format_value < ACL_FORMAT_UNDEFINED || format_value > ACL_FORMAT_ND) {
    return CreateFailed("unknown format " + std::to_string(format_value));
  }
  if (offset < 0) return CreateFailed("offset " + std::to_string(offset) + " is negative");

  moegrad::TensorView view;
  view.data = tensorData;
  view.dtype = static_cast<moegrad::DType>(dtype_value);
  view.rank = static_cast<int>(viewDimsNum);
  int64_t contiguous = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.sizes[d] = viewDims[d];
    if (viewDims[d] < 0) return CreateFailed("viewDims[" + std::to_string(d) + "] = " + std::to_string(viewDims[d]) + " is negative");
    view.strides[d] = stride ? stride[d] : contiguous;
    if (view.strides[d] < 0) return CreateFailed("stride[" + std::to_string(d) + "] = " + std::to_string(view.strides[d]) + " is negative");
    if (__builtin_mul_overflow(contiguous, viewDims[d] > 0 ? viewDims[d] : 1, &contiguous)) {
      return CreateFailed("viewDims overflow 64-bit element counts");
    }
  }
  int64_t storage = 1;
  for (uint64_t d = 0; d < storageDimsNum; ++d) {
    if (storageDims[d] < 0) return CreateFailed("storageDims[" + std::to_string(d) + "] = " + std::to_string(storageDims[d]) + " is negative");
    if (__builtin_mul_overflow(storage, storageDims[d], &storage)) return CreateFailed("storageDims overflow 64-bit element counts");
  }
  // The view's last element: offset + sum (size - 1) * stride, which must lie inside the storage.
  bool empty = false;
  int64_t last = offset;
  for (int d = 0; d < view.rank; ++d) empty = empty || view.sizes[d] == 0;
  for (int d = 0; !empty && d < view.rank; ++d) {
    int64_t span;
    if (__builtin_mul_overflow(view.sizes[d] - 1, view.strides[d], &span) || __builtin_add_overflow(last, span, &last)) {
      return CreateFailed("the view overflows 64-bit element offsets");
    }
  }
  if (!empty && last >= storage) {
    return CreateFailed("the view reaches element " + std::to_string(last) + " but the storage holds " +
                        std::to_string(storage) + " elements");
  }
  int64_t bytes;
  if (__builtin_mul_overflow(storage, static_cast<int64_t>(moegrad::ElementSize(view.dtype)), &bytes)) {
    return CreateFailed("the storage overflows 64-bit byte counts");
  }
  // Only an empty view can have an offset past its storage; its byte offset must still be representable.
  int64_t offset_bytes;
  if (__builtin_mul_overflow(offset, static_cast<int64_t>(view.element_size()), &offset_bytes)) {
    return CreateFailed("offset " + std::to_string(offset) + " overflows 64-bit byte offsets");
  }
  if (tensorData != nullptr) view.data = static_cast<char*>(tensorData) + offset_bytes;
  auto* t = new (std::nothrow) aclTensor;
  if (t == nullptr) return CreateFailed("out of memory");
  t->view = view;
  t->storage_elements = storage;
  t->offset = offset;
  t->format = static_cast<aclFormat>(format_value);
  try {
    if (storageDimsNum > 0) t->storage_dims.assign(storageDims, storageDims + storageDimsNum);
  } catch (const std::bad_alloc&) {
    delete t;
    return CreateFailed("out of memory");
  }
  return t;
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  delete tensor;  // NULL: a no-op, as every destroy function (docs: the ACL runtime)
  return ACLNN_SUCCESS;
}

aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  const int dtype_value = ValueOf(dataType);
  if (!KnownDType(dtype_value)) {
    return Failed<aclScalar>("aclCreateScalar", "unknown dataType " + std::to_string(dtype_value));
  }
  if (value == nullptr) return Failed<aclScalar>("aclCreateScalar", "value is null");
  auto* scalar = new (std::nothrow) aclScalar;
  if (scalar == nullptr) return Failed<aclScalar>("aclCreateScalar", "out of memory");
  scalar->dtype = static_cast<moegrad::DType>(dtype_value);
  std::memcpy(scalar->bytes, value, moegrad::ElementSize(scalar->dtype));
  return scalar;
}

aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  delete scalar;
  return ACLNN_SUCCESS;
}

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return CreateArray<aclIntArray>("aclCreateIntArray", value, size);
}

aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}

aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  return CreateArray<aclFloatArray>("aclCreateFloatArray", value, size);
}

aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}

aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return CreateArray<aclBoolArray>("aclCreateBoolArray", value, size);
}

aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}

aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
  constexpr const char* kFunction = "aclCreateTensorList";
  if (size > 0 && value == nullptr) {
    return Failed<aclTensorList>(kFunction, "value is null but size is " + std::to_string(size));
  }
  if (size > static_cast<uint64_t>(PTRDIFF_MAX) / sizeof(const aclTensor*)) {
    return Failed<aclTensorList>(kFunction, "size " + std::to_string(size) + " is too large");
  }
  for (uint64_t i = 0; i < size; ++i) {
    if (value[i] == nullptr) return Failed<aclTensorList>(kFunction, "value[" + std::to_string(i) + "] is null");
  }
  auto* list = new (std::nothrow) aclTensorList;
  if (list == nullptr) return Failed<aclTensorList>(kFunction, "out of memory");
  try {
    if (size > 0) list->tensors.assign(value, value + size);
    // The list destroys its tensors: one given twice would be destroyed twice.
    std::vector<const aclTensor*> sorted = list->tensors;
    std::sort(sorted.begin(), sorted.end(), std::less<const aclTensor*>());
    const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
    if (repeated != sorted.end()) {
      const size_t first = static_cast<size_t>(std::find(value, value + size, *repeated) - value);
      const size_t second = static_cast<size_t>(std::find(value + first + 1, value + size, *repeated) - value);
      delete list;
      return Failed<aclTensorList>(kFunction, "value[" + std::to_string(second) + "] is value[" +
                                                  std::to_string(first) + "] again; the list destroys each once");
    }
  } catch (const std::bad_alloc&) {
    delete list;
    return Failed<aclTensorList>(kFunction, "out of memory");
  }
  return list;
}

aclnnStatus aclDestroyTensorList(const aclTensorList* array) {
  if (array == nullptr) return ACLNN_SUCCESS;
  for (const aclTensor* t : array->tensors) delete t;
  delete array;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum) {
  constexpr const char* kFunction = "aclGetViewShape";
  if (tensor == nullptr) return NullArgument(kFunction, "tensor");
  if (viewDims == nullptr) return NullArgument(kFunction, "viewDims");
  if (viewDimsNum == nullptr) return NullArgument(kFunction, "viewDimsNum");
  return NewDims(kFunction, tensor->view.sizes, static_cast<size_t>(tensor->view.rank), viewDims, viewDimsNum);
}

aclnnStatus aclGetViewStrides(const aclTensor* tensor, int64_t** stridesValue, uint64_t* stridesNum) {
  constexpr const char* kFunction = "aclGetViewStrides";
  if (tensor == nullptr) return NullArgument(kFunction, "tensor");
  if (stridesValue == nullptr) return NullArgument(kFunction, "stridesValue");
  if (stridesNum == nullptr) return NullArgument(kFunction, "stridesNum");
  return NewDims(kFunction, tensor->view.strides, static_cast<size_t>(tensor->view.rank), stridesValue, stridesNum);
}

aclnnStatus aclGetViewOffset(const aclTensor* tensor, int64_t* offset) {
  if (tensor == nullptr) return NullArgument("aclGetViewOffset", "tensor");
  if (offset == nullptr) return NullArgument("aclGetViewOffset", "offset");
  *offset = tensor->offset;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetStorageShape(const aclTensor* tensor, int64_t** storageDims, uint64_t* storageDimsNum) {
  constexpr const char* kFunction = "aclGetStorageShape";
  if (tensor == nullptr) return NullArgument(kFunction, "tensor");
  if (storageDims == nullptr) return NullArgument(kFunction, "storageDims");
  if (storageDimsNum == nullptr) return NullArgument(kFunction, "storageDimsNum");
  return NewDims(kFunction, tensor->storage_dims.data(), tensor->storage_dims.size(), storageDims, storageDimsNum);
}

aclnnStatus aclGetDataType(const aclTensor* tensor, aclDataType* dataType) {
  if (tensor == nullptr) return NullArgument("aclGetDataType", "tensor");
  if (dataType == nullptr) return NullArgument("aclGetDataType", "dataType");
  *dataType = static_cast<aclDataType>(tensor->view.dtype);
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetFormat(const aclTensor* tensor, aclFormat* format) {
  if (tensor == nullptr) return NullArgument("aclGetFormat", "tensor");
  if (format == nullptr) return NullArgument("aclGetFormat", "format");
  *format = tensor->format;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetIntArraySize(const aclIntArray* array, uint64_t* size) {
  if (array == nullptr) return NullArgument("aclGetIntArraySize", "array");
  if (size == nullptr) return NullArgument("aclGetIntArraySize", "size");
  *size = array->values.size();
  return ACLNN_SUCCESS;
}

}  // extern "C"
