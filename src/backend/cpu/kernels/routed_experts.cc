// RunRoutedExperts, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/routed_experts.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/kernels/routed_experts.h"
#include "src/backend/cpu/kernels/routing_map-inl.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// One pass over the map, its rows read in vectors where they are unit-stride. kWeights: also the probs of type
// W widened to fp32.
template <bool kWeights, typename W>
void RoutedExpertsTyped(const RoutedExpertsTask& r) {
  const int64_t E = r.experts;
  const int64_t K = r.topk;
  const int64_t ms = r.routing_map.col_stride;
  const int64_t ps = r.probs.col_stride;
  *r.bad_token = -1;
  for (int64_t t = 0; t < r.tokens; ++t) {
    const uint8_t* map = r.routing_map.Row<const uint8_t>(t);
    const int64_t i = t * K;
    int64_t k = 0;
    auto take = [&](int64_t e) {
      if (k < K) {
        r.out_experts[i + k] = e;
        if constexpr (kWeights) r.weights[i + k] = ToF32(r.probs.Row<const W>(t)[e * ps]);
      }
      ++k;
      return true;
    };
    if (ms == 1) {
      ForEachRouted(map, E, take);
    } else {
      for (int64_t e = 0; e < E; ++e) {
        if (map[e * ms] != 0) take(e);
      }
    }
    if (k != K) {
      *r.bad_token = t;
      *r.bad_count = k;
      return;
    }
  }
}

void RoutedExpertsImpl(const RoutedExpertsTask& r) {
  if (r.probs.data == nullptr) return RoutedExpertsTyped<false, float>(r);
  WithFloatType(r.weight_dtype, [&](auto w) { RoutedExpertsTyped<true, decltype(w)>(r); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunRoutedExperts, RoutedExpertsImpl, RoutedExpertsTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
