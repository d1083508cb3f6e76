// The CPU backend of MoeInitRoutingV2Grad: the expandedRowIdx check of phase two, which also lists each token's
// terms (the rows it sums, ascending k, skipped values left out), then the kernel.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/kernels/init_routing_v2_grad.h"
#include "src/core/workspace.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = InitRoutingV2GradProblem;
using core::Status;
using core::WorkspaceLayout;

// Workspace: N + 1 offsets and one row number per pair (the terms, at most L).
struct Layout {
  explicit Layout(const Problem& q) {
    offsets = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
    terms = l.Add(static_cast<uint64_t>(q.tokens), static_cast<uint64_t>(q.topk), sizeof(int64_t));
  }
  WorkspaceLayout l;
  uint64_t offsets = 0, terms = 0;
};

class InitRoutingV2GradCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    // expandedRowIdx read through a plain pointer when it is contiguous (as the forward writes it).
    const core::FlatView& idx = q.row_idx;
    if (idx.inner == 1 && idx.outer_stride == 1) {
      const int32_t* data = static_cast<const int32_t*>(idx.data);
      return RunWith(q, workspace, [data](int64_t i) { return int64_t{data[i]}; });
    }
    return RunWith(q, workspace, [&idx](int64_t i) { return int64_t{idx.At<const int32_t>(i)}; });
  }

 private:
  template <typename IndexAt>
  static Status RunWith(const Problem& q, void* workspace, const IndexAt& index_at) {
    const Layout at(q);
    int64_t* offsets = WorkspaceLayout::At<int64_t>(workspace, at.offsets);
    int64_t* terms = WorkspaceLayout::At<int64_t>(workspace, at.terms);
    // Index data first, completely and in ascending position, before any output byte is written; the same pass
    // lists the terms of each token (in the workspace, no output).
    const int64_t lo = q.mode == 1 ? -1 : 0;
    const int64_t hi = q.mode == 1 ? q.rows : q.tokens * q.topk;
    int64_t count = 0;
    for (int64_t n = 0; n < q.tokens; ++n) {
      offsets[n] = count;
      for (int64_t i = n * q.topk; i < (n + 1) * q.topk; ++i) {
        const int64_t v = index_at(i);
        if (v < lo || v >= hi) return RowIdxOutside(Problem::kName, i, v, lo, hi, q.mode);
        if (v >= 0 && v < q.rows) terms[count++] = v;
      }
    }
    offsets[q.tokens] = count;
    kernels::InitRoutingV2GradTask task;
    static_cast<Problem&>(task) = q;
    task.offsets = offsets;
    task.terms = terms;
    kernels::RunInitRoutingV2Grad(task);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<InitRoutingV2GradCpu>(); }

}  // namespace moegrad::backend::cpu
