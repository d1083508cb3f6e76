// The CPU backend of MoeTokenUnpermuteWithRoutingMap: the index checks of phase two (sortedIndices' range and,
// dropless with probs, K routed entries per routingMap row), then the token -> contributions inverse index
// (pad mode) and each contribution's weight and expert (with probs), then the kernel.
#include <algorithm>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/inverse_index.h"
#include "src/core/float16.h"
#include "src/backend/cpu/kernels/token_unpermute_with_routing_map.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = TokenUnpermuteWithRoutingMapProblem;
using Task = kernels::TokenUnpermuteWithRoutingMapTask;
using core::Status;
using core::WorkspaceLayout;

// The workspace: pad mode T + 1 offsets and N slots; with probs N fp32 weights and N experts.
struct Layout {
  explicit Layout(const Problem& q) {
    if (q.padded_mode) {
      offsets = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
      slots = l.Add(static_cast<uint64_t>(q.rows), sizeof(int64_t));
    }
    if (q.probs.data != nullptr) {
      weights = l.Add(static_cast<uint64_t>(q.rows), sizeof(float));
      experts = l.Add(static_cast<uint64_t>(q.rows), sizeof(int64_t));
    }
  }
  WorkspaceLayout l;
  uint64_t offsets = 0, slots = 0, weights = 0, experts = 0;
};

// A probs element as fp32.
float WeightAt(const Problem& q, int64_t t, int64_t e) {
  const char* row = static_cast<const char*>(q.probs.data);
  const int64_t at = q.probs.RowOffset(t) + e * q.probs.col_stride;
  switch (q.weight_dtype) {
    case core::DType::kFloat16: return F32FromF16Bits(reinterpret_cast<const uint16_t*>(row)[at]);
    case core::DType::kBFloat16: return F32FromBF16Bits(reinterpret_cast<const uint16_t*>(row)[at]);
    default: return reinterpret_cast<const float*>(row)[at];
  }
}

class TokenUnpermuteWithRoutingMapCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    const int64_t N = q.rows;
    const core::FlatView& idx = q.sorted_indices;
    auto index_at = [&idx](int64_t i) { return int64_t{idx.At<const int32_t>(i)}; };
    // Index data first, completely, before any output byte is written.
    const int64_t hi = q.padded_mode ? q.tokens : N;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t v = index_at(i);
      if (v < 0 || v >= hi) {
        return core::MakeStatus(core::StatusCode::kInvalid,
                                "%s: sortedIndices[%lld] = %lld is outside [0, %lld) for paddedMode %s",
                                Problem::kName, static_cast<long long>(i), static_cast<long long>(v),
                                static_cast<long long>(hi), q.padded_mode ? "true" : "false");
      }
    }
    const bool probs = q.probs.data != nullptr;
    Layout at(q);
    Task task;
    static_cast<Problem&>(task) = q;
    if (q.padded_mode) {
      int64_t* offsets = WorkspaceLayout::At<int64_t>(workspace, at.offsets);
      int64_t* slots = WorkspaceLayout::At<int64_t>(workspace, at.slots);
      task.most_slots = internal::BuildInverseIndex(q.tokens, N, index_at, offsets, slots);
      task.offsets = offsets;
      task.slots = slots;
    }
    if (probs) {
      float* weights = WorkspaceLayout::At<float>(workspace, at.weights);
      int64_t* experts = WorkspaceLayout::At<int64_t>(workspace, at.experts);
      if (q.padded_mode) {
        // Token by token through the inverse index (every slot names a token, checked above): each probs row
        // is read front to back once, where slot order reads one element of a random row per slot.
        for (int64_t t = 0; t < q.tokens; ++t) {
          for (int64_t i = task.offsets[t]; i < task.offsets[t + 1]; ++i) {
            const int64_t slot = task.slots[i];
            experts[slot] = slot / q.capacity;
            weights[slot] = WeightAt(q, t, experts[slot]);
          }
        }
      } else {
        // Token t's k-th routed expert, ascending, is contribution t*K + k.
        const Status routed = RoutedExperts(Problem::kName, "paddedMode",
                                            {q.tokens, q.experts, q.topk, q.routing_map, q.probs, q.weight_dtype,
                                             experts, weights});
        if (!routed.ok()) return routed;
      }
      task.weights = weights;
      task.experts = experts;
    }
    kernels::RunTokenUnpermuteWithRoutingMap(task);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<TokenUnpermuteWithRoutingMapCpu>(); }

}  // namespace moegrad::backend::cpu
