// The CPU backend of MoeTokenPermuteWithRoutingMap: a counting sort over fixed token blocks (the routing map's
// row counts checked before any output byte is written), then the row copies.
#include <algorithm>

#include "src/backend/cpu/counting_blocks.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/kernels/token_permute_with_routing_map.h"
#include "src/core/int_math.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = TokenPermuteWithRoutingMapProblem;
using Task = kernels::TokenPermuteWithRoutingMapTask;
using core::Status;
using core::WorkspaceLayout;

// Token blocks of the index computation (CountingBlockSize): at least this many tokens each.
constexpr int64_t kMinBlockTokens = 64;

// The problem with its token blocks, and the workspace pieces of kernels::TokenPermuteWithRoutingMapScratch.
struct Layout {
  explicit Layout(const Problem& q) {
    static_cast<Problem&>(task) = q;
    const int64_t T = q.tokens, E = q.experts;
    task.block_tokens = CountingBlockSize(T, kMinBlockTokens, E);
    task.blocks = internal::CeilDiv(T, task.block_tokens);
    const uint64_t n = static_cast<uint64_t>(q.out_rows);
    counts = l.Add(static_cast<uint64_t>(task.blocks) * static_cast<uint64_t>(E), sizeof(int64_t));
    bad = l.Add(2 * static_cast<uint64_t>(task.blocks), sizeof(int64_t));
    totals = l.Add(static_cast<uint64_t>(E), sizeof(int64_t));
    starts = l.Add(static_cast<uint64_t>(E) + 1, sizeof(int64_t));
    running = l.Add(static_cast<uint64_t>(E), sizeof(int64_t));
    src = l.Add(n, sizeof(int32_t));
    if (q.drop_and_pad) {
      token_offsets = l.Add(static_cast<uint64_t>(T) + 1, sizeof(int64_t));
      token_slots = l.Add(n, sizeof(int64_t));
    }
  }
  Task task;
  WorkspaceLayout l;
  uint64_t counts = 0, bad = 0, totals = 0, starts = 0, running = 0, src = 0;
  uint64_t token_offsets = 0, token_slots = 0;  // drop-and-pad only
};

class TokenPermuteWithRoutingMapCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    const Layout at(q);
    const Task& task = at.task;
    kernels::TokenPermuteWithRoutingMapScratch s;
    s.counts = WorkspaceLayout::At<int64_t>(workspace, at.counts);
    s.bad = WorkspaceLayout::At<int64_t>(workspace, at.bad);
    s.totals = WorkspaceLayout::At<int64_t>(workspace, at.totals);
    s.starts = WorkspaceLayout::At<int64_t>(workspace, at.starts);
    s.running = WorkspaceLayout::At<int64_t>(workspace, at.running);
    s.src = WorkspaceLayout::At<int32_t>(workspace, at.src);
    if (q.drop_and_pad) {
      s.token_offsets = WorkspaceLayout::At<int64_t>(workspace, at.token_offsets);
      s.token_slots = WorkspaceLayout::At<int64_t>(workspace, at.token_slots);
    }
    // The routing map is index data: in dropless mode every row must hold exactly K entries. The count
    // pass writes only workspace, so an error leaves the outputs untouched.
    kernels::PermuteCount(task, s);
    if (!q.drop_and_pad) {
      for (int64_t b = 0; b < task.blocks; ++b) {
        if (s.bad[2 * b] < 0) continue;
        return core::MakeStatus(core::StatusCode::kInvalid,
                                "%s: routingMap row %lld has %lld routed entries but dropless mode needs exactly "
                                "K = numOutTokens / T = %lld / %lld = %lld in every row",
                                Problem::kName, static_cast<long long>(s.bad[2 * b]),
                                static_cast<long long>(s.bad[2 * b + 1]), static_cast<long long>(q.out_rows),
                                static_cast<long long>(q.tokens), static_cast<long long>(q.topk));
      }
    }
    kernels::PermuteIndices(task, s);
    kernels::PermuteRows(task, s);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<TokenPermuteWithRoutingMapCpu>(); }

}  // namespace moegrad::backend::cpu
