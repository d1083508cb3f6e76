// MoeInitRoutingV2 index passes: the id check, the stable counting sort of the pairs by expert (a radix sort over
// the ids' digits when there is no expert count), and the index outputs. Integer work on one int32 per pair, not
// compiled per SIMD target.
#include <algorithm>
#include <cstdint>

#include "src/backend/cpu/kernels/init_routing_v2.h"
#include "src/backend/cpu/parallel.h"
#include "src/core/int_math.h"

namespace moegrad::kernels {
namespace {

// Pairs per task of the passes over the pairs (4 or 8 bytes each): below it a pass runs on one thread, the
// fork and join costing more than the work.
constexpr int64_t kPairGrain = int64_t{1} << 16;

int64_t Id(const InitRoutingV2Task& p, int64_t i) { return p.expert_idx.At<const int32_t>(i); }

void BlockRange(const InitRoutingV2Task& p, int64_t b, int64_t* i0, int64_t* i1) {
  *i0 = b * p.block_pairs;
  *i1 = std::min(p.pairs, *i0 + p.block_pairs);
}

// fn(b0, b1) over the pair blocks [0, blocks), at least kPairGrain pairs per task.
template <typename Fn>
void ForEachBlocks(const InitRoutingV2Task& p, const Fn& fn) {
  internal::ParallelFor(0, p.blocks, internal::CeilDiv(kPairGrain, p.block_pairs), fn);
}

// One stable counting-sort pass: the pairs `in` (null: 0, 1, ..., P - 1) reordered into `out` by digit(pair) in
// [0, bins), ties in their order in `in`. With `starts`, starts[d] receives the first position of digit d.
template <typename Digit>
void SortPass(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s, int64_t bins, const Digit& digit,
              const int32_t* in, int32_t* out, int64_t* starts) {
  auto pair_at = [&](int64_t i) -> int64_t { return in != nullptr ? in[i] : i; };
  ForEachBlocks(p, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* count = s.counts + b * bins;
      std::fill(count, count + bins, int64_t{0});
      int64_t i0, i1;
      BlockRange(p, b, &i0, &i1);
      for (int64_t i = i0; i < i1; ++i) ++count[digit(pair_at(i))];
    }
  });
  // counts[b][d] becomes block b's first position among the pairs of digit d: digits ascending, then blocks.
  int64_t running = 0;
  for (int64_t d = 0; d < bins; ++d) {
    if (starts != nullptr) starts[d] = running;
    for (int64_t b = 0; b < p.blocks; ++b) {
      const int64_t c = s.counts[b * bins + d];
      s.counts[b * bins + d] = running;
      running += c;
    }
  }
  if (starts != nullptr) starts[bins] = running;
  ForEachBlocks(p, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* cursor = s.counts + b * bins;
      int64_t i0, i1;
      BlockRange(p, b, &i0, &i1);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t q = pair_at(i);
        out[cursor[digit(q)]++] = static_cast<int32_t>(q);
      }
    }
  });
}

// s: the pairs sorted by id, ties by pair. With an expert count, one pass over E counters per block, which also
// gives every expert's first position; without, one pass per digit of the largest id, least significant first.
void SortPairs(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s) {
  if (p.experts > 0) {
    SortPass(p, s, p.experts, [&](int64_t q) { return Id(p, q); }, nullptr, s.order, s.starts);
    return;
  }
  int64_t largest = 0;
  for (int64_t b = 0; b < p.blocks; ++b) largest = std::max(largest, s.max_id[b]);
  int bits = 0;
  while (bits < 63 && (largest >> bits) != 0) ++bits;
  if (bits == 0) {  // every id 0 (or no pair): s is the pairs in order
    internal::ParallelFor(0, p.pairs, kPairGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) s.order[i] = static_cast<int32_t>(i);
    });
    return;
  }
  const int passes = static_cast<int>(internal::CeilDiv(bits, kInitRoutingV2DigitBits));
  const int digit_bits = static_cast<int>(internal::CeilDiv(bits, passes));
  const int64_t bins = int64_t{1} << digit_bits;
  // The passes alternate between the two buffers so that the last one writes s.order.
  int32_t* const buffers[2] = {s.order, s.order_tmp};
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit_bits;
    const int32_t* in = pass == 0 ? nullptr : buffers[(passes - pass) % 2];
    int32_t* out = buffers[(passes - 1 - pass) % 2];
    SortPass(p, s, bins, [&](int64_t q) { return (Id(p, q) >> shift) & (bins - 1); }, in, out, nullptr);
  }
}

}  // namespace

void CheckInitRoutingV2Ids(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s) {
  const int64_t hi = p.experts > 0 ? p.experts : int64_t{1} << 31;
  ForEachBlocks(p, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t i0, i1;
      BlockRange(p, b, &i0, &i1);
      int64_t largest = 0;
      s.bad[b] = -1;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t e = Id(p, i);
        if (e < 0 || e >= hi) {
          s.bad[b] = i;
          break;
        }
        largest = std::max(largest, e);
      }
      s.max_id[b] = largest;
    }
  });
}

void BuildInitRoutingV2Indices(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s) {
  SortPairs(p, s);
  const int64_t C = p.capacity;
  // expandedRowIdx[s[i]]: its sorted position i (dropless), or e*C + its rank c inside expert e, -1 past C.
  internal::ParallelFor(0, p.pairs, kPairGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t q = s.order[i];
      int64_t v = i;
      if (p.mode == 1) {
        const int64_t e = Id(p, q);
        const int64_t c = i - s.starts[e];
        v = c < C ? e * C + c : -1;
      }
      p.row_idx.At<int32_t>(q) = static_cast<int32_t>(v);
    }
  });
  for (int64_t e = 0; e < (p.counts.data != nullptr ? p.experts : 0); ++e) {
    const int64_t v = p.cumsum ? s.starts[e + 1] : s.starts[e + 1] - s.starts[e];
    p.counts.At<int32_t>(e) = static_cast<int32_t>(v);
  }
  if (p.mode == 1) {
    s.zero_rows[0] = 0;
    for (int64_t e = 0; e < p.experts; ++e) {
      const int64_t filled = std::min(s.starts[e + 1] - s.starts[e], C);
      s.zero_rows[e + 1] = s.zero_rows[e] + C - filled;
    }
  }
  // The copies' cost per token: its own row plus the rows it is copied to.
  const int64_t K = p.topk;
  s.token_rows[0] = 0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    int64_t rows = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t v = p.row_idx.At<const int32_t>(t * K + k);
      rows += p.mode == 1 ? v >= 0 : v < p.active;
    }
    s.token_rows[t + 1] = s.token_rows[t] + 1 + rows;
  }
}

}  // namespace moegrad::kernels
