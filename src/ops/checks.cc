#include "src/ops/checks.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace moegrad::ops {
namespace {

void FormatDims(const int64_t* dims, int rank, char* out, size_t cap) {
  size_t n = static_cast<size_t>(std::snprintf(out, cap, "("));
  for (int d = 0; d < rank && n < cap; ++d) {
    n += static_cast<size_t>(std::snprintf(out + n, cap - n, d ? ", %lld" : "%lld",
                                           static_cast<long long>(dims[d])));
  }
  if (n < cap) std::snprintf(out + n, cap - n, rank == 1 ? ",)" : ")");
}

// The bytes a well-formed view may touch, [begin, end); begin == end for an empty view. Saturates at the top of
// the address space instead of wrapping.
void ByteSpan(const TensorView& t, uintptr_t* begin, uintptr_t* end) {
  *begin = *end = reinterpret_cast<uintptr_t>(t.data);
  uint64_t extent = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] == 0) return;
    extent += static_cast<uint64_t>(t.sizes[d] - 1) * static_cast<uint64_t>(t.strides[d]);
  }
  const uint64_t bytes = extent * ElementSize(t.dtype);  // WellFormed: fits in 63 bits
  if (__builtin_add_overflow(*begin, static_cast<uintptr_t>(bytes), end)) *end = UINTPTR_MAX;
}

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

}  // namespace

// An empty view may have no data (WellFormed admits a null pointer there): its rows get stride 0, so that
// addressing a row of it (a row of H = 0 elements) offsets nothing; no element of it is ever addressed.
core::RowView Rows2D(const TensorView& t) {
  const bool empty = t.numel() == 0;
  core::RowView r;
  r.data = t.data;
  r.inner = 1;
  r.outer_stride = empty ? 0 : t.strides[0];
  r.row_stride = 0;
  r.col_stride = t.strides[1];
  return r;
}

core::RowView Rows3D(const TensorView& t) {
  const bool empty = t.numel() == 0;
  core::RowView r;
  r.data = t.data;
  r.inner = t.sizes[1] > 0 ? t.sizes[1] : 1;
  r.outer_stride = empty ? 0 : t.strides[0];
  r.row_stride = empty ? 0 : t.strides[1];
  r.col_stride = t.strides[2];
  return r;
}

core::FlatView Flat(const TensorView& t) {
  core::FlatView f;
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

ShapeString::ShapeString(const TensorView& t) {
  FormatDims(t.sizes, t.valid_rank() ? t.rank : 0, text, sizeof(text));
}

ShapeString::ShapeString(std::initializer_list<int64_t> dims) {
  FormatDims(dims.begin(), static_cast<int>(dims.size()), text, sizeof(text));
}

Status ArgChecker::Fail(StatusCode code, const char* fmt, ...) const {
  char buf[480];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, std::string(op_) + ": " + buf);
}

Status ArgChecker::Required(const TensorView* t, const char* name) const {
  if (t == nullptr) return Fail(StatusCode::kNullptr, "%s is required but is null", name);
  return Status::Ok();
}

Status ArgChecker::WellFormed(const TensorView& t, const char* name) const {
  if (t.rank == TensorView::kMismatchedStrides) {
    return Fail(StatusCode::kInvalid, "%s was built with a strides list whose length differs from its sizes'",
                name);
  }
  if (!t.valid_rank()) {
    return Fail(StatusCode::kInvalid, "%s has rank %d; ranks 0..%d are supported", name, t.rank,
                TensorView::kMaxRank);
  }
  if (ElementSize(t.dtype) == 0) {
    return Fail(StatusCode::kInvalid, "%s has unknown dtype %d", name, static_cast<int>(t.dtype));
  }
  int64_t extent = 1;  // elements spanned by the view: 1 + sum (size - 1) * stride
  bool empty = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] < 0) {
      return Fail(StatusCode::kInvalid, "%s has negative size %lld in dimension %d", name,
                  static_cast<long long>(t.sizes[d]), d);
    }
    if (t.strides[d] < 0) {
      return Fail(StatusCode::kInvalid, "%s has negative stride %lld in dimension %d", name,
                  static_cast<long long>(t.strides[d]), d);
    }
    if (t.sizes[d] == 0) empty = true;
  }
  int64_t numel = 1;
  for (int d = 0; d < t.rank; ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t.sizes[d], numel, &numel) ||
        (!empty && (__builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &span) ||
                    __builtin_add_overflow(extent, span, &extent)))) {
      return Fail(StatusCode::kInvalid, "%s of shape %s overflows 64-bit element offsets", name,
                  ShapeString(t).text);
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(extent, static_cast<int64_t>(ElementSize(t.dtype)), &bytes)) {
    return Fail(StatusCode::kInvalid, "%s of shape %s overflows 64-bit byte offsets", name, ShapeString(t).text);
  }
  if (!empty && t.data == nullptr) {
    return Fail(StatusCode::kNullptr, "%s has shape %s but its data pointer is null", name, ShapeString(t).text);
  }
  // Kernels load elements in place: a pointer off its element size (a byte offset into another allocation)
  // would be undefined behaviour, and a fault on some CPUs.
  if (!empty && reinterpret_cast<uintptr_t>(t.data) % ElementSize(t.dtype) != 0) {
    return Fail(StatusCode::kInvalid, "%s has dtype %s but its data pointer is not aligned to its %d-byte elements",
                name, NameOf(t.dtype), static_cast<int>(ElementSize(t.dtype)));
  }
  return Status::Ok();
}

Status ArgChecker::Rank(const TensorView& t, const char* name, int rank) const {
  if (t.rank != rank) {
    return Fail(StatusCode::kInvalid, "%s must be %d-D but has shape %s", name, rank, ShapeString(t).text);
  }
  return Status::Ok();
}

Status ArgChecker::Shape(const TensorView& t, const char* name, std::initializer_list<int64_t> want) const {
  bool match = t.rank == static_cast<int>(want.size());
  for (int d = 0; match && d < t.rank; ++d) {
    const int64_t w = want.begin()[d];
    match = (w < 0 || t.sizes[d] == w);
  }
  if (!match) {
    return Fail(StatusCode::kInvalid, "%s has shape %s but must be %s", name, ShapeString(t).text,
                ShapeString(want).text);
  }
  return Status::Ok();
}

Status ArgChecker::DTypeIs(const TensorView& t, const char* name, DType want) const {
  if (t.dtype != want) {
    return Fail(StatusCode::kInvalid, "%s has dtype %s but must be %s", name, NameOf(t.dtype), NameOf(want));
  }
  return Status::Ok();
}

Status ArgChecker::FloatDType(const TensorView& t, const char* name) const {
  if (!IsFloat(t.dtype)) {
    return Fail(StatusCode::kInvalid, "%s has dtype %s but must be FLOAT32, FLOAT16 or BFLOAT16", name,
                NameOf(t.dtype));
  }
  return Status::Ok();
}

Status ArgChecker::IndexMapDType(const TensorView& t, const char* name) const {
  if (t.dtype != DType::kInt8 && t.dtype != DType::kBool) {
    return Fail(StatusCode::kInvalid, "%s has dtype %s but must be INT8 or BOOL", name, NameOf(t.dtype));
  }
  return Status::Ok();
}

Status ArgChecker::SameDType(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name,
                             const char* group) const {
  if (t.dtype != ref.dtype) {
    return Fail(StatusCode::kInvalid, "%s is %s but %s is %s (%s share a dtype)", name, NameOf(t.dtype), ref_name,
                NameOf(ref.dtype), group);
  }
  return Status::Ok();
}

Status ArgChecker::NoOverlap(const TensorView& out, const char* out_name, const TensorView& other,
                             const char* other_name) const {
  uintptr_t a0, a1, b0, b1;
  ByteSpan(out, &a0, &a1);
  ByteSpan(other, &b0, &b1);
  if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1) {
    return Fail(StatusCode::kInvalid, "%s overlaps %s in memory", out_name, other_name);
  }
  return Status::Ok();
}

Status ArgChecker::NoSelfOverlap(const TensorView& out, const char* name) const {
  int dims[TensorView::kMaxRank];
  int n = 0;
  for (int d = 0; d < out.rank; ++d) {
    if (out.sizes[d] == 0) return Status::Ok();  // empty: nothing is written
    if (out.sizes[d] > 1) dims[n++] = d;
  }
  // By stride, ties in dimension order: an insertion sort of at most kMaxRank entries (std::stable_sort
  // would take a heap buffer and a merge sort's code on every call).
  for (int q = 1; q < n; ++q) {
    const int d = dims[q];
    int r = q;
    for (; r > 0 && out.strides[dims[r - 1]] > out.strides[d]; --r) dims[r] = dims[r - 1];
    dims[r] = d;
  }
  int64_t span = 1;  // elements spanned by the dimensions checked so far (fits: WellFormed)
  for (int q = 0; q < n; ++q) {
    const int d = dims[q];
    if (out.strides[d] < span) {
      return Fail(StatusCode::kInvalid,
                  "%s has elements that share memory (stride %lld in dimension %d over a span of %lld); an "
                  "output must not overlap itself",
                  name, static_cast<long long>(out.strides[d]), d, static_cast<long long>(span));
    }
    span += out.strides[d] * (out.sizes[d] - 1);
  }
  return Status::Ok();
}

Status ArgChecker::Output(const TensorView* t, const char* name, std::initializer_list<int64_t> want,
                          const TensorView& like, const char* like_name, const char* group) const {
  MOEGRAD_RETURN_IF_ERROR(OutputShape(t, name, want, like.dtype));
  return querying() ? Status::Ok() : SameDType(*t, name, like, like_name, group);
}

Status ArgChecker::Output(const TensorView* t, const char* name, std::initializer_list<int64_t> want,
                          DType dtype) const {
  MOEGRAD_RETURN_IF_ERROR(OutputShape(t, name, want, dtype));
  return querying() ? Status::Ok() : DTypeIs(*t, name, dtype);
}

Status ArgChecker::OutputShape(const TensorView* t, const char* name, std::initializer_list<int64_t> want,
                               DType dtype) const {
  if (querying()) return Report(name, want, dtype);
  if (t == nullptr) return Fail(StatusCode::kInner, "%s is checked but was not required", name);
  return Shape(*t, name, want);
}

// The counts WellFormed checks of a contiguous view of `sizes`: its extent is its element count.
Status ArgChecker::Report(const char* name, std::initializer_list<int64_t> sizes, DType dtype) const {
  OutputSpec* spec = nullptr;
  for (OutputSpec& s : *outputs_) {
    if (std::strcmp(s.name, name) == 0) spec = &s;
  }
  if (spec == nullptr || spec->written || sizes.size() > static_cast<size_t>(TensorView::kMaxRank)) {
    return Fail(StatusCode::kInner, "the output query cannot report %s", name);
  }
  int64_t numel = 1;
  for (int64_t size : sizes) {
    if (size < 0) return Fail(StatusCode::kInner, "the output query found a negative size of %s", name);
    if (__builtin_mul_overflow(size, numel, &numel)) {
      return Fail(StatusCode::kInvalid, "%s of shape %s overflows 64-bit element offsets", name,
                  ShapeString(sizes).text);
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(ElementSize(dtype)), &bytes)) {
    return Fail(StatusCode::kInvalid, "%s of shape %s overflows 64-bit byte offsets", name, ShapeString(sizes).text);
  }
  spec->written = true;
  spec->dtype = dtype;
  spec->rank = static_cast<int>(sizes.size());
  int d = 0;
  for (int64_t size : sizes) spec->sizes[d++] = size;
  return Status::Ok();
}

Status ArgChecker::PairsPerToken(int64_t pairs, const TensorView* scales, int64_t R, const char* rows_name,
                                 int64_t k_if_empty, int64_t* K) const {
  if (scales != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(Rank(*scales, "scales", 2));
    MOEGRAD_RETURN_IF_ERROR(Shape(*scales, "scales", {R, -1}));
    *K = scales->sizes[1];
    if (pairs != R * *K) {
      return Fail(StatusCode::kInvalid, "expandedRowIdx has %lld elements but must have R*K = %lld * %lld",
                  static_cast<long long>(pairs), static_cast<long long>(R), static_cast<long long>(*K));
    }
    return Status::Ok();
  }
  if (R == 0) {
    if (pairs != 0) {
      return Fail(StatusCode::kInvalid, "expandedRowIdx has %lld elements but %s has 0 rows",
                  static_cast<long long>(pairs), rows_name);
    }
    *K = k_if_empty;
    return Status::Ok();
  }
  if (pairs % R != 0) {
    return Fail(StatusCode::kInvalid, "expandedRowIdx has %lld elements, not a multiple of the %lld rows of %s (R*K)",
                static_cast<long long>(pairs), static_cast<long long>(R), rows_name);
  }
  *K = pairs / R;
  return Status::Ok();
}

}  // namespace moegrad::ops
