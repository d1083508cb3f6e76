// The block size of the CPU backends' blocked counting sorts (MoeTokenPermuteWithRoutingMap over tokens,
// MoeInitRoutingV2 over pairs): each block counts its items per bin, the prefix sums over (bin, block) place them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "src/core/int_math.h"

namespace moegrad::backend::cpu {

// Enough blocks for every thread to get several, few enough that the per-(block, bin) counts stay a small
// workspace.
constexpr int64_t kMaxCountingBlocks = 256;
constexpr int64_t kMaxCountEntries = int64_t{1} << 20;

// Items per block for `items` items with `bins` counters per block (0: no counters): at least `min_block`, at
// most kMaxCountingBlocks blocks, and at most kMaxCountEntries counters in all.
inline int64_t CountingBlockSize(int64_t items, int64_t min_block, int64_t bins) {
  int64_t block = std::max(min_block, internal::CeilDiv(items, kMaxCountingBlocks));
  if (bins > 0) block = std::max(block, internal::CeilDiv(items, std::max<int64_t>(1, kMaxCountEntries / bins)));
  return block;
}

}  // namespace moegrad::backend::cpu
