#include "src/ops/finalize_routing_v2_grad.h"

#include <new>

#include "src/core/inverse_index.h"
#include "src/core/workspace.h"
#include "src/kernels/finalize_routing_v2_grad.h"
#include "src/ops/checks.h"

namespace moegrad::ops {
namespace {

constexpr const char* kOp = "MoeFinalizeRoutingV2Grad";

class FinalizeGradPlan final : public internal::PlanBase {
 public:
  FinalizeGradPlan() : PlanBase(kOp) {}

  kernels::FinalizeGradProblem problem;
  int64_t mode = 0;
  int64_t bias_rows = 0;
  bool has_bias = false;  // bias given (its data may be null when it is empty)
  uint64_t offsets_at = 0;
  uint64_t pairs_at = 0;
  uint64_t token_cost_at = 0;

  void SetWorkspace(const internal::WorkspaceLayout& layout) { workspace_size_ = layout.size(); }

 protected:
  Status Execute(void* workspace) const override {
    const kernels::FinalizeGradProblem& q = problem;
    const int64_t pairs = q.tokens * q.topk;
    int64_t* offsets = internal::WorkspaceLayout::At<int64_t>(workspace, offsets_at);
    int64_t* list = internal::WorkspaceLayout::At<int64_t>(workspace, pairs_at);
    // Index data first, completely, before any output byte is written. The same pass notes the pair writing
    // each row (in the offsets piece) and whether any row has two writers.
    int64_t* writer = offsets;
    for (int64_t v = 0; v < q.rows; ++v) writer[v] = -1;
    bool one_writer = true;
    int64_t written = 0;
    const int64_t lo = mode == 1 ? -1 : 0;
    const int64_t hi = mode == 1 ? q.rows : pairs;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t v = q.row_idx.At<const int32_t>(i);
      if (v >= 0 && v < q.rows) {
        if (writer[v] >= 0) one_writer = false;
        writer[v] = i;
        ++written;
      }
      if (v < lo || v >= hi) return RowIdxOutside(kOp, i, v, lo, hi, mode);
    }
    if (has_bias) MOEGRAD_RETURN_IF_ERROR(ExpertIdxInBias(kOp, q.expert_idx, pairs, bias_rows));
    kernels::FinalizeGradProblem run = q;
    if (one_writer) {
      // Cost of each token for the thread split, in half rows: gradY, and per pair its gradExpandedX row
      // (and expandedX row) and its bias row.
      int64_t* cost = internal::WorkspaceLayout::At<int64_t>(workspace, token_cost_at);
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
      }
      run.one_writer = true;
      run.writer = writer;
      run.token_cost = cost;
      run.zero_rows = q.rows - written;
      kernels::FinalizeRoutingV2Grad(run);
      return Status::Ok();
    }
    // Inverse index (counting sort, stable): the pairs that write each row of gradExpandedX, ascending.
    internal::BuildInverseIndex(
        q.rows, pairs, [&](int64_t i) { return int64_t{q.row_idx.At<const int32_t>(i)}; }, offsets, list);

    run.offsets = offsets;
    run.pairs = list;
    kernels::FinalizeRoutingV2Grad(run);
    return Status::Ok();
  }
};

}  // namespace

Status PlanFinalizeRoutingV2Grad(const FinalizeRoutingV2GradParams& p, std::unique_ptr<internal::PlanBase>* plan) {
  const ArgChecker c(kOp);
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.grad_y, "gradY"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.expanded_row_idx, "expandedRowIdx"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.grad_expanded_x, "gradExpandedXOut"));
  if (p.scales != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.expanded_x, "expandedX (required with scales)"));
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.grad_scales, "gradScalesOut (required with scales)"));
  }
  if (p.bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.scales, "scales (required with bias)"));
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.expert_idx, "expertIdx (required with bias)"));
  }
  const struct {
    const TensorView* t;
    const char* name;
  } all[] = {{p.grad_y, "gradY"},           {p.expanded_row_idx, "expandedRowIdx"},
             {p.expanded_x, "expandedX"},   {p.scales, "scales"},
             {p.expert_idx, "expertIdx"},   {p.bias, "bias"},
             {p.grad_expanded_x, "gradExpandedXOut"}, {p.grad_scales, "gradScalesOut"}};
  for (const auto& a : all) {
    if (a.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.WellFormed(*a.t, a.name));
  }

  const int64_t mode = p.drop_pad_mode;
  if (mode != 0 && mode != 1) {
    return c.Fail(StatusCode::kInvalid, "dropPadMode = %lld must be 0 (dropless) or 1 (drop/pad)",
                  static_cast<long long>(mode));
  }
  if (p.active_num < 0) {
    return c.Fail(StatusCode::kInvalid, "activeNum = %lld must be >= 0", static_cast<long long>(p.active_num));
  }
  if (mode == 1 && p.expert_num <= 0) {
    return c.Fail(StatusCode::kInvalid, "expertNum = %lld must be > 0 for dropPadMode 1",
                  static_cast<long long>(p.expert_num));
  }
  if (mode == 1 && p.expert_capacity <= 0) {
    return c.Fail(StatusCode::kInvalid, "expertCapacity = %lld must be > 0 for dropPadMode 1",
                  static_cast<long long>(p.expert_capacity));
  }

  const TensorView& grad_y = *p.grad_y;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(grad_y, "gradY", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad_y, "gradY"));
  const int64_t R = grad_y.sizes[0];
  const int64_t H = grad_y.sizes[1];
  const TensorView& idx = *p.expanded_row_idx;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expandedRowIdx", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expandedRowIdx", DType::kInt32));
  const int64_t pairs = idx.sizes[0];

  // With no tokens nothing else determines K; an expertIdx of shape (0, K) fixes it instead of being rejected.
  const int64_t k_if_empty = p.expert_idx != nullptr && p.expert_idx->rank == 2 ? p.expert_idx->sizes[1] : 0;
  int64_t K = 0;
  MOEGRAD_RETURN_IF_ERROR(c.PairsPerToken(pairs, p.scales, R, "gradY", k_if_empty, &K));
  if (p.expert_idx != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.expert_idx, "expertIdx", {R, K}));
    MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*p.expert_idx, "expertIdx", DType::kInt32));
  }
  if (p.bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Rank(*p.bias, "bias", 2));
    if (p.bias->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld columns but gradY has H = %lld",
                    static_cast<long long>(p.bias->sizes[1]), static_cast<long long>(H));
    }
    if (mode == 1 && p.bias->sizes[0] != p.expert_num) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld rows but expertNum = %lld",
                    static_cast<long long>(p.bias->sizes[0]), static_cast<long long>(p.expert_num));
    }
  }

  int64_t rows = pairs;
  if (mode == 0 && p.active_num > 0 && p.active_num < pairs) rows = p.active_num;
  if (mode == 1 && __builtin_mul_overflow(p.expert_num, p.expert_capacity, &rows)) {
    return c.Fail(StatusCode::kInvalid, "expertNum * expertCapacity = %lld * %lld overflows",
                  static_cast<long long>(p.expert_num), static_cast<long long>(p.expert_capacity));
  }
  auto check_rows_shape = [&](const TensorView& t, const char* name) {
    return mode == 1 ? c.Shape(t, name, {p.expert_num, p.expert_capacity, H}) : c.Shape(t, name, {rows, H});
  };
  if (p.expanded_x != nullptr) MOEGRAD_RETURN_IF_ERROR(check_rows_shape(*p.expanded_x, "expandedX"));
  MOEGRAD_RETURN_IF_ERROR(check_rows_shape(*p.grad_expanded_x, "gradExpandedXOut"));
  if (p.scales != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.grad_scales, "gradScalesOut", {R, K}));

  const struct {
    const TensorView* t;
    const char* name;
  } floats[] = {{p.expanded_x, "expandedX"}, {p.scales, "scales"}, {p.bias, "bias"},
                {p.grad_expanded_x, "gradExpandedXOut"}, {p.scales ? p.grad_scales : nullptr, "gradScalesOut"}};
  for (const auto& f : floats) {
    if (f.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.SameDType(*f.t, f.name, grad_y, "gradY"));
  }

  // Outputs (all[6], all[7]) must not share bytes with any input or with each other; gradScalesOut counts only
  // when it is written (scales given).
  const int outputs = p.scales != nullptr ? 8 : 7;
  for (int o = 6; o < outputs; ++o) {
    MOEGRAD_RETURN_IF_ERROR(c.NoSelfOverlap(*all[o].t, all[o].name));
    for (int a = 0; a < outputs; ++a) {
      if (a == o || all[a].t == nullptr) continue;
      MOEGRAD_RETURN_IF_ERROR(c.NoOverlap(*all[o].t, all[o].name, *all[a].t, all[a].name));
    }
  }

  auto out = std::unique_ptr<FinalizeGradPlan>(new (std::nothrow) FinalizeGradPlan);
  if (!out) return c.Fail(StatusCode::kRuntimeError, "cannot allocate the plan");
  kernels::FinalizeGradProblem& q = out->problem;
  q.dtype = grad_y.dtype;
  q.tokens = R;
  q.topk = K;
  q.hidden = H;
  q.rows = rows;
  q.grad_y = kernels::RowView::Of2D(grad_y);
  q.row_idx = kernels::FlatView::Of(idx);
  auto rows_view = [&](const TensorView& t) {
    return mode == 1 ? kernels::RowView::Of3D(t) : kernels::RowView::Of2D(t);
  };
  q.grad_expanded_x = rows_view(*p.grad_expanded_x);
  if (p.scales != nullptr) {
    q.scales = kernels::FlatView::Of(*p.scales);
    q.expanded_x = rows_view(*p.expanded_x);
    q.grad_scales = kernels::FlatView::Of(*p.grad_scales);
    if (p.bias != nullptr) {
      q.bias = kernels::RowView::Of2D(*p.bias);
      q.expert_idx = kernels::FlatView::Of(*p.expert_idx);
      out->bias_rows = p.bias->sizes[0];
      out->has_bias = true;
    }
  }
  out->mode = mode;
  internal::WorkspaceLayout layout;
  out->offsets_at = layout.Add(static_cast<uint64_t>(rows) + 1, sizeof(int64_t));
  out->pairs_at = layout.Add(static_cast<uint64_t>(pairs), sizeof(int64_t));
  out->token_cost_at = layout.Add(static_cast<uint64_t>(R) + 1, sizeof(int64_t));
  if (layout.overflowed()) return c.Fail(StatusCode::kInvalid, "the workspace size overflows 64 bits");
  out->SetWorkspace(layout);
  *plan = std::move(out);
  return Status::Ok();
}

}  // namespace moegrad::ops
