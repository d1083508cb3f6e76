// The CPU backend of MoeFinalizeRoutingV2: the index checks of phase two, then the kernel. No workspace.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/index_checks.h"
#include "src/backend/cpu/kernels/finalize_routing_v2.h"

namespace moegrad::backend::cpu {
namespace {

using Problem = FinalizeRoutingV2Problem;
using core::Status;

class FinalizeRoutingV2Cpu final : public OpBackend<Problem> {
 public:
  Status WorkspaceSize(const Problem& /*q*/, uint64_t* bytes) const override {
    *bytes = 0;
    return Status::Ok();
  }

  Status Run(const Problem& q, void* /*workspace*/, core::Stream /*stream*/) const override {
    const int64_t pairs = q.tokens * q.topk;
    // Index data first, completely, before any output byte is written.
    const int64_t lo = (q.mode == 1 || q.mode == 3) ? -1 : 0;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t v = q.row_idx.At<const int32_t>(i);
      if (v < lo || v >= q.rows) return RowIdxOutside(Problem::kName, i, v, lo, q.rows, q.mode);
    }
    if (q.has_bias) MOEGRAD_RETURN_IF_ERROR(ExpertIdxInBias(Problem::kName, q.expert_idx, pairs, q.bias_rows));
    kernels::RunFinalizeRoutingV2(q);
    return Status::Ok();
  }
};

}  // namespace

const OpBackend<Problem>* For(const Problem*) { return Instance<FinalizeRoutingV2Cpu>(); }

}  // namespace moegrad::backend::cpu
