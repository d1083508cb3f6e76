// The CPU backend of MoeTokenUnpermuteWithRoutingMapGrad: the index checks of phase two (outIndex, permuteTokenId
// in drop-and-pad mode, the routing map's rows in dropless mode with probs), which also list each pair's expert,
// then the rows -> pairs inverse index (and with probs in drop-and-pad mode the tokens -> pairs one), then the
// kernel.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/kernels/token_unpermute_with_routing_map_grad.h"
#include "src/core/workspace.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = TokenUnpermuteWithRoutingMapGradProblem;
using Task = kernels::TokenUnpermuteWithRoutingMapGradTask;
using core::Status;
using core::WorkspaceLayout;

// Workspace: the rows -> pairs index (N + 1 offsets, N pairs); with probs the N dot products and, dropless, the
// N experts of the pairs or, drop-and-pad, the tokens -> pairs index (T + 1 offsets, N pairs).
struct Layout {
  explicit Layout(const Problem& q) {
    const uint64_t N = static_cast<uint64_t>(q.rows);
    row_offsets = l.Add(N + 1, sizeof(int64_t));
    row_pairs = l.Add(N, sizeof(int64_t));
    if (q.probs_grad.data == nullptr) return;
    dots = l.Add(N, sizeof(float));
    if (q.drop_and_pad) {
      token_offsets = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
      token_pairs = l.Add(N, sizeof(int64_t));
    } else {
      experts = l.Add(N, sizeof(int64_t));
    }
  }
  WorkspaceLayout l;
  uint64_t row_offsets = 0, row_pairs = 0, dots = 0, token_offsets = 0, token_pairs = 0, experts = 0;
};

Status Outside(const char* name, int64_t i, int64_t v, int64_t hi, bool drop_and_pad) {
  return core::MakeStatus(core::StatusCode::kInvalid, "%s: %s[%lld] = %lld is outside [0, %lld) for dropAndPad %s",
                          Problem::kName, name, static_cast<long long>(i), static_cast<long long>(v),
                          static_cast<long long>(hi), drop_and_pad ? "true" : "false");
}

class TokenUnpermuteWithRoutingMapGradCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    const Layout at(q);
    const int64_t N = q.rows;
    const bool has_probs = q.probs_grad.data != nullptr;
    // Index data first, completely, before any output byte is written (the workspace is no output).
    for (int64_t i = 0; i < N; ++i) {
      const int64_t r = q.out_index.At<const int32_t>(i);
      if (r < 0 || r >= N) return Outside("outIndex", i, r, N, q.drop_and_pad);
    }
    if (q.drop_and_pad) {
      for (int64_t i = 0; i < N; ++i) {
        const int64_t t = q.permute_token_id.At<const int32_t>(i);
        if (t < 0 || t >= q.tokens) return Outside("permuteTokenId", i, t, q.tokens, q.drop_and_pad);
      }
    }
    Task task;
    static_cast<Problem&>(task) = q;
    if (has_probs && !q.drop_and_pad) {
      // Pair t*K + k is token t's k-th routed expert, ascending: every row needs exactly K.
      int64_t* experts = WorkspaceLayout::At<int64_t>(workspace, at.experts);
      const Status routed = RoutedExperts(
          Problem::kName, "dropAndPad",
          {q.tokens, q.experts, q.topk, q.routing_map, {}, q.weight_dtype, experts, nullptr});
      if (!routed.ok()) return routed;
      task.pair_experts = experts;
    }
    int64_t* row_offsets = WorkspaceLayout::At<int64_t>(workspace, at.row_offsets);
    int64_t* row_pairs = WorkspaceLayout::At<int64_t>(workspace, at.row_pairs);
    internal::BuildInverseIndex(
        N, N, [&q](int64_t i) { return int64_t{q.out_index.At<const int32_t>(i)}; }, row_offsets, row_pairs);
    task.row_offsets = row_offsets;
    task.row_pairs = row_pairs;
    if (has_probs) {
      task.dots = WorkspaceLayout::At<float>(workspace, at.dots);
      if (q.drop_and_pad) {
        int64_t* token_offsets = WorkspaceLayout::At<int64_t>(workspace, at.token_offsets);
        int64_t* token_pairs = WorkspaceLayout::At<int64_t>(workspace, at.token_pairs);
        task.most_token_pairs = internal::BuildInverseIndex(
            q.tokens, N, [&q](int64_t i) { return int64_t{q.permute_token_id.At<const int32_t>(i)}; },
            token_offsets, token_pairs);
        task.token_offsets = token_offsets;
        task.token_pairs = token_pairs;
      }
    }
    kernels::RunTokenUnpermuteWithRoutingMapGrad(task);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<TokenUnpermuteWithRoutingMapGradCpu>(); }

}  // namespace moegrad::backend::cpu
