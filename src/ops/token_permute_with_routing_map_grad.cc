#include "src/ops/token_permute_with_routing_map_grad.h"

#include <algorithm>
#include <new>

#include "src/core/int_math.h"
#include "src/core/inverse_index.h"
#include "src/core/workspace.h"
#include "src/kernels/token_permute_with_routing_map_grad.h"
#include "src/ops/checks.h"

namespace moegrad::ops {
namespace {

constexpr const char* kOp = "MoeTokenPermuteWithRoutingMapGrad";

// Dropless probsGrad cuts the token rows into at most this many blocks, each with E cursors of workspace.
constexpr int64_t kMaxProbBlocks = 256;
constexpr int64_t kMinBlockRows = 64;

class PermuteGradPlan final : public internal::PlanBase {
 public:
  PermuteGradPlan() : PlanBase(kOp) {}

  kernels::PermuteGradProblem problem;
  uint64_t offsets_at = 0;  // drop-and-pad: T + 1 offsets
  uint64_t slots_at = 0;    // drop-and-pad: N slots
  uint64_t cursors_at = 0;  // dropless with probs grads: blocks * E cursors

  void SetWorkspace(const internal::WorkspaceLayout& layout) { workspace_size_ = layout.size(); }

 protected:
  Status Execute(void* workspace) const override {
    // sortedIndices read through a plain pointer when it is contiguous (as a forward pass writes it).
    const kernels::FlatView& idx = problem.sorted_indices;
    if (idx.inner == 1 && idx.outer_stride == 1) {
      const int32_t* data = static_cast<const int32_t*>(idx.data);
      return ExecuteWith(workspace, [data](int64_t p) { return int64_t{data[p]}; });
    }
    return ExecuteWith(workspace, [&idx](int64_t p) { return int64_t{idx.At<const int32_t>(p)}; });
  }

  template <typename IndexAt>
  Status ExecuteWith(void* workspace, const IndexAt& index_at) const {
    const kernels::PermuteGradProblem& q = problem;
    const int64_t N = q.rows;
    // Index data first, completely, before any output byte is written.
    const int64_t hi = q.drop_and_pad ? q.tokens : N;
    for (int64_t p = 0; p < N; ++p) {
      const int64_t v = index_at(p);
      if (v < 0 || v >= hi) {
        return MakeStatus(StatusCode::kInvalid, "%s: sortedIndices[%lld] = %lld is outside [0, %lld) for dropAndPad %s",
                          kOp, static_cast<long long>(p), static_cast<long long>(v), static_cast<long long>(hi),
                          q.drop_and_pad ? "true" : "false");
      }
    }
    kernels::PermuteGradProblem run = q;
    if (!q.drop_and_pad) {
      if (q.probs_grad.data != nullptr) {
        int64_t* cursors = internal::WorkspaceLayout::At<int64_t>(workspace, cursors_at);
        kernels::CountRoutedPerBlock(q, cursors);
        const int64_t blocks = kernels::NumBlocks(q);
        int64_t routed = 0;
        for (int64_t i = 0; i < blocks * q.experts; ++i) routed += cursors[i];
        if (routed != N) {
          return MakeStatus(StatusCode::kInvalid,
                            "%s: routingMap has %lld routed entries but permutedProbsOutputGrad has %lld; they must "
                            "be equal in dropless mode",
                            kOp, static_cast<long long>(routed), static_cast<long long>(N));
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
        run.cursors = cursors;
      }
    } else {
      // Inverse index (counting sort, stable): the rows p gathered into token t, ascending.
      int64_t* offsets = internal::WorkspaceLayout::At<int64_t>(workspace, offsets_at);
      int64_t* slots = internal::WorkspaceLayout::At<int64_t>(workspace, slots_at);
      internal::BuildInverseIndex(q.tokens, N, index_at, offsets, slots);
      run.offsets = offsets;
      run.slots = slots;
    }
    kernels::TokenPermuteWithRoutingMapGrad(run);
    return Status::Ok();
  }
};

}  // namespace

Status PlanTokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradParams& p,
                                          std::unique_ptr<internal::PlanBase>* plan) {
  const ArgChecker c(kOp);
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.permuted_token_output_grad, "permutedTokenOutputGrad"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.sorted_indices, "sortedIndices"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.tokens_grad, "tokensGradOut"));
  const bool has_probs = p.permuted_probs_output_grad != nullptr;
  if (has_probs) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.probs_grad, "probsGradOut (required with permutedProbsOutputGrad)"));
    if (!p.drop_and_pad) {
      MOEGRAD_RETURN_IF_ERROR(
          c.Required(p.routing_map, "routingMap (required with permutedProbsOutputGrad when dropAndPad is false)"));
    }
  }
  const struct {
    const TensorView* t;
    const char* name;
  } all[] = {{p.permuted_token_output_grad, "permutedTokenOutputGrad"},
             {p.permuted_probs_output_grad, "permutedProbsOutputGrad"},
             {p.sorted_indices, "sortedIndices"},
             {p.routing_map, "routingMap"},
             {p.tokens_grad, "tokensGradOut"},
             {p.probs_grad, "probsGradOut"}};
  for (const auto& a : all) {
    if (a.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.WellFormed(*a.t, a.name));
  }

  const int64_t E = p.num_experts;
  const int64_t T = p.tokens_num;
  if (E <= 0) return c.Fail(StatusCode::kInvalid, "numExperts = %lld must be > 0", static_cast<long long>(E));
  if (T <= 0) return c.Fail(StatusCode::kInvalid, "tokensNum = %lld must be > 0", static_cast<long long>(T));

  const TensorView& grad = *p.permuted_token_output_grad;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(grad, "permutedTokenOutputGrad", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad, "permutedTokenOutputGrad"));
  const int64_t N = grad.sizes[0];
  const int64_t H = grad.sizes[1];

  const TensorView& idx = *p.sorted_indices;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "sortedIndices", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "sortedIndices", DType::kInt32));
  if (idx.sizes[0] != N) {
    return c.Fail(StatusCode::kInvalid, "sortedIndices has %lld rows but permutedTokenOutputGrad has %lld",
                  static_cast<long long>(idx.sizes[0]), static_cast<long long>(N));
  }
  if (has_probs) {
    const TensorView& pg = *p.permuted_probs_output_grad;
    MOEGRAD_RETURN_IF_ERROR(c.Rank(pg, "permutedProbsOutputGrad", 1));
    if (pg.sizes[0] != N) {
      return c.Fail(StatusCode::kInvalid, "permutedProbsOutputGrad has %lld rows but permutedTokenOutputGrad has %lld",
                    static_cast<long long>(pg.sizes[0]), static_cast<long long>(N));
    }
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(pg, "permutedProbsOutputGrad", grad, "permutedTokenOutputGrad"));
  }

  if (!p.drop_and_pad && N % T != 0) {
    return c.Fail(StatusCode::kInvalid,
                  "permutedTokenOutputGrad has %lld rows, not a multiple of tokensNum = %lld (dropless: N = T*K)",
                  static_cast<long long>(N), static_cast<long long>(T));
  }
  if (p.drop_and_pad && N % E != 0) {
    return c.Fail(StatusCode::kInvalid,
                  "permutedTokenOutputGrad has %lld rows, not a multiple of numExperts = %lld (dropAndPad: N = E*C)",
                  static_cast<long long>(N), static_cast<long long>(E));
  }

  if (p.routing_map != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.routing_map, "routingMap", {T, E}));
    if (p.routing_map->dtype != DType::kInt8 && p.routing_map->dtype != DType::kBool) {
      return c.Fail(StatusCode::kInvalid, "routingMap has dtype %s but must be INT8 or BOOL",
                    DTypeName(p.routing_map->dtype));
    }
  }
  MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.tokens_grad, "tokensGradOut", {T, H}));
  MOEGRAD_RETURN_IF_ERROR(c.SameDType(*p.tokens_grad, "tokensGradOut", grad, "permutedTokenOutputGrad"));
  if (has_probs) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.probs_grad, "probsGradOut", {T, E}));
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*p.probs_grad, "probsGradOut", grad, "permutedTokenOutputGrad"));
  }

  // Outputs (all[4], all[5]) must not share bytes with any input or with each other; probsGradOut counts only
  // when it is written (probs grads given).
  const int outputs = has_probs ? 6 : 5;
  for (int o = 4; o < outputs; ++o) {
    MOEGRAD_RETURN_IF_ERROR(c.NoSelfOverlap(*all[o].t, all[o].name));
    for (int a = 0; a < outputs; ++a) {
      if (a == o || all[a].t == nullptr) continue;
      MOEGRAD_RETURN_IF_ERROR(c.NoOverlap(*all[o].t, all[o].name, *all[a].t, all[a].name));
    }
  }

  auto out = std::unique_ptr<PermuteGradPlan>(new (std::nothrow) PermuteGradPlan);
  if (!out) return c.Fail(StatusCode::kRuntimeError, "cannot allocate the plan");
  kernels::PermuteGradProblem& q = out->problem;
  q.dtype = grad.dtype;
  q.drop_and_pad = p.drop_and_pad;
  q.tokens = T;
  q.experts = E;
  q.hidden = H;
  q.rows = N;
  q.topk = N / T;
  q.capacity = N / E;
  q.grad = kernels::RowView::Of2D(grad);
  q.sorted_indices = kernels::FlatView::Of(idx);
  q.tokens_grad = kernels::RowView::Of2D(*p.tokens_grad);
  if (has_probs) {
    q.probs_grad_in = kernels::FlatView::Of(*p.permuted_probs_output_grad);
    q.probs_grad = kernels::RowView::Of2D(*p.probs_grad);
    if (!p.drop_and_pad) q.routing_map = kernels::RowView::Of2D(*p.routing_map);
  }
  q.block_rows = std::max(kMinBlockRows, internal::CeilDiv(T, kMaxProbBlocks));

  internal::WorkspaceLayout layout;
  if (p.drop_and_pad) {
    out->offsets_at = layout.Add(static_cast<uint64_t>(T) + 1, sizeof(int64_t));
    out->slots_at = layout.Add(static_cast<uint64_t>(N), sizeof(int64_t));
  } else if (has_probs) {
    uint64_t cursors = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(kernels::NumBlocks(q)), static_cast<uint64_t>(E), &cursors)) {
      return c.Fail(StatusCode::kInvalid, "the workspace size overflows 64 bits");
    }
    out->cursors_at = layout.Add(cursors, sizeof(int64_t));
  }
  if (layout.overflowed()) return c.Fail(StatusCode::kInvalid, "the workspace size overflows 64 bits");
  out->SetWorkspace(layout);
  *plan = std::move(out);
  return Status::Ok();
}

}  // namespace moegrad::ops
