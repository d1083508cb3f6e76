// Argument rules shared by every operator, each failing with one line that names the operator, the
// argument, the offending value and the rule.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "moegrad/status.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/status_util.h"
#include "src/kernels/kernel_types.h"

namespace moegrad::ops {

class ArgChecker {
 public:
  explicit ArgChecker(const char* op) : op_(op) {}
  const char* op() const { return op_; }

  // NULLPTR when a required tensor is missing.
  Status Required(const TensorView* t, const char* name) const;
  // Sizes and strides non-negative, known dtype, byte extent representable in 64 bits.
  Status WellFormed(const TensorView& t, const char* name) const;
  Status Rank(const TensorView& t, const char* name, int rank) const;
  // Rank and every size; -1 in `want` accepts any size in that dimension.
  Status Shape(const TensorView& t, const char* name, std::initializer_list<int64_t> want) const;
  Status DTypeIs(const TensorView& t, const char* name, DType want) const;
  // FLOAT32, FLOAT16 or BFLOAT16.
  Status FloatDType(const TensorView& t, const char* name) const;
  // All float tensors of one call share one dtype.
  Status SameDType(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) const;
  // INVALID ("<op>: <out_name> overlaps <other_name> in memory") when the byte spans of two views intersect:
  // [data, data + (1 + sum (size - 1) * stride) * element size). Conservative (interleaved views that share
  // no element still count as overlapping); an empty view overlaps nothing. Call after WellFormed on both.
  Status NoOverlap(const TensorView& out, const char* out_name, const TensorView& other,
                   const char* other_name) const;

  // INVALID ("<op>: <name> has elements that share memory ...") when two elements of an output view may
  // live at the same address (e.g. a stride of 0 over a dimension of size > 1): threads writing different
  // elements would race on those bytes, as PyTorch refuses to write to internally overlapping tensors.
  // Sufficient test: ordered by stride, every dimension of size > 1 steps past the whole span of the
  // smaller ones. Call after WellFormed.
  Status NoSelfOverlap(const TensorView& out, const char* name) const;

  // K, the pairs per token of a finalize-style call whose expandedRowIdx (rank 1) has `pairs` elements and whose
  // `rows_name` tensor ("out", "gradY") has R rows: scales' (R, K) shape when scales is given (then pairs
  // must be R*K), else pairs / R (a multiple of R); with R = 0 and no scales, pairs must be 0 and K is
  // k_if_empty (what another argument fixes, else 0).
  Status PairsPerToken(int64_t pairs, const TensorView* scales, int64_t R, const char* rows_name,
                       int64_t k_if_empty, int64_t* K) const;

  // "<op>: <formatted message>" with the given status.
  __attribute__((format(printf, 3, 4))) Status Fail(StatusCode code, const char* fmt, ...) const;

 private:
  const char* op_;
};

// The phase-two error of a finalize operator's row index: INVALID ("<op>: expandedRowIdx[i] = v is outside
// [lo, hi) for dropPadMode mode").
Status RowIdxOutside(const char* op, int64_t i, int64_t v, int64_t lo, int64_t hi, int64_t mode);

// The phase-two check of a finalize operator's expert ids: INVALID ("<op>: expertIdx[i] = e is outside
// [0, bias_rows), the rows of bias") for the first of the `pairs` ids that is not a row of bias.
Status ExpertIdxInBias(const char* op, const kernels::FlatView& expert_idx, int64_t pairs, int64_t bias_rows);

// "(2, 3, 4)" for messages.
struct ShapeString {
  explicit ShapeString(const TensorView& t);
  explicit ShapeString(std::initializer_list<int64_t> dims);
  char text[200];
};

}  // namespace moegrad::ops
