// The test-support door into the aclnn entry layer: what an aclTensor holds, and a way to give one a device
// the C API cannot (aclCreateTensor makes host tensors). Tests, tools and fuzzers reach internals only through
// src/testing/ (and the reference, src/ref/); see docs/design.md.
#pragma once

#include "acl/acl.h"
#include "moegrad/tensor.hpp"
#include "src/entry/acl/acl_internal.h"

namespace moegrad::testing {

inline const TensorView& ViewOf(const aclTensor* t) { return t->view; }
inline void SetDevice(aclTensor* t, Device device) { t->view.device = device; }

}  // namespace moegrad::testing
