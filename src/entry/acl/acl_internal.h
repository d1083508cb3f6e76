// What the aclnn entry points share: the aclTensor, argument and aclOpExecutor objects, the per-thread error
// message, and the two generic halves of every two-phase call, driven by the operator's description
// (moegrad/op_info.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/op_info.hpp"
#include "moegrad/tensor.hpp"
#include "src/core/float16.h"
#include "src/core/types.h"
#include "src/ops/ops.h"

struct aclTensor {
  moegrad::TensorView view;      // data already points at the view's first element (tensorData + offset)
  int64_t storage_elements = 0;  // elements of the allocation the view lives in
  // What aclCreateTensor was given, for the aclGet* accessors.
  int64_t offset = 0;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> storage_dims;
};

// One value of `dtype`, its ElementSize(dtype) bytes at the start of `bytes`.
struct aclScalar {
  moegrad::DType dtype = moegrad::DType::kFloat32;
  alignas(8) unsigned char bytes[8] = {};
};

struct aclIntArray {
  std::vector<int64_t> values;
};

struct aclFloatArray {
  std::vector<float> values;
};

struct aclBoolArray {
  std::vector<bool> values;
};

// Owns its tensors (aclDestroyTensorList destroys them); none is null and none appears twice.
struct aclTensorList {
  std::vector<const aclTensor*> tensors;
};

struct aclOpExecutor {
  std::unique_ptr<moegrad::internal::PlanBase> plan;
  bool repeatable = false;
};

namespace moegrad::acl {

inline const TensorView* View(const aclTensor* t) { return t ? &t->view : nullptr; }

// The values of argument objects, for operators that take them. The object must not be null (an optional
// argument's absence is the caller's to test).
inline const std::vector<int64_t>& IntArrayValues(const aclIntArray* a) { return a->values; }
inline const std::vector<float>& FloatArrayValues(const aclFloatArray* a) { return a->values; }
inline const std::vector<bool>& BoolArrayValues(const aclBoolArray* a) { return a->values; }
inline const std::vector<const aclTensor*>& TensorListTensors(const aclTensorList* l) { return l->tensors; }
inline DType ScalarDType(const aclScalar* s) { return s->dtype; }

// A scalar of any dtype as a double: exact except for 64-bit integers beyond 2^53 (rounded to nearest).
// False only for a null scalar.
inline bool ScalarAsDouble(const aclScalar* s, double* out) {
  if (s == nullptr) return false;
  const auto load = [s](auto v) {
    std::memcpy(&v, s->bytes, sizeof(v));
    return v;
  };
  switch (s->dtype) {
    case DType::kFloat32: *out = load(float{}); return true;
    case DType::kFloat16: *out = F32FromF16Bits(load(uint16_t{})); return true;
    case DType::kBFloat16: *out = F32FromBF16Bits(load(uint16_t{})); return true;
    case DType::kFloat64: *out = load(double{}); return true;
    case DType::kInt8: *out = load(int8_t{}); return true;
    case DType::kUInt8: *out = load(uint8_t{}); return true;
    case DType::kInt16: *out = load(int16_t{}); return true;
    case DType::kUInt16: *out = load(uint16_t{}); return true;
    case DType::kInt32: *out = load(int32_t{}); return true;
    case DType::kUInt32: *out = load(uint32_t{}); return true;
    case DType::kInt64: *out = static_cast<double>(load(int64_t{})); return true;
    case DType::kUInt64: *out = static_cast<double>(load(uint64_t{})); return true;
    case DType::kBool: *out = load(uint8_t{}) != 0 ? 1.0 : 0.0; return true;
  }
  return false;
}

// A scalar as an int64 when it holds one exactly: any integer or bool value (a UINT64 above INT64_MAX is not),
// a floating value only when it is finite and integral and lies in int64's range. False otherwise (and for a
// null scalar); *out is then untouched.
inline bool ScalarAsInt64(const aclScalar* s, int64_t* out) {
  if (s == nullptr) return false;
  switch (s->dtype) {
    case DType::kInt64: std::memcpy(out, s->bytes, sizeof(*out)); return true;
    case DType::kUInt64: {
      uint64_t v;
      std::memcpy(&v, s->bytes, sizeof(v));
      if (v > static_cast<uint64_t>(INT64_MAX)) return false;
      *out = static_cast<int64_t>(v);
      return true;
    }
    default: break;
  }
  double d;
  if (!ScalarAsDouble(s, &d) || !std::isfinite(d) || d != std::trunc(d)) return false;
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return false;  // outside [-2^63, 2^63)
  *out = static_cast<int64_t>(d);
  return true;
}

void SetRecentError(const std::string& message);
const char* RecentError();

// Reports phase one of aclnn<op>GetWorkspaceSize: on success hands the plan to a new executor and its workspace
// size to the caller; on failure records the message and leaves *executor null.
aclnnStatus FinishPhaseOne(const char* op, const core::Status& status, ops::PlanPtr plan, uint64_t* workspace_size,
                           aclOpExecutor** executor);
// Runs phase two of aclnn<op> and frees a one-shot executor.
aclnnStatus RunPhaseTwo(const char* op, void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                        aclrtStream stream);

// Phase one of the operator whose arguments are `Args`: `tensors`, `attrs` and `arrays` are the aclnn
// parameters in the order of OpInfo<Args>::kTensors, kAttrs and kIntArrays (a null array: absent). A required
// tensor that is null is NULLPTR; the rest is the operator layer's.
template <typename Args>
aclnnStatus PhaseOneOf(const aclTensor* const* tensors, const int64_t* attrs, const aclIntArray* const* arrays,
                       uint64_t* workspace_size, aclOpExecutor** executor) {
  using Info = OpInfo<Args>;
  Args args;
  core::Status status;
  for (size_t i = 0; i < std::size(Info::kTensors); ++i) {
    const aclTensor* t = tensors[i];
    const TensorArg<Args>& arg = Info::kTensors[i];
    if (t == nullptr && !arg.is_optional() && status.ok()) {
      status = core::Status(core::StatusCode::kNullptr, std::string(Info::kName) + ": " + arg.name +
                                                            " is required but is null");
    }
    arg.Set(args, View(t));
  }
  for (size_t i = 0; i < std::size(Info::kAttrs); ++i) Info::kAttrs[i].Set(args, attrs[i]);
  if constexpr (kNumIntArrays<Args> > 0) {
    for (size_t i = 0; i < kNumIntArrays<Args>; ++i) {
      if (arrays[i] != nullptr) args.*(Info::kIntArrays[i].value) = IntArrayValues(arrays[i]);
    }
  }
  ops::PlanPtr plan;
  if (status.ok()) status = ops::Plan(args, &plan);
  return FinishPhaseOne(Info::kName, status, std::move(plan), workspace_size, executor);
}

template <typename Args, size_t kTensors, size_t kAttrs>
aclnnStatus PhaseOne(const aclTensor* const (&tensors)[kTensors], const int64_t (&attrs)[kAttrs],
                     uint64_t* workspace_size, aclOpExecutor** executor) {
  static_assert(kTensors == std::size(OpInfo<Args>::kTensors) && kAttrs == std::size(OpInfo<Args>::kAttrs) &&
                    kNumIntArrays<Args> == 0,
                "the aclnn parameters are the operator's OpInfo");
  return PhaseOneOf<Args>(tensors, attrs, nullptr, workspace_size, executor);
}

template <typename Args, size_t kTensors, size_t kAttrs, size_t kArrays>
aclnnStatus PhaseOne(const aclTensor* const (&tensors)[kTensors], const int64_t (&attrs)[kAttrs],
                     const aclIntArray* const (&arrays)[kArrays], uint64_t* workspace_size,
                     aclOpExecutor** executor) {
  static_assert(kTensors == std::size(OpInfo<Args>::kTensors) && kAttrs == std::size(OpInfo<Args>::kAttrs) &&
                    kArrays == kNumIntArrays<Args>,
                "the aclnn parameters are the operator's OpInfo");
  return PhaseOneOf<Args>(tensors, attrs, arrays, workspace_size, executor);
}

// Phase two of the operator whose arguments are `Args`.
template <typename Args>
aclnnStatus PhaseTwo(void* workspace, uint64_t workspace_size, aclOpExecutor* executor, aclrtStream stream) {
  return RunPhaseTwo(OpInfo<Args>::kName, workspace, workspace_size, executor, stream);
}

}  // namespace moegrad::acl
