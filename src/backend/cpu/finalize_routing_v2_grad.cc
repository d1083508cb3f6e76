// The CPU backend of MoeFinalizeRoutingV2Grad: the index checks of phase two, the row -> pairs inverse index
// (or the one-writer fast path's writer table and token costs), then the kernels.
#include <algorithm>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/kernels/finalize_routing_v2_grad.h"
#include "src/core/workspace.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = FinalizeRoutingV2GradProblem;
using core::Status;
using core::WorkspaceLayout;

// Workspace: rows + 1 offsets (or the writer of each row), one entry per pair, R + 1 token costs.
struct Layout {
  explicit Layout(const Problem& q) {
    offsets = l.Add(static_cast<uint64_t>(q.rows) + 1, sizeof(int64_t));
    pairs = l.Add(static_cast<uint64_t>(q.tokens * q.topk), sizeof(int64_t));
    token_cost = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
  }
  WorkspaceLayout l;
  uint64_t offsets = 0, pairs = 0, token_cost = 0;
};

class FinalizeRoutingV2GradCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    const Layout at(q);
    const int64_t pairs = q.tokens * q.topk;
    int64_t* offsets = WorkspaceLayout::At<int64_t>(workspace, at.offsets);
    int64_t* list = WorkspaceLayout::At<int64_t>(workspace, at.pairs);
    // Index data first, completely, before any output byte is written. The same pass notes the pair writing
    // each row (in the offsets piece) and whether any row has two writers.
    int64_t* writer = offsets;
    for (int64_t v = 0; v < q.rows; ++v) writer[v] = -1;
    bool one_writer = true;
    int64_t written = 0;
    const int64_t lo = q.mode == 1 ? -1 : 0;
    const int64_t hi = q.mode == 1 ? q.rows : pairs;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t v = q.row_idx.At<const int32_t>(i);
      if (v >= 0 && v < q.rows) {
        if (writer[v] >= 0) one_writer = false;
        writer[v] = i;
        ++written;
      }
      if (v < lo || v >= hi) return RowIdxOutside(Problem::kName, i, v, lo, hi, q.mode);
    }
    if (q.has_bias) MOEGRAD_RETURN_IF_ERROR(ExpertIdxInBias(Problem::kName, q.expert_idx, pairs, q.bias_rows));
    kernels::FinalizeRoutingV2GradTask task;
    static_cast<Problem&>(task) = q;
    if (one_writer) {
      // Cost of each token for the thread split, in half rows: gradY, and per pair its gradExpandedX row
      // (and expandedX row) and its bias row.
      int64_t* cost = WorkspaceLayout::At<int64_t>(workspace, at.token_cost);
      const bool scales = q.scales.data != nullptr;
      const int64_t bias = q.bias.data != nullptr ? 1 : 0;
      cost[0] = 0;
      for (int64_t r = 0; r < q.tokens; ++r) {
        int64_t c = 2;
        for (int64_t i = r * q.topk; i < (r + 1) * q.topk; ++i) {
          const int64_t v = q.row_idx.At<const int32_t>(i);
          c += (v >= 0 && v < q.rows ? (scales ? 4 : 2) : 0) + bias;
        }
        cost[r + 1] = cost[r] + c;
        task.heaviest_token_cost = std::max(task.heaviest_token_cost, c);
      }
      task.one_writer = true;
      task.writer = writer;
      task.token_cost = cost;
      task.zero_rows = q.rows - written;
    } else {
      // Inverse index (counting sort, stable): the pairs that write each row of gradExpandedX, ascending.
      internal::BuildInverseIndex(
          q.rows, pairs, [&](int64_t i) { return int64_t{q.row_idx.At<const int32_t>(i)}; }, offsets, list);
      task.offsets = offsets;
      task.pairs = list;
    }
    kernels::RunFinalizeRoutingV2Grad(task);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<FinalizeRoutingV2GradCpu>(); }

}  // namespace moegrad::backend::cpu
