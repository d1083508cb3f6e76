// Kernels of MoeTokenPermuteWithRoutingMap. Inputs are validated by the operator layer.
//
// The index computation is a counting sort split over fixed blocks of tokens (chosen in phase one, so
// the workspace size does not depend on the thread count): per-block, per-expert routed counts, then
// prefix sums over (expert, block), then each block places its own tokens. Every step is exact integer
// work, so the result is the same for any partition.
#pragma once

#include <cstdint>

#include "moegrad/tensor.hpp"
#include "src/kernels/kernel_types.h"

namespace moegrad::kernels {

struct PermuteProblem {
  size_t element_bytes = 4;  // of tokens / probs: rows are copied bit for bit
  int64_t tokens = 0;        // T
  int64_t experts = 0;       // E
  int64_t hidden = 0;        // H
  int64_t out_rows = 0;      // N
  int64_t topk = 0;          // K (dropless)
  int64_t capacity = 0;      // C (drop-and-pad)
  bool drop_and_pad = false;
  int64_t blocks = 0;        // token blocks of the index computation
  int64_t block_tokens = 1;  // tokens per block (the last may hold fewer)

  RowView src_tokens;            // (T, H)
  const uint8_t* map = nullptr;  // (T, E) INT8 / BOOL bytes; non-zero = routed
  int64_t map_row_stride = 0;
  int64_t map_col_stride = 0;
  const char* probs = nullptr;   // (T, E); null when absent
  int64_t probs_row_stride = 0;
  int64_t probs_col_stride = 0;
  RowView dst_tokens;            // (N, H)
  FlatView dst_probs;            // (N); data null when absent
  FlatView sorted_indices;       // (N) int32
};

// Workspace pieces, laid out by the operator layer.
struct PermuteScratch {
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
// not K (bad[2b] = -1 when none), which the operator reports before anything is written.
void PermuteCount(const PermuteProblem& p, const PermuteScratch& s);
// Pass 2: prefix sums, the source token of every permuted row and (dropless) sortedIndices.
void PermuteIndices(const PermuteProblem& p, const PermuteScratch& s);
// Pass 3: permuted probs and (drop-and-pad) sortedIndices split over output rows; permuted tokens split over
// source tokens, each token row read once and copied to all its permuted rows.
void PermuteRows(const PermuteProblem& p, const PermuteScratch& s);

}  // namespace moegrad::kernels
