// MoeInitRoutingV2 as the operator layer hands it to a backend: every rule has passed; what is left is index
// data (the expert ids, checked by the backend in phase two) and execution. See docs/ops/init_routing_v2.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/core/types.h"
#include "src/core/views.h"

namespace moegrad::backend {

struct InitRoutingV2Problem {
  static constexpr const char* kName = "MoeInitRoutingV2";

  size_t element_bytes = 4;  // of x: rows are copied bit for bit
  int64_t mode = 0;          // dropPadMode: 0 dropless, 1 drop/pad
  int64_t tokens = 0;        // N
  int64_t hidden = 0;        // H
  int64_t topk = 0;          // K
  int64_t pairs = 0;         // P = N*K (< 2^31)
  int64_t active = 0;        // mode 0: A, the rows of expandedX
  int64_t experts = 0;       // E: the range of the expert ids, or 0 when any id >= 0 is valid (mode 0, flag 0)
  int64_t capacity = 0;      // mode 1: C
  int64_t out_rows = 0;      // rows of expandedX: A, or E*C (< 2^31)
  bool cumsum = false;       // the count output holds cnt(0) + ... + cnt(e) (flag 1) instead of cnt(e)

  core::RowView src_x;          // (N, H)
  core::FlatView expert_idx;    // (N, K) int32, pair p = n*K + k
  core::RowView dst_x;          // (A, H), or (E, C, H) as rows e*C + c
  core::FlatView row_idx;       // (P) int32
  core::FlatView counts;        // (E) int32: the count or cumsum (mode 0, flag 1 or 2), or the counts before
                                // capacity (mode 1 with its flag); data null when not written
};

}  // namespace moegrad::backend
