// The best SIMD target HWY_DYNAMIC_DISPATCH picks on this CPU (lower target bits are better targets).
#include "hwy/highway.h"
#include "src/backend/cpu/cpu_backend.h"

namespace moegrad::backend::cpu {

const char* SimdTarget() {
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  if (targets == 0) return hwy::TargetName(HWY_STATIC_TARGET);
  return hwy::TargetName(targets & -targets);
}

}  // namespace moegrad::backend::cpu
