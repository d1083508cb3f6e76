// How a problem addresses its tensors: raw pointers, sizes and strides in elements. Device-neutral: a backend
// for any device reads rows and elements through these.
#pragma once

#include <cstdint>

namespace moegrad::core {

// Rows of a 2-D (rows, H) or 3-D (E, C, H) tensor addressed by a flat row number v: row v starts at
// (v / inner) * outer_stride + (v % inner) * row_stride elements from data.
struct RowView {
  void* data = nullptr;
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;

  int64_t RowOffset(int64_t v) const {
    return inner == 1 ? v * outer_stride : (v / inner) * outer_stride + (v % inner) * row_stride;
  }
  template <typename T>
  T* Row(int64_t v) const { return static_cast<T*>(data) + RowOffset(v); }
  // The same rows from column j on (elements of type T).
  template <typename T>
  RowView FromColumn(int64_t j) const {
    RowView v = *this;
    v.data = static_cast<T*>(data) + j * col_stride;
    return v;
  }
};

// A 1-D (n) or 2-D (a, b) view read as a flat sequence: element i = (i / b, i % b).
struct FlatView {
  void* data = nullptr;
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;

  int64_t Offset(int64_t i) const {
    return inner == 1 ? i * outer_stride : (i / inner) * outer_stride + (i % inner) * inner_stride;
  }
  template <typename T>
  T& At(int64_t i) const { return static_cast<T*>(data)[Offset(i)]; }
};

}  // namespace moegrad::core
