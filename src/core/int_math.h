// Integer helpers that cannot overflow for the non-negative sizes operators work with.
#pragma once

#include <cstdint>

namespace moegrad::internal {

// ceil(a / b) for a >= 0, b > 0, exact up to INT64_MAX (a + b - 1 would overflow there).
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace moegrad::internal
