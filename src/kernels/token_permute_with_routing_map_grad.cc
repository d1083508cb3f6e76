// MoeTokenPermuteWithRoutingMapGrad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/token_permute_with_routing_map_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/parallel.h"
#include "src/kernels/row_ops-inl.h"
#include "src/kernels/token_permute_with_routing_map_grad.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// Outputs at least this large are written with streaming stores: they cannot stay in the caches anyway.
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;
// A thread should move at least this much.
constexpr int64_t kBytesPerThread = int64_t{256} << 10;
// Row pointers of one output row looked up once rather than once per vector (more take the generic path).
constexpr int64_t kCached = 32;

// dst = rne(sum of the `count` rows row_at(0..count)), in that order (zero when count is 0).
template <typename T, typename RowAt>
HWY_INLINE void GatherSum(int64_t count, const RowAt& row_at, int64_t src_stride, T* dst, int64_t dst_stride,
                          int64_t n, bool stream) {
  if (count <= kCached && src_stride == 1 && dst_stride == 1) {
    const T* rows[kCached] = {};  // initialized only to keep -Wmaybe-uninitialized quiet
    for (int64_t m = 0; m < count; ++m) rows[m] = row_at(m);
    SumRowPtrs<T>(count, rows, nullptr, dst, stream, n);
    return;
  }
  SumRowsOf<T>(
      count, [&](int64_t m, float* scale) { *scale = 1.0f; return row_at(m); }, src_stride, dst, dst_stride, n);
}

template <typename T>
void DroplessTyped(const PermuteGradProblem& p) {
  const int64_t K = p.topk;
  const int64_t H = p.hidden;
  // tokensGrad[t] = sum_k grad[sortedIndices[t*K + k]], split over token rows (all of equal cost).
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const bool stream = p.tokens * row_bytes >= kStreamMinBytes;
  const int64_t moved = p.tokens * (K + 1) * row_bytes;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    int64_t begin, end;
    internal::Balance211(p.tokens, parts, part, &begin, &end);
    for (int64_t t = begin; t < end; ++t) {
      GatherSum<T>(
          K, [&](int64_t k) { return p.grad.Row<const T>(p.sorted_indices.At<const int32_t>(t * K + k)); },
          p.grad.col_stride, p.tokens_grad.Row<T>(t), p.tokens_grad.col_stride, H, stream);
    }
    if (stream) hwy::FlushStream();
  });
  if (p.probs_grad.data == nullptr) return;
  // probsGrad: the routed (t, e) take permutedProbsOutputGrad in expert-major order. Each block of token
  // rows starts from its own cursors, so blocks are independent and every entry is written exactly once.
  const int64_t E = p.experts;
  const int64_t es = p.probs_grad.col_stride;
  const int64_t ms = p.routing_map.col_stride;
  internal::ParallelFor(0, NumBlocks(p), 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t* cursor = p.cursors + b * E;
      const int64_t t_end = std::min(p.tokens, (b + 1) * p.block_rows);
      for (int64_t t = b * p.block_rows; t < t_end; ++t) {
        const uint8_t* map = p.routing_map.Row<const uint8_t>(t);
        T* dst = p.probs_grad.Row<T>(t);
        for (int64_t e = 0; e < E; ++e) {
          dst[e * es] = map[e * ms] != 0 ? p.probs_grad_in.At<const T>(cursor[e]++) : FromF32<T>(0.0f);
        }
      }
    }
  });
}

template <typename T>
void DropPadTyped(const PermuteGradProblem& p) {
  const int64_t H = p.hidden;
  const int64_t C = p.capacity;
  const bool has_probs = p.probs_grad.data != nullptr;
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const bool stream = p.tokens * row_bytes >= kStreamMinBytes;
  const int64_t moved = (p.rows + p.tokens) * row_bytes;
  // Token row t gathers the rows p with sortedIndices[p] == t, ascending (zero when none); its probsGrad row
  // sums permutedProbsOutputGrad[p] per expert p / C, in the same ascending order. Threads take token ranges
  // of about equal rows moved (the rows a token gathers plus its own).
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    int64_t begin, end;
    internal::BalanceByCost(p.tokens, parts, part, [&](int64_t t) { return p.offsets[t] + t; }, &begin, &end);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t* first = p.slots + p.offsets[t];
      const int64_t count = p.offsets[t + 1] - p.offsets[t];
      GatherSum<T>(
          count, [&](int64_t m) { return p.grad.Row<const T>(first[m]); }, p.grad.col_stride,
          p.tokens_grad.Row<T>(t), p.tokens_grad.col_stride, H, stream);
      if (!has_probs) continue;
      T* dst = p.probs_grad.Row<T>(t);
      const int64_t es = p.probs_grad.col_stride;
      ZeroRow(dst, es, p.experts);
      // Slots ascend, so those of one expert are adjacent: sum each run from its first term, round once.
      for (int64_t m = 0; m < count;) {
        const int64_t e = first[m] / C;
        float acc = ToF32(p.probs_grad_in.At<const T>(first[m]));
        for (++m; m < count && first[m] / C == e; ++m) acc += ToF32(p.probs_grad_in.At<const T>(first[m]));
        dst[e * es] = FromF32<T>(acc);
      }
    }
    if (stream) hwy::FlushStream();
  });
}

template <typename T>
void PermuteGradTyped(const PermuteGradProblem& p) {
  if (p.drop_and_pad) return DropPadTyped<T>(p);
  DroplessTyped<T>(p);
}

void PermuteGrad(const PermuteGradProblem& p) {
  switch (p.dtype) {
    case DType::kFloat32: return PermuteGradTyped<float>(p);
    case DType::kFloat16: return PermuteGradTyped<hwy::float16_t>(p);
    case DType::kBFloat16: return PermuteGradTyped<hwy::bfloat16_t>(p);
    default: return;  // the operator layer admits only the three float dtypes
  }
}

void CountRouted(const PermuteGradProblem& p, int64_t* counts) {
  const int64_t E = p.experts;
  const int64_t ms = p.routing_map.col_stride;
  internal::ParallelFor(0, NumBlocks(p), 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t* count = counts + b * E;
      for (int64_t e = 0; e < E; ++e) count[e] = 0;
      const int64_t t_end = std::min(p.tokens, (b + 1) * p.block_rows);
      for (int64_t t = b * p.block_rows; t < t_end; ++t) {
        const uint8_t* map = p.routing_map.Row<const uint8_t>(t);
        for (int64_t e = 0; e < E; ++e) count[e] += map[e * ms] != 0 ? 1 : 0;
      }
    }
  });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

HWY_EXPORT(PermuteGrad);
HWY_EXPORT(CountRouted);

void CountRoutedPerBlock(const PermuteGradProblem& p, int64_t* counts) {
  HWY_DYNAMIC_DISPATCH(CountRouted)(p, counts);
}

void TokenPermuteWithRoutingMapGrad(const PermuteGradProblem& p) { HWY_DYNAMIC_DISPATCH(PermuteGrad)(p); }

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
