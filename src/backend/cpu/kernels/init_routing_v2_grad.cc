// MoeInitRoutingV2Grad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/init_routing_v2_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/init_routing_v2_grad.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_gather_sum-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// out[n] = rne(sum of gradExpandedX[terms[offsets[n] + m]] over m), ascending k (zero when there are none). Threads
// take chunks of tokens of about equal rows moved (the rows a token sums plus its own) as each finishes its last
// (ChunkQueue).
template <typename T>
void InitRoutingV2GradTyped(const InitRoutingV2GradTask& p) {
  const int64_t N = p.tokens;
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(sizeof(T));
  const int64_t moved = (p.offsets[N] + N) * row_bytes;
  const bool stream = StreamOutput(N * row_bytes, moved);
  internal::ChunkQueue queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int /*part*/, int parts) {
    queue.TakeRangesByCost(
        N, internal::WalkChunks(moved, parts, kChunkBytes), [&](int64_t n) { return p.offsets[n] + n; },
        [&](int64_t begin, int64_t end) {
          GatherSums<T>(
              p.grad_expanded_x, p.out, p.hidden, begin, end,
              [&](int64_t n) { return p.offsets[n + 1] - p.offsets[n]; },
              [&](int64_t n, int64_t m) { return p.terms[p.offsets[n] + m]; }, stream);
        });
    if (stream) hwy::FlushStream();
  });
}

void InitRoutingV2GradImpl(const InitRoutingV2GradTask& p) {
  WithFloatType(p.dtype, [&](auto zero) { InitRoutingV2GradTyped<decltype(zero)>(p); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunInitRoutingV2Grad, InitRoutingV2GradImpl, InitRoutingV2GradTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
