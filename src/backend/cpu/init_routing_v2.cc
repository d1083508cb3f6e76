// The CPU backend of MoeInitRoutingV2: the expert ids checked before any output byte is written, a counting sort
// of the pairs over fixed pair blocks, then the row copies.
#include <algorithm>
#include <string>

#include "src/backend/cpu/counting_blocks.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/kernels/init_routing_v2.h"
#include "src/core/int_math.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = InitRoutingV2Problem;
using Task = kernels::InitRoutingV2Task;
using core::Status;
using core::WorkspaceLayout;

// Pair blocks of the index computation (CountingBlockSize): at least this many pairs each.
constexpr int64_t kMinBlockPairs = 512;

// The problem with its pair blocks, and the workspace pieces of kernels::InitRoutingV2Scratch.
struct Layout {
  explicit Layout(const Problem& q) {
    static_cast<Problem&>(task) = q;
    const int64_t P = q.pairs;
    task.bins = q.experts > 0 ? q.experts : int64_t{1} << kernels::kInitRoutingV2DigitBits;
    task.block_pairs = CountingBlockSize(P, kMinBlockPairs, task.bins);
    task.blocks = internal::CeilDiv(P, task.block_pairs);
    const uint64_t blocks = static_cast<uint64_t>(task.blocks);
    counts = l.Add(blocks, static_cast<uint64_t>(task.bins), sizeof(int64_t));
    bad = l.Add(blocks, sizeof(int64_t));
    max_id = l.Add(blocks, sizeof(int64_t));
    starts = l.Add(static_cast<uint64_t>(q.experts) + 1, sizeof(int64_t));
    order = l.Add(static_cast<uint64_t>(P), sizeof(int32_t));
    if (q.experts == 0) order_tmp = l.Add(static_cast<uint64_t>(P), sizeof(int32_t));
    token_rows = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
    if (q.mode == 1) zero_rows = l.Add(static_cast<uint64_t>(q.experts) + 1, sizeof(int64_t));
  }
  Task task;
  WorkspaceLayout l;
  uint64_t counts = 0, bad = 0, max_id = 0, starts = 0, order = 0, token_rows = 0;
  uint64_t order_tmp = 0;  // without an expert count only
  uint64_t zero_rows = 0;  // dropPadMode 1 only
};

class InitRoutingV2Cpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    const Layout at(q);
    const Task& task = at.task;
    kernels::InitRoutingV2Scratch s;
    s.counts = WorkspaceLayout::At<int64_t>(workspace, at.counts);
    s.bad = WorkspaceLayout::At<int64_t>(workspace, at.bad);
    s.max_id = WorkspaceLayout::At<int64_t>(workspace, at.max_id);
    s.starts = WorkspaceLayout::At<int64_t>(workspace, at.starts);
    s.order = WorkspaceLayout::At<int32_t>(workspace, at.order);
    if (q.experts == 0) s.order_tmp = WorkspaceLayout::At<int32_t>(workspace, at.order_tmp);
    s.token_rows = WorkspaceLayout::At<int64_t>(workspace, at.token_rows);
    if (q.mode == 1) s.zero_rows = WorkspaceLayout::At<int64_t>(workspace, at.zero_rows);
    // The expert ids are index data: the check pass writes only workspace, and the first bad pair (blocks in
    // ascending order, each its first) is reported before any output byte is written.
    kernels::CheckInitRoutingV2Ids(task, s);
    for (int64_t b = 0; b < task.blocks; ++b) {
      if (s.bad[b] < 0) continue;
      const int64_t i = s.bad[b];
      return core::MakeStatus(core::StatusCode::kInvalid, "%s: expertIdx[%lld] = %lld is outside [0, %s) for "
                              "dropPadMode %lld", Problem::kName, static_cast<long long>(i),
                              static_cast<long long>(q.expert_idx.At<const int32_t>(i)),
                              q.experts > 0 ? std::to_string(q.experts).c_str() : "2^31",
                              static_cast<long long>(q.mode));
    }
    kernels::BuildInitRoutingV2Indices(task, s);
    kernels::RunInitRoutingV2(task, s);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<InitRoutingV2Cpu>(); }

}  // namespace moegrad::backend::cpu
