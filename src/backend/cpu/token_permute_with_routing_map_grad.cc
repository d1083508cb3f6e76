// The CPU backend of MoeTokenPermuteWithRoutingMapGrad: the sortedIndices check of phase two, the routing map's
// per-block counts (dropless probs gradient) or the token -> rows inverse index (drop-and-pad), then the kernel.
#include <algorithm>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/kernels/token_permute_with_routing_map_grad.h"
#include "src/core/int_math.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = TokenPermuteWithRoutingMapGradProblem;
using Task = kernels::TokenPermuteWithRoutingMapGradTask;
using core::Status;
using core::WorkspaceLayout;

// Dropless probsGrad cuts the token rows into at most this many blocks, each with E cursors of workspace.
constexpr int64_t kMaxProbBlocks = 256;
constexpr int64_t kMinBlockRows = 64;

// The problem with its block split, and the workspace: drop-and-pad T + 1 offsets and N slots; dropless with
// probs grads blocks * E cursors.
struct Layout {
  explicit Layout(const Problem& q) {
    static_cast<Problem&>(task) = q;
    task.block_rows = std::max(kMinBlockRows, internal::CeilDiv(q.tokens, kMaxProbBlocks));
    if (q.drop_and_pad) {
      offsets = l.Add(static_cast<uint64_t>(q.tokens) + 1, sizeof(int64_t));
      slots = l.Add(static_cast<uint64_t>(q.rows), sizeof(int64_t));
    } else if (q.probs_grad.data != nullptr) {
      cursors = l.Add(static_cast<uint64_t>(kernels::NumBlocks(task)), static_cast<uint64_t>(q.experts),
                      sizeof(int64_t));
    }
  }
  Task task;
  WorkspaceLayout l;
  uint64_t offsets = 0, slots = 0, cursors = 0;
};

class TokenPermuteWithRoutingMapGradCpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& q, uint64_t* bytes) const override {
    return LayoutSize(Problem::kName, Layout(q).l, bytes);
  }

  Status Run(const Problem& q, void* workspace, core::Stream /*stream*/) const override {
    // sortedIndices read through a plain pointer when it is contiguous (as a forward pass writes it).
    const core::FlatView& idx = q.sorted_indices;
    if (idx.inner == 1 && idx.outer_stride == 1) {
      const int32_t* data = static_cast<const int32_t*>(idx.data);
      return RunWith(q, workspace, [data](int64_t p) { return int64_t{data[p]}; });
    }
    return RunWith(q, workspace, [&idx](int64_t p) { return int64_t{idx.At<const int32_t>(p)}; });
  }

 private:
  template <typename IndexAt>
  static Status RunWith(const Problem& q, void* workspace, const IndexAt& index_at) {
    const int64_t N = q.rows;
    // Index data first, completely, before any output byte is written.
    const int64_t hi = q.drop_and_pad ? q.tokens : N;
    for (int64_t p = 0; p < N; ++p) {
      const int64_t v = index_at(p);
      if (v < 0 || v >= hi) {
        return core::MakeStatus(core::StatusCode::kInvalid,
                                "%s: sortedIndices[%lld] = %lld is outside [0, %lld) for dropAndPad %s",
                                Problem::kName, static_cast<long long>(p), static_cast<long long>(v),
                                static_cast<long long>(hi), q.drop_and_pad ? "true" : "false");
      }
    }
    Layout at(q);
    Task& task = at.task;
    if (!q.drop_and_pad) {
      if (q.probs_grad.data != nullptr) {
        int64_t* cursors = WorkspaceLayout::At<int64_t>(workspace, at.cursors);
        kernels::CountRoutedPerBlock(task, cursors);
        const int64_t blocks = kernels::NumBlocks(task);
        int64_t routed = 0;
        for (int64_t i = 0; i < blocks * q.experts; ++i) routed += cursors[i];
        if (routed != N) {
          return core::MakeStatus(core::StatusCode::kInvalid,
                                  "%s: routingMap has %lld routed entries but permutedProbsOutputGrad has %lld; "
                                  "they must be equal in dropless mode",
                                  Problem::kName, static_cast<long long>(routed), static_cast<long long>(N));
        }
        // Counts to starts, expert-major: expert e's entries follow those of experts < e, block after block.
        int64_t next = 0;
        for (int64_t e = 0; e < q.experts; ++e) {
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t count = cursors[b * q.experts + e];
            cursors[b * q.experts + e] = next;
            next += count;
          }
        }
        task.cursors = cursors;
      }
    } else {
      // Inverse index (counting sort, stable): the rows p gathered into token t, ascending.
      int64_t* offsets = WorkspaceLayout::At<int64_t>(workspace, at.offsets);
      int64_t* slots = WorkspaceLayout::At<int64_t>(workspace, at.slots);
      task.most_slots = internal::BuildInverseIndex(q.tokens, N, index_at, offsets, slots);
      task.offsets = offsets;
      task.slots = slots;
    }
    kernels::RunTokenPermuteWithRoutingMapGrad(task);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<TokenPermuteWithRoutingMapGradCpu>(); }

}  // namespace moegrad::backend::cpu
