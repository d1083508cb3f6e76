// The SIMD target HWY_DYNAMIC_DISPATCH picks on this CPU (lower target bits are better targets), and
// MOEGRAD_MAX_SIMD, the best one the kernels may use.
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hwy/highway.h"
#include "src/backend/cpu/cpu_backend.h"

namespace moegrad::backend::cpu {

// Reads MOEGRAD_MAX_SIMD once per process. A name of a target this build has (any case) disables every
// better one in Highway's dispatch (hwy::DisableTargets, which also holds for other users of Highway in the
// process); a target the CPU lacks leaves the best one it has. Any other value is one warning on stderr and
// every target (a typo must not go unnoticed, nor stop a program that merely links the library).
void LimitSimdTargets() {
  static const bool applied = [] {
    const char* env = std::getenv("MOEGRAD_MAX_SIMD");
    if (env == nullptr) return false;
    int64_t limit = 0;
    std::string names;
    for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
      const int64_t target = targets & -targets;
      if (strcasecmp(env, hwy::TargetName(target)) == 0) limit = target;
      names += (names.empty() ? "" : ", ") + std::string(hwy::TargetName(target));
    }
    if (limit == 0) {
      std::fprintf(stderr, "moegrad: MOEGRAD_MAX_SIMD=%s is not a SIMD target of this build (%s); using every target\n",
                   env, names.c_str());
      return false;
    }
    hwy::DisableTargets(limit - 1);  // every target above `limit`: the lower bits
    return true;
  }();
  (void)applied;
}

const char* SimdTarget() {
  LimitSimdTargets();
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  if (targets == 0) return hwy::TargetName(HWY_STATIC_TARGET);
  return hwy::TargetName(targets & -targets);
}

}  // namespace moegrad::backend::cpu
