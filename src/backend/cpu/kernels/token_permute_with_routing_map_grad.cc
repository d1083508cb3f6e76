// MoeTokenPermuteWithRoutingMapGrad kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/token_permute_with_routing_map_grad.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/routing_map-inl.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_gather_sum-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/token_permute_with_routing_map_grad.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// probsGrad rows of dropless block b: the routed (t, e) take permutedProbsOutputGrad in expert-major order. Each
// block of token rows starts from its own cursors, so blocks are independent and every entry is written exactly
// once. W: the weights' element type (their dtype is independent of the tokens').
template <typename W>
void DroplessProbsBlock(const TokenPermuteWithRoutingMapGradTask& p, int64_t b) {
  const int64_t E = p.experts;
  const int64_t es = p.probs_grad.col_stride;
  const int64_t ms = p.routing_map.col_stride;
  int64_t* cursor = p.cursors + b * E;
  const int64_t t_end = std::min(p.tokens, (b + 1) * p.block_rows);
  for (int64_t t = b * p.block_rows; t < t_end; ++t) {
    const uint8_t* map = p.routing_map.Row<const uint8_t>(t);
    W* dst = p.probs_grad.Row<W>(t);
    if (es != 1 || ms != 1) {
      for (int64_t e = 0; e < E; ++e) {
        dst[e * es] = map[e * ms] != 0 ? p.probs_grad_in.At<const W>(cursor[e]++) : FromF32<W>(0.0f);
      }
      continue;
    }
    // Few entries are routed: zero the row, then visit the routed ones by the mask bits of the map.
    ZeroRow(dst, 1, E);
    ForEachRouted(map, E, [&](int64_t e) {
      dst[e] = p.probs_grad_in.At<const W>(cursor[e]++);
      return true;
    });
  }
}

// probsGrad rows of tokens [begin, end) in drop-and-pad mode: row t sums permutedProbsOutputGrad[p] per expert
// p / C over the slots p with sortedIndices[p] == t, ascending. W: the weights' element type.
template <typename W>
void DropPadProbsRows(const TokenPermuteWithRoutingMapGradTask& p, int64_t begin, int64_t end) {
  const int64_t C = p.capacity;
  const bool small = p.rows <= int64_t{UINT32_MAX} && C <= int64_t{UINT32_MAX};
  for (int64_t t = begin; t < end; ++t) {
    const int64_t* first = p.slots + p.offsets[t];
    const int64_t count = p.offsets[t + 1] - p.offsets[t];
    W* dst = p.probs_grad.Row<W>(t);
    const int64_t es = p.probs_grad.col_stride;
    ZeroRow(dst, es, p.experts);
    // Slots ascend, so those of one expert are adjacent: sum each run from its first term, round once. One
    // division per run (slots below 2^32 take the shorter 32-bit one).
    for (int64_t m = 0; m < count;) {
      const int64_t e = small ? static_cast<int64_t>(static_cast<uint32_t>(first[m]) / static_cast<uint32_t>(C))
                              : first[m] / C;
      const int64_t run_end = (e + 1) * C;
      float acc = ToF32(p.probs_grad_in.At<const W>(first[m]));
      for (++m; m < count && first[m] < run_end; ++m) acc += ToF32(p.probs_grad_in.At<const W>(first[m]));
      dst[e * es] = FromF32<W>(acc);
    }
  }
}

template <typename T>
void TokenPermuteWithRoutingMapGradDroplessTyped(const TokenPermuteWithRoutingMapGradTask& p) {
  const int64_t K = p.topk;
  const int64_t H = p.hidden;
  // tokensGrad[t] = sum_k grad[sortedIndices[t*K + k]], split over token rows (all of equal cost).
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const int64_t moved = p.tokens * (K + 1) * row_bytes;
  const bool stream = StreamOutput(p.tokens * row_bytes, moved);
  const bool has_probs = p.probs_grad.data != nullptr;
  // Chunks of tokens taken as each thread finishes its last (ChunkQueue), then chunks of probsGrad's blocks
  // from a second queue.
  internal::ChunkQueue queue;
  internal::ChunkQueue probs_queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int /*part*/, int parts) {
    queue.TakeRanges(p.tokens, internal::WalkChunks(moved, parts, kChunkBytes), [&](int64_t begin, int64_t end) {
      GatherSums<T>(
          p.grad, p.tokens_grad, H, begin, end, [&](int64_t) { return K; },
          [&](int64_t t, int64_t k) { return p.sorted_indices.At<const int32_t>(t * K + k); }, stream);
    });
    if (stream) hwy::FlushStream();
    if (!has_probs) return;
    WithFloatType(p.weight_dtype, [&](auto w) {
      probs_queue.TakeRanges(NumBlocks(p), internal::TailChunks(parts), [&](int64_t b_begin, int64_t b_end) {
        for (int64_t b = b_begin; b < b_end; ++b) DroplessProbsBlock<decltype(w)>(p, b);
      });
    });
  });
}

template <typename T>
void TokenPermuteWithRoutingMapGradDropPadTyped(const TokenPermuteWithRoutingMapGradTask& p) {
  const int64_t H = p.hidden;
  const bool has_probs = p.probs_grad.data != nullptr;
  const int64_t row_bytes = H * static_cast<int64_t>(sizeof(T));
  const int64_t moved = (p.rows + p.tokens) * row_bytes;
  const bool stream = StreamOutput(p.tokens * row_bytes, moved);
  // Token row t gathers the rows p with sortedIndices[p] == t, ascending (zero when none); its probsGrad row
  // sums permutedProbsOutputGrad[p] per expert p / C, in the same ascending order. Threads take chunks of
  // tokens of about equal rows moved (the rows a token gathers plus its own) as each finishes its last
  // (ChunkQueue), or, where one token gathers most of the rows (decode sizes, the padding token), ranges of
  // the columns of every token; the probs by token ranges of about equal rows moved.
  const int64_t heaviest = p.most_slots + 1;
  internal::ChunkQueue queue;
  internal::ParallelParts(std::max<int64_t>(1, moved / kBytesPerThread), [&](int part, int parts) {
    int64_t begin, end;
    internal::BalanceByCost(p.tokens, parts, part, [&](int64_t t) { return p.offsets[t] + t; }, &begin, &end);
    auto count_of = [&](int64_t t) { return p.offsets[t + 1] - p.offsets[t]; };
    auto row_of = [&](int64_t t, int64_t m) { return p.slots[p.offsets[t] + m]; };
    if (internal::UnevenTokens(heaviest, p.rows + p.tokens, parts)) {
      int64_t j0, j1;
      internal::BalanceColumns(H, sizeof(T), parts, part, &j0, &j1);
      if (j0 < j1) {
        GatherSums<T>(p.grad.FromColumn<T>(j0), p.tokens_grad.FromColumn<T>(j0), j1 - j0, 0, p.tokens, count_of,
                      row_of, stream);
      }
    } else {
      queue.TakeRangesByCost(
          p.tokens, internal::WalkChunks(moved, parts, kChunkBytes), [&](int64_t t) { return p.offsets[t] + t; },
          [&](int64_t t0, int64_t t1) { GatherSums<T>(p.grad, p.tokens_grad, H, t0, t1, count_of, row_of, stream); });
    }
    if (has_probs) WithFloatType(p.weight_dtype, [&](auto w) { DropPadProbsRows<decltype(w)>(p, begin, end); });
    if (stream) hwy::FlushStream();
  });
}

void TokenPermuteWithRoutingMapGradImpl(const TokenPermuteWithRoutingMapGradTask& p) {
  WithFloatType(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (p.drop_and_pad) TokenPermuteWithRoutingMapGradDropPadTyped<T>(p);
    else TokenPermuteWithRoutingMapGradDroplessTyped<T>(p);
  });
}

void CountRouted(const TokenPermuteWithRoutingMapGradTask& p, int64_t* counts) {
  const int64_t E = p.experts;
  const int64_t ms = p.routing_map.col_stride;
  internal::ParallelFor(0, NumBlocks(p), 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t* count = counts + b * E;
      for (int64_t e = 0; e < E; ++e) count[e] = 0;
      const int64_t t_end = std::min(p.tokens, (b + 1) * p.block_rows);
      if (ms == 1) {
        CountRoutedUnit(static_cast<const uint8_t*>(p.routing_map.data), p.routing_map.outer_stride, b * p.block_rows,
                        t_end, E, count);
        continue;
      }
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

MOEGRAD_KERNEL_ENTRY2(CountRoutedPerBlock, CountRouted, TokenPermuteWithRoutingMapGradTask, int64_t*)
MOEGRAD_KERNEL_ENTRY(RunTokenPermuteWithRoutingMapGrad, TokenPermuteWithRoutingMapGradImpl,
                     TokenPermuteWithRoutingMapGradTask)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
