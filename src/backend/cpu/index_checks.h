// Phase-two checks of index data shared by the CPU backends, each failing with one line that names the operator,
// the argument, the position, the value and the range.
#pragma once

#include <cstdint>

#include "src/backend/cpu/kernels/routed_experts.h"
#include "src/core/status_util.h"
#include "src/core/types.h"
#include "src/core/views.h"
#include "src/core/workspace.h"

namespace moegrad::backend::cpu {

// INVALID ("<op>: expandedRowIdx[i] = v is outside [lo, hi) for dropPadMode mode").
inline core::Status RowIdxOutside(const char* op, int64_t i, int64_t v, int64_t lo, int64_t hi, int64_t mode) {
  return core::MakeStatus(core::StatusCode::kInvalid,
                          "%s: expandedRowIdx[%lld] = %lld is outside [%lld, %lld) for dropPadMode %lld", op,
                          static_cast<long long>(i), static_cast<long long>(v), static_cast<long long>(lo),
                          static_cast<long long>(hi), static_cast<long long>(mode));
}

// INVALID ("<op>: expertIdx[i] = e is outside [0, bias_rows), the rows of bias") for the first of the `pairs` ids
// that is not a row of bias.
inline core::Status ExpertIdxInBias(const char* op, const core::FlatView& expert_idx, int64_t pairs,
                                    int64_t bias_rows) {
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t e = expert_idx.At<const int32_t>(i);
    if (e < 0 || e >= bias_rows) {
      return core::MakeStatus(core::StatusCode::kInvalid,
                              "%s: expertIdx[%lld] = %lld is outside [0, %lld), the rows of bias", op,
                              static_cast<long long>(i), static_cast<long long>(e),
                              static_cast<long long>(bias_rows));
    }
  }
  return core::Status::Ok();
}

// Dropless with a routing map: each token's routed experts (with probs also their weights) through
// kernels::RunRoutedExperts, or INVALID ("<op>: routingMapOptional row t has n routed entries but <mode> false
// needs K = N / T = K") for the first row that does not hold exactly K; `mode` names the attribute that chose
// dropless (paddedMode, dropAndPad).
inline core::Status RoutedExperts(const char* op, const char* mode, kernels::RoutedExpertsTask task) {
  int64_t bad_token = -1, routed = 0;
  task.bad_token = &bad_token;
  task.bad_count = &routed;
  kernels::RunRoutedExperts(task);
  if (bad_token < 0) return core::Status::Ok();
  return core::MakeStatus(core::StatusCode::kInvalid,
                          "%s: routingMapOptional row %lld has %lld routed entries but %s false needs K = N / T = %lld",
                          op, static_cast<long long>(bad_token), static_cast<long long>(routed), mode,
                          static_cast<long long>(task.topk));
}

// A workspace layout's size, or INVALID ("<op>: the workspace size overflows 64 bits").
inline core::Status LayoutSize(const char* op, const core::WorkspaceLayout& layout, uint64_t* bytes) {
  if (layout.overflowed()) {
    return core::MakeStatus(core::StatusCode::kInvalid, "%s: the workspace size overflows 64 bits", op);
  }
  *bytes = layout.size();
  return core::Status::Ok();
}

}  // namespace moegrad::backend::cpu
