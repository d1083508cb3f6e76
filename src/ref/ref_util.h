// Element access for the scalar reference: every tensor read and written one element at a time through
// its view, so the reference shares no addressing code with the kernels.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "moegrad/tensor.hpp"
#include "src/core/float16.h"

namespace moegrad::ref {

inline char* ElementPtr(const TensorView& t, std::initializer_list<int64_t> index) {
  int64_t offset = 0;
  int d = 0;
  for (int64_t i : index) offset += i * t.strides[d++];
  return static_cast<char*>(t.data) + offset * static_cast<int64_t>(t.element_size());
}

inline float GetF(const TensorView& t, std::initializer_list<int64_t> index) {
  const char* p = ElementPtr(t, index);
  switch (t.dtype) {
    case DType::kFloat32: return *reinterpret_cast<const float*>(p);
    case DType::kFloat16: return F32FromF16Bits(*reinterpret_cast<const uint16_t*>(p));
    case DType::kBFloat16: return F32FromBF16Bits(*reinterpret_cast<const uint16_t*>(p));
    default: return 0.0f;
  }
}

inline void SetF(const TensorView& t, std::initializer_list<int64_t> index, float v) {
  char* p = ElementPtr(t, index);
  switch (t.dtype) {
    case DType::kFloat32: *reinterpret_cast<float*>(p) = v; break;
    case DType::kFloat16: *reinterpret_cast<uint16_t*>(p) = F16BitsFromF32(v); break;
    case DType::kBFloat16: *reinterpret_cast<uint16_t*>(p) = BF16BitsFromF32(v); break;
    default: break;
  }
}

// INT32 index values; INT8 / BOOL routing-map entries (non-zero: routed).
inline int64_t GetI(const TensorView& t, std::initializer_list<int64_t> index) {
  const char* p = ElementPtr(t, index);
  switch (t.dtype) {
    case DType::kInt32: return *reinterpret_cast<const int32_t*>(p);
    case DType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case DType::kBool: case DType::kUInt8: return *reinterpret_cast<const uint8_t*>(p);
    case DType::kInt64: return *reinterpret_cast<const int64_t*>(p);
    default: return 0;
  }
}

// moegrad's canonical dot product sum_j x(j) * y(j) of n terms (the order docs/ops/ fix for the probability
// gradients): term j is added to partial sum j % 16 in ascending j (every partial starts at +0), then the
// partials combine l + (l + 8), then + 4, + 2, + 1. Each term is one fp32 product.
template <typename X, typename Y>
float CanonicalDot(int64_t n, const X& x, const Y& y) {
  float part[16] = {};
  for (int64_t j = 0; j < n; ++j) part[j % 16] += x(j) * y(j);
  for (int w = 8; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

inline void SetI(const TensorView& t, std::initializer_list<int64_t> index, int64_t v) {
  *reinterpret_cast<int32_t*>(ElementPtr(t, index)) = static_cast<int32_t>(v);
}

}  // namespace moegrad::ref
