// Argument rules shared by every operator, each failing with one line that names the operator, the
// argument, the offending value and the rule.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "moegrad/op_info.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/status_util.h"
#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::ops {

using core::Status;
using core::StatusCode;

// The core values of public enums (the two share their values).
inline core::DType CoreDType(DType t) { return static_cast<core::DType>(t); }
inline core::Device CoreDevice(Device d) { return static_cast<core::Device>(d); }
inline const char* NameOf(DType t) { return core::DTypeName(CoreDType(t)); }
// An optional tensor as a pointer, null when absent.
inline const TensorView* Opt(const std::optional<TensorView>& t) { return t ? &*t : nullptr; }

// How a problem addresses a view: rows of a 2-D (rows, H) or 3-D (E, C, H) tensor, or a 1-D / 2-D tensor read as
// a flat sequence.
core::RowView Rows2D(const TensorView& t);
core::RowView Rows3D(const TensorView& t);
core::FlatView Flat(const TensorView& t);

// The checks of one phase one, or of one output query (`outputs` not null: phase one without the outputs, which
// reports them instead of checking them). The operator's Plan is the same code for both: its outputs are
// checked only by OutputRequired, Tensors, Output / OutputShape and through Given, and after the last of them it
// ends a query with OutputsReported.
template <typename Args>
std::string GroupNamesOf(DTypeGroup g) {
  std::vector<const char*> members;
  for (const TensorArg<Args>& arg : OpInfo<Args>::kTensors) {
    if (arg.group == g) members.push_back(arg.name);
  }
  std::string s;
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) s += i + 1 == members.size() ? " and " : ", ";
    s += members[i];
  }
  return s;
}

class ArgChecker {
 public:
  explicit ArgChecker(const char* op, std::vector<OutputSpec>* outputs = nullptr) : op_(op), outputs_(outputs) {}
  const char* op() const { return op_; }
  // True in an output query.
  bool querying() const { return outputs_ != nullptr; }

  // NULLPTR when a required tensor is missing.
  Status Required(const TensorView* t, const char* name) const;
  // Required for an output (e.g. "gradScalesOut (required with scales)"); an output query has no outputs to
  // require.
  Status OutputRequired(const TensorView* t, const char* name) const {
    return querying() ? Status::Ok() : Required(t, name);
  }
  // Sizes and strides non-negative, known dtype, byte extent representable in 64 bits; a non-empty view has
  // data, aligned to its element size (INVALID otherwise: kernels load elements in place).
  Status WellFormed(const TensorView& t, const char* name) const;
  Status Rank(const TensorView& t, const char* name, int rank) const;
  // Rank and every size; -1 in `want` accepts any size in that dimension.
  Status Shape(const TensorView& t, const char* name, std::initializer_list<int64_t> want) const;
  Status DTypeIs(const TensorView& t, const char* name, DType want) const;
  // FLOAT32, FLOAT16 or BFLOAT16.
  Status FloatDType(const TensorView& t, const char* name) const;
  // INT8 or BOOL (a routing map).
  Status IndexMapDType(const TensorView& t, const char* name) const;
  // The float tensors of one dtype group (DTypeGroup, docs/design.md "Mixed precision") share the dtype of the
  // group's first tensor `ref`: INVALID naming both tensors, both dtypes and the group (`group`, GroupNames)
  // otherwise.
  Status SameDType(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name,
                   const char* group) const;
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

  // Every tensor of the call WellFormed, in the order of OpInfo<Args>::kTensors, and all on one device, which
  // `device` receives (the host when the call has no tensor). An output query skips the outputs, and starts
  // its report: one unwritten entry per output, in kTensors order, for Output to fill.
  template <typename Args>
  Status Tensors(const Args& a, core::Device* device) const {
    const TensorView* first = nullptr;
    const char* first_name = "";
    if (querying()) outputs_->clear();
    for (const TensorArg<Args>& arg : OpInfo<Args>::kTensors) {
      if (querying() && arg.role == ArgRole::kOutput) {
        OutputSpec spec;
        spec.name = arg.name;
        outputs_->push_back(spec);
        continue;
      }
      const TensorView* t = arg.Get(a);
      if (t == nullptr) continue;
      MOEGRAD_RETURN_IF_ERROR(WellFormed(*t, arg.name));
      if (first == nullptr) {
        first = t;
        first_name = arg.name;
      } else if (t->device != first->device) {
        return Fail(StatusCode::kUnsupported, "%s is on device %d but %s is on device %d; the tensors of a call "
                    "must share one device", arg.name, static_cast<int>(t->device), first_name,
                    static_cast<int>(first->device));
      }
    }
    *device = first != nullptr ? CoreDevice(first->device) : core::Device::kHost;
    return Status::Ok();
  }

  // An output the call writes, after every rule on the inputs: its shape is `want` and its dtype `dtype`.
  // Checked in a phase one: the shape as Shape checks it, the dtype as SameDType(t, name, like, like_name, group)
  // does when `like_name` is given (a float output: the dtype of its group's first tensor `like`), else as
  // DTypeIs. Reported in an output query (`t` is not read), with INVALID when its element or byte count does
  // not fit in int64, as WellFormed says of a view of that shape.
  Status Output(const TensorView* t, const char* name, std::initializer_list<int64_t> want, const TensorView& like,
                const char* like_name, const char* group) const;
  Status Output(const TensorView* t, const char* name, std::initializer_list<int64_t> want, DType dtype) const;
  // Output's shape half, for an output whose dtype (`dtype`, as reported) a phase one checks later among the
  // call's other float tensors (through Given), where the operator's error table has it.
  Status OutputShape(const TensorView* t, const char* name, std::initializer_list<int64_t> want, DType dtype) const;
  // An output for a phase one's later checks: `t`, or null in an output query, which has no outputs.
  const TensorView* Given(const TensorView* t) const { return querying() ? nullptr : t; }

  // The end of an output query: every output that OpInfo<Args> says the call writes (TensorArg::WrittenBy) has
  // been reported by Output, and no other (INNER otherwise: the operator's Plan and its OpInfo disagree).
  template <typename Args>
  Status OutputsReported(const Args& a) const {
    size_t i = 0;
    for (const TensorArg<Args>& arg : OpInfo<Args>::kTensors) {
      if (arg.role != ArgRole::kOutput) continue;
      if (i >= outputs_->size() || (*outputs_)[i].written != arg.WrittenBy(a)) {
        return Fail(StatusCode::kInner, "the output query reported %s wrongly", arg.name);
      }
      ++i;
    }
    return Status::Ok();
  }

  // Every output the call writes (TensorArg::Written) overlaps neither itself nor any other tensor of the call
  // (inputs, and outputs it writes), in kTensors order.
  template <typename Args>
  Status OutputsApart(const Args& a) const {
    auto counts = [&](const TensorArg<Args>& arg) {
      return arg.Get(a) != nullptr && (arg.role == ArgRole::kInput || arg.Written(a));
    };
    for (const TensorArg<Args>& out : OpInfo<Args>::kTensors) {
      if (!out.Written(a)) continue;
      MOEGRAD_RETURN_IF_ERROR(NoSelfOverlap(*out.Get(a), out.name));
      for (const TensorArg<Args>& other : OpInfo<Args>::kTensors) {
        if (&other == &out || !counts(other)) continue;
        MOEGRAD_RETURN_IF_ERROR(NoOverlap(*out.Get(a), out.name, *other.Get(a), other.name));
      }
    }
    return Status::Ok();
  }

  // "<op>: <formatted message>" with the given status.
  // Cold: the compiler moves the paths that fail out of the checks, so that a call that passes runs through
  // fewer code lines (phase one of a call made after other work finds its code out of the caches).
  __attribute__((cold, format(printf, 3, 4))) Status Fail(StatusCode code, const char* fmt, ...) const;

 private:
  Status Report(const char* name, std::initializer_list<int64_t> sizes, DType dtype) const;

  const char* op_;
  std::vector<OutputSpec>* outputs_;  // the output query's report; null in a phase one
};

// "gradY, expandedX, bias and gradExpandedXOut": the tensors of dtype group `g` of Args in OpInfo<Args>::kTensors
// order, for SameDType's messages.
template <typename Args>
const char* GroupNames(DTypeGroup g) {
  static const std::string names[3] = {GroupNamesOf<Args>(DTypeGroup::kNone), GroupNamesOf<Args>(DTypeGroup::kTokens),
                                       GroupNamesOf<Args>(DTypeGroup::kWeights)};
  return names[static_cast<int>(g)].c_str();
}

// "(2, 3, 4)" for messages.
struct ShapeString {
  explicit ShapeString(const TensorView& t);
  explicit ShapeString(std::initializer_list<int64_t> dims);
  char text[200];
};

}  // namespace moegrad::ops
