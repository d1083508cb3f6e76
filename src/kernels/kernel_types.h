// What the operator layer hands to kernels: raw pointers, sizes and strides in elements. No rules here.
#pragma once

#include <cstdint>

#include "moegrad/tensor.hpp"

namespace moegrad::kernels {

// A call that moves at least kStreamMinBytes in all (reads and writes) writes an output of at least
// kStreamMinOutBytes with streaming (non-temporal) stores: the rows it reads push the output out of the caches
// before anyone could read it there, and a streamed line is not read before it is written (a plain store
// reads it first: a third more traffic for a row copy).
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;
constexpr int64_t kStreamMinOutBytes = int64_t{1} << 20;
constexpr bool StreamOutput(int64_t out_bytes, int64_t moved_bytes) {
  return out_bytes >= kStreamMinOutBytes && moved_bytes >= kStreamMinBytes;
}
// A thread of a parallel kernel should move at least this much, or the fork/join costs more than it saves.
constexpr int64_t kBytesPerThread = int64_t{256} << 10;

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

  static RowView Of2D(const TensorView& t) {
    RowView r;
    r.data = t.data;
    r.inner = 1;
    r.outer_stride = t.strides[0];
    r.row_stride = 0;
    r.col_stride = t.strides[1];
    return r;
  }
  static RowView Of3D(const TensorView& t) {
    RowView r;
    r.data = t.data;
    r.inner = t.sizes[1] > 0 ? t.sizes[1] : 1;
    r.outer_stride = t.strides[0];
    r.row_stride = t.strides[1];
    r.col_stride = t.strides[2];
    return r;
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

  static FlatView Of(const TensorView& t) {
    FlatView f;
    f.data = t.data;
    if (t.rank == 1) {
      f.inner = 1;
      f.outer_stride = t.strides[0];
    } else if (t.rank == 2) {
      f.inner = t.sizes[1] > 0 ? t.sizes[1] : 1;
      f.outer_stride = t.strides[0];
      f.inner_stride = t.strides[1];
    }
    return f;
  }
};

}  // namespace moegrad::kernels
