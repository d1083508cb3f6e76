// Kernels of MoeInitRoutingV2. Inputs are validated by the operator layer.
//
// The pairs are sorted by expert id with a stable counting sort split over fixed blocks of pairs (chosen in phase
// one by the CPU backend, so the workspace size does not depend on the thread count): per-block, per-expert
// counts, prefix sums over (expert, block), then each block places its own pairs in ascending order. Every step
// is exact integer work, so the result is the same for any partition. Without an expert count (dropPadMode 0,
// flag 0: any id >= 0) the same pass sorts by digits of the ids, least significant first (a radix sort).
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/kernel_types.h"
#include "src/backend/init_routing_v2.h"

namespace moegrad::kernels {

// Bits of one digit of the radix sort of ids without an expert count: at most 2^11 counters per block.
constexpr int kInitRoutingV2DigitBits = 11;

// The problem plus the pair blocks of the index computation (fixed by the CPU backend's workspace layout).
struct InitRoutingV2Task : backend::InitRoutingV2Problem {
  int64_t blocks = 0;       // pair blocks of the index computation
  int64_t block_pairs = 1;  // pairs per block (the last may hold fewer)
  int64_t bins = 0;         // counters per block: E, or 2^kInitRoutingV2DigitBits without an expert count
};

// Workspace pieces, laid out by the CPU backend.
struct InitRoutingV2Scratch {
  int64_t* counts = nullptr;      // blocks * bins: each (block, expert or digit) count, then the block's cursor
  int64_t* bad = nullptr;         // blocks: the block's first pair whose id is outside the range, or -1
  int64_t* max_id = nullptr;      // blocks: the block's largest id (the digits of the radix sort)
  int64_t* starts = nullptr;      // E + 1 (with an expert count): first sorted position of each expert
  int32_t* order = nullptr;       // P: the pairs sorted by (expert, pair), s of the spec
  int32_t* order_tmp = nullptr;   // P: between the passes of the radix sort (without an expert count)
  int64_t* token_rows = nullptr;  // N + 1: t + the rows tokens before t are copied to (the copies' cost)
  int64_t* zero_rows = nullptr;   // E + 1 (dropPadMode 1): the rows of experts before e that no pair fills
};

// Pass 1 (writes only scratch): per block, the first id outside [0, E) (or < 0 without an expert count) and the
// largest id; the CPU backend reports the first bad pair before anything is written.
void CheckInitRoutingV2Ids(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s);
// Pass 2: the sort, expandedRowIdx, the written count output, and the rows' cost and zero-row prefixes.
void BuildInitRoutingV2Indices(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s);
// Pass 3: expandedX. Each x row is read once and copied to every row its pairs fill, split over tokens; in
// dropPadMode 1 the rows no pair fills are zeroed, split over those rows.
void RunInitRoutingV2(const InitRoutingV2Task& p, const InitRoutingV2Scratch& s);

}  // namespace moegrad::kernels
