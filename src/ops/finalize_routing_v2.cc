#include "src/ops/finalize_routing_v2.h"

#include <new>

#include "src/kernels/finalize_routing_v2.h"
#include "src/ops/checks.h"

namespace moegrad::ops {
namespace {

constexpr const char* kOp = "MoeFinalizeRoutingV2";

class FinalizePlan final : public internal::PlanBase {
 public:
  FinalizePlan() : PlanBase(kOp) {}

  kernels::FinalizeProblem problem;
  int64_t mode = 0;
  bool has_bias = false;  // bias given (its data pointer may be null when it is empty)
  int64_t bias_rows = 0;

 protected:
  Status Execute(void* /*workspace*/) const override {
    const kernels::FinalizeProblem& q = problem;
    const int64_t pairs = q.tokens * q.topk;
    // Index data first, completely, before any output byte is written.
    const int64_t lo = (mode == 1 || mode == 3) ? -1 : 0;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t v = q.row_idx.At<const int32_t>(i);
      if (v < lo || v >= q.rows) return RowIdxOutside(kOp, i, v, lo, q.rows, mode);
    }
    if (has_bias) MOEGRAD_RETURN_IF_ERROR(ExpertIdxInBias(kOp, q.expert_idx, pairs, bias_rows));
    kernels::FinalizeRoutingV2(q);
    return Status::Ok();
  }
};

}  // namespace

Status PlanFinalizeRoutingV2(const FinalizeRoutingV2Params& p, std::unique_ptr<internal::PlanBase>* plan) {
  const ArgChecker c(kOp);
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.expanded_x, "expandedX"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.expanded_row_idx, "expandedRowIdx"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.out, "out"));
  if (p.bias != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Required(p.expert_idx, "expertIdx (required with bias)"));
  const struct {
    const TensorView* t;
    const char* name;
  } all[] = {{p.expanded_x, "expandedX"}, {p.expanded_row_idx, "expandedRowIdx"}, {p.x1, "x1"}, {p.x2, "x2"},
             {p.bias, "bias"},            {p.scales, "scales"},    {p.expert_idx, "expertIdx"},
             {p.out, "out"}};
  for (const auto& a : all) {
    if (a.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.WellFormed(*a.t, a.name));
  }

  const int64_t mode = p.drop_pad_mode;
  if (mode < 0 || mode > 3) {
    return c.Fail(StatusCode::kInvalid,
                  "dropPadMode = %lld must be 0, 1 (expert-major, dropless / drop-pad) or 2, 3 (token-major)",
                  static_cast<long long>(mode));
  }
  const bool drop_pad = mode == 1 || mode == 3;

  const TensorView& x = *p.expanded_x;
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(x, "expandedX"));
  const TensorView& out = *p.out;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(out, "out", 2));
  const int64_t R = out.sizes[0];
  const int64_t H = out.sizes[1];
  const TensorView& idx = *p.expanded_row_idx;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expandedRowIdx", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expandedRowIdx", DType::kInt32));
  const int64_t pairs = idx.sizes[0];

  int64_t K = 0;
  MOEGRAD_RETURN_IF_ERROR(c.PairsPerToken(pairs, p.scales, R, "out", 0, &K));
  if (p.expert_idx != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.expert_idx, "expertIdx", {R, K}));
    MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*p.expert_idx, "expertIdx", DType::kInt32));
  }

  int64_t rows = pairs;
  if (drop_pad) {
    if (x.rank != 3 || x.sizes[2] != H) {
      return c.Fail(StatusCode::kInvalid, "expandedX has shape %s but dropPadMode %lld needs (E, C, H) with H = %lld",
                    ShapeString(x).text, static_cast<long long>(mode), static_cast<long long>(H));
    }
    rows = x.sizes[0] * x.sizes[1];  // no overflow: WellFormed bounds the element count
  } else {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(x, "expandedX", {pairs, H}));
  }
  if (rows - 1 > INT32_MAX) {
    return c.Fail(StatusCode::kInvalid, "expandedX has %lld rows, more than INT32 expandedRowIdx can address",
                  static_cast<long long>(rows));
  }
  if (p.bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Rank(*p.bias, "bias", 2));
    if (p.bias->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld columns but out has H = %lld",
                    static_cast<long long>(p.bias->sizes[1]), static_cast<long long>(H));
    }
    if (drop_pad && p.bias->sizes[0] != x.sizes[0]) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld rows but expandedX has E = %lld experts",
                    static_cast<long long>(p.bias->sizes[0]), static_cast<long long>(x.sizes[0]));
    }
  }
  if (p.x1 != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.x1, "x1", {R, H}));
  if (p.x2 != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.x2, "x2", {R, H}));

  const struct {
    const TensorView* t;
    const char* name;
  } floats[] = {{p.x1, "x1"}, {p.x2, "x2"}, {p.bias, "bias"}, {p.scales, "scales"}, {p.out, "out"}};
  for (const auto& f : floats) {
    if (f.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.SameDType(*f.t, f.name, x, "expandedX"));
  }

  // out (all[7]) must share no byte with any input.
  MOEGRAD_RETURN_IF_ERROR(c.NoSelfOverlap(out, "out"));
  for (int a = 0; a < 7; ++a) {
    if (all[a].t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.NoOverlap(out, "out", *all[a].t, all[a].name));
  }

  auto plan_out = std::unique_ptr<FinalizePlan>(new (std::nothrow) FinalizePlan);
  if (!plan_out) return c.Fail(StatusCode::kRuntimeError, "cannot allocate the plan");
  kernels::FinalizeProblem& q = plan_out->problem;
  q.dtype = x.dtype;
  q.tokens = R;
  q.topk = K;
  q.hidden = H;
  q.rows = rows;
  q.expert_major = mode == 0 || mode == 1;
  q.expanded_x = drop_pad ? kernels::RowView::Of3D(x) : kernels::RowView::Of2D(x);
  q.row_idx = kernels::FlatView::Of(idx);
  if (p.x1 != nullptr) q.x1 = kernels::RowView::Of2D(*p.x1);
  if (p.x2 != nullptr) q.x2 = kernels::RowView::Of2D(*p.x2);
  if (p.scales != nullptr) q.scales = kernels::FlatView::Of(*p.scales);
  if (p.bias != nullptr) {
    q.bias = kernels::RowView::Of2D(*p.bias);
    q.expert_idx = kernels::FlatView::Of(*p.expert_idx);
    plan_out->has_bias = true;
    plan_out->bias_rows = p.bias->sizes[0];
  }
  q.out = kernels::RowView::Of2D(out);
  plan_out->mode = mode;
  *plan = std::move(plan_out);
  return Status::Ok();
}

}  // namespace moegrad::ops
