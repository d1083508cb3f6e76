// The CPU kernels' row primitives, for tests that compile them once per SIMD target themselves
// (tests/row_ops_test.cc). Include after hwy/foreach_target.h and hwy/highway.h, like the headers it includes:
// it has no include guard of its own, so each target's pass re-includes them (Highway's toggle idiom).
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_gather_sum-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_scale_dot-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/row_ops_terms-inl.h"
