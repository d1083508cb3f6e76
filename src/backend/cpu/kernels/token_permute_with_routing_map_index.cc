// MoeTokenPermuteWithRoutingMap index passes (per-block counts, then each block's placement), one copy per
// SIMD target: the routing map is read in vectors (routing_map-inl.h, shared with the gradient).
#include <algorithm>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/token_permute_with_routing_map_index.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/routing_map-inl.h"
#include "src/backend/cpu/kernels/token_permute_with_routing_map.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

HWY_INLINE void BlockRange(const TokenPermuteWithRoutingMapTask& p, int64_t b, int64_t* t0, int64_t* t1) {
  *t0 = b * p.block_tokens;
  *t1 = std::min(p.tokens, *t0 + p.block_tokens);
}

HWY_INLINE const uint8_t* MapRow(const TokenPermuteWithRoutingMapTask& p, int64_t t) { return p.map + t * p.map_row_stride; }

void PermuteCountT(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s) {
  const int64_t E = p.experts;
  internal::ParallelFor(0, p.blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* count = s.counts + b * E;
      for (int64_t e = 0; e < E; ++e) count[e] = 0;
      int64_t t0, t1;
      BlockRange(p, b, &t0, &t1);
      s.bad[2 * b] = -1;
      s.bad[2 * b + 1] = 0;
      if (p.map_col_stride == 1) {
        CountRoutedUnit(p.map, p.map_row_stride, t0, t1, E, count);
        if (p.drop_and_pad) continue;
        for (int64_t t = t0; t < t1; ++t) {
          int64_t routed = 0;
          ForEachRouted(MapRow(p, t), E, [&](int64_t) { ++routed; return true; });
          if (routed != p.topk) {
            s.bad[2 * b] = t;
            s.bad[2 * b + 1] = routed;
            break;
          }
        }
        continue;
      }
      for (int64_t t = t0; t < t1; ++t) {
        const uint8_t* row = MapRow(p, t);
        int64_t routed = 0;
        for (int64_t e = 0; e < E; ++e) {
          const int64_t hit = row[e * p.map_col_stride] != 0;
          count[e] += hit;
          routed += hit;
        }
        if (!p.drop_and_pad && routed != p.topk && s.bad[2 * b] < 0) {
          s.bad[2 * b] = t;
          s.bad[2 * b + 1] = routed;
        }
      }
    }
  });
}

void PermuteIndicesT(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s) {
  const int64_t E = p.experts;
  for (int64_t e = 0; e < E; ++e) s.totals[e] = 0;
  for (int64_t b = 0; b < p.blocks; ++b) {
    for (int64_t e = 0; e < E; ++e) s.totals[e] += s.counts[b * E + e];
  }
  s.starts[0] = 0;
  for (int64_t e = 0; e < E; ++e) s.starts[e + 1] = s.starts[e] + s.totals[e];
  // counts[b][e] becomes block b's first position in expert e: dropless, a permuted row; drop-and-pad,
  // the number of tokens routed to e before the block.
  for (int64_t e = 0; e < E; ++e) s.running[e] = p.drop_and_pad ? 0 : s.starts[e];
  for (int64_t b = 0; b < p.blocks; ++b) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t c = s.counts[b * E + e];
      s.counts[b * E + e] = s.running[e];
      s.running[e] += c;
    }
  }

  const int64_t K = p.topk;
  const int64_t C = p.capacity;
  internal::ParallelFor(0, p.blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* cursor = s.counts + b * E;
      int64_t t0, t1;
      BlockRange(p, b, &t0, &t1);
      if (p.drop_and_pad && p.map_col_stride == 1) {
        // An unrouted token t lands at totals[e] + (t - cursor[e]) in expert e, a position that never falls
        // as t grows; when it is past C for every expert at the block's first token, no unrouted token of
        // the block is kept, and only the routed entries need visiting.
        bool fills = false;
        for (int64_t e = 0; e < E && !fills; ++e) fills = s.totals[e] + (t0 - cursor[e]) < C;
        if (!fills) {
          for (int64_t t = t0; t < t1; ++t) {
            ForEachRouted(MapRow(p, t), E, [&](int64_t e) {
              const int64_t pos = cursor[e]++;
              if (pos < C) s.src[e * C + pos] = static_cast<int32_t>(t);
              return true;
            });
          }
          continue;
        }
      }
      for (int64_t t = t0; t < t1; ++t) {
        const uint8_t* row = MapRow(p, t);
        if (!p.drop_and_pad) {
          // Slot t*K + k is the k-th expert of token t in ascending expert order (the stable argsort of
          // the expert-major token list); its permuted row is that expert's next free position.
          int64_t k = 0;
          auto place = [&](int64_t e) {
            const int64_t q = cursor[e]++;
            p.sorted_indices.At<int32_t>(t * K + k) = static_cast<int32_t>(q);
            s.src[q] = static_cast<int32_t>(t);
            return ++k < K;
          };
          if (p.map_col_stride == 1) {
            if (K > 0) ForEachRouted(row, E, place);
            continue;
          }
          for (int64_t e = 0; e < E && k < K; ++e) {
            if (row[e * p.map_col_stride] != 0) place(e);
          }
          continue;
        }
        // Expert e lists its routed tokens (ascending), then the unrouted ones (ascending), first C kept.
        for (int64_t e = 0; e < E; ++e) {
          int64_t pos;
          if (row[e * p.map_col_stride] != 0) {
            pos = cursor[e]++;
          } else {
            pos = s.totals[e] + (t - cursor[e]);
          }
          if (pos < C) s.src[e * C + pos] = static_cast<int32_t>(t);
        }
      }
    }
  });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY2(PermuteCount, PermuteCountT, TokenPermuteWithRoutingMapTask,
                      const TokenPermuteWithRoutingMapScratch&)
MOEGRAD_KERNEL_ENTRY2(PermuteIndices, PermuteIndicesT, TokenPermuteWithRoutingMapTask,
                      const TokenPermuteWithRoutingMapScratch&)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
