// Kernels of MoeTokenPermuteWithRoutingMap. Inputs are validated by the operator layer.
//
// The index computation is a counting sort split over fixed blocks of tokens (chosen in phase one by the CPU backend, so
// the workspace size does not depend on the thread count): per-block, per-expert routed counts, then
// prefix sums over (expert, block), then each block places its own tokens. Every step is exact integer
// work, so the result is the same for any partition.
#pragma once

#include <cstdint>

#include "src/backend/token_permute_with_routing_map.h"
#include "src/backend/cpu/kernels/kernel_types.h"

namespace moegrad::kernels {

// The problem plus the token blocks of the index computation (fixed by the CPU backend's workspace layout).
struct TokenPermuteWithRoutingMapTask : backend::TokenPermuteWithRoutingMapProblem {
  int64_t blocks = 0;        // token blocks of the index computation
  int64_t block_tokens = 1;  // tokens per block (the last may hold fewer)
};

// Workspace pieces, laid out by the CPU backend.
struct TokenPermuteWithRoutingMapScratch {
  int64_t* counts = nullptr;   // blocks * E: routed count of each (block, expert), then each block's cursor
  int64_t* bad = nullptr;      // blocks * 2: dropless, first row of the block whose count != K, and its count
  int64_t* totals = nullptr;   // E: routed tokens of each expert
  int64_t* starts = nullptr;   // E + 1: dropless, first permuted row of each expert
  int64_t* running = nullptr;  // E
  int32_t* src = nullptr;      // N: the token each permuted row is copied from
  // Drop-and-pad: the permuted rows copied from token t are token_slots[token_offsets[t] ..
  // token_offsets[t + 1]), ascending (built by PermuteRows).
  int64_t* token_offsets = nullptr;  // T + 1
  int64_t* token_slots = nullptr;    // N
};

// Pass 1 (writes only scratch): per-block counts; dropless, each block's first row whose routed count is
// not K (bad[2b] = -1 when none), which the CPU backend reports before anything is written.
void PermuteCount(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s);
// Pass 2: prefix sums, the source token of every permuted row and (dropless) sortedIndices.
void PermuteIndices(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s);
// Pass 3: permuted probs and (drop-and-pad) sortedIndices split over output rows; permuted tokens split over
// source tokens, each token row read once and copied to all its permuted rows.
void PermuteRows(const TokenPermuteWithRoutingMapTask& p, const TokenPermuteWithRoutingMapScratch& s);

}  // namespace moegrad::kernels
