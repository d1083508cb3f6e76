// moegrad/tensor.hpp: a non-owning strided view of a tensor, the one tensor description every layer uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "moegrad/export.hpp"

namespace moegrad {

// Values are those of aclDataType, so the two convert by a cast.
enum class DType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUInt8 = 4,
  kInt16 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kInt64 = 9,
  kUInt64 = 10,
  kFloat64 = 11,
  kBool = 12,
  kBFloat16 = 27,
};

// Size in bytes of one element; 0 for a value that is not a DType.
constexpr size_t ElementSize(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kInt64: case DType::kUInt64: case DType::kFloat64: return 8;
  }
  return 0;
}

// "FLOAT32", "BFLOAT16", ... (the names messages use).
MOEGRAD_API const char* DTypeName(DType t);

// Where a tensor's bytes live. Every tensor of one call must be on one device that this build has a backend for
// (today the host); otherwise the call fails with StatusCode::kUnsupported and writes nothing.
enum class Device : int32_t {
  kHost = 0,
};

// Element (i0, i1, ...) lives at data + sum_d i_d * strides[d] elements. Strides are in elements and >= 0.
//
// A view always describes itself truthfully, even when it is not valid: built from more than kMaxRank sizes it
// keeps the true rank (and the first kMaxRank sizes), and built with a strides list whose length differs from
// its sizes' it gets rank kMismatchedStrides. The operators reject both in their first check (INVALID, "<name>
// has rank 9; ranks 0..8 are supported"); no constructor writes past sizes[] or strides[].
struct TensorView {
  static constexpr int kMaxRank = 8;
  // The rank of a view built with a strides list of another length than its sizes list.
  static constexpr int kMismatchedStrides = -1;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  Device device = Device::kHost;

  TensorView() = default;
  // A contiguous row-major view of `sizes` at `data`.
  TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> sizes_)
      : data(data_), dtype(dtype_), rank(static_cast<int>(sizes_.size())) {
    int d = 0;
    for (int64_t s : sizes_) {
      if (d == kMaxRank) break;
      sizes[d++] = s;
    }
    // Unsigned: a shape too large for int64 wraps here (and is rejected by the operators) instead of
    // being undefined behaviour.
    uint64_t stride = 1;
    for (d = stored_rank() - 1; d >= 0; --d) {
      strides[d] = static_cast<int64_t>(stride);
      stride *= static_cast<uint64_t>(sizes[d]);
    }
  }
  // A strided view; `strides_` has as many entries as `sizes_` (otherwise the view is invalid, see above).
  TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> sizes_,
             std::initializer_list<int64_t> strides_)
      : TensorView(data_, dtype_, sizes_) {
    if (strides_.size() != sizes_.size()) {
      rank = kMismatchedStrides;
      return;
    }
    int d = 0;
    for (int64_t s : strides_) {
      if (d == kMaxRank) break;
      strides[d++] = s;
    }
  }

  // Whether rank is one a view can have (0..kMaxRank); the operators check this first.
  bool valid_rank() const { return rank >= 0 && rank <= kMaxRank; }
  int64_t size(int d) const { return sizes[d]; }
  int64_t stride(int d) const { return strides[d]; }
  // The product of the sizes (0 for a view of invalid rank).
  int64_t numel() const {
    if (!valid_rank()) return 0;
    uint64_t n = 1;  // wraps for shapes the operators reject as overflowing
    for (int d = 0; d < rank; ++d) n *= static_cast<uint64_t>(sizes[d]);
    return static_cast<int64_t>(n);
  }
  size_t element_size() const { return ElementSize(dtype); }
  bool is_contiguous() const {
    if (!valid_rank()) return false;
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (sizes[d] != 1 && strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data); }

 private:
  // The dimensions sizes[] and strides[] hold: rank, clamped to 0..kMaxRank.
  int stored_rank() const { return rank < 0 ? 0 : (rank > kMaxRank ? kMaxRank : rank); }
};

}  // namespace moegrad
