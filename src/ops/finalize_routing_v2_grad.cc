// MoeFinalizeRoutingV2Grad: every rule of docs/ops/finalize_routing_v2_grad.md, and the problem.
#include "src/backend/finalize_routing_v2_grad.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

Status Plan(const FinalizeRoutingV2GradArgs& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::FinalizeRoutingV2GradProblem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* expanded_x = Opt(a.expanded_x);
  const TensorView* scales = Opt(a.scales);
  const TensorView* expert_idx = Opt(a.expert_idx);
  const TensorView* bias = Opt(a.bias);
  if (scales != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(expanded_x, "expandedX (required with scales)"));
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(Opt(a.grad_scales), "gradScalesOut (required with scales)"));
  }
  if (bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(scales, "scales (required with bias)"));
    MOEGRAD_RETURN_IF_ERROR(c.Required(expert_idx, "expertIdx (required with bias)"));
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  const int64_t mode = a.drop_pad_mode;
  if (mode != 0 && mode != 1) {
    return c.Fail(StatusCode::kInvalid, "dropPadMode = %lld must be 0 (dropless) or 1 (drop/pad)",
                  static_cast<long long>(mode));
  }
  if (a.active_num < 0) {
    return c.Fail(StatusCode::kInvalid, "activeNum = %lld must be >= 0", static_cast<long long>(a.active_num));
  }
  if (mode == 1 && a.expert_num <= 0) {
    return c.Fail(StatusCode::kInvalid, "expertNum = %lld must be > 0 for dropPadMode 1",
                  static_cast<long long>(a.expert_num));
  }
  if (mode == 1 && a.expert_capacity <= 0) {
    return c.Fail(StatusCode::kInvalid, "expertCapacity = %lld must be > 0 for dropPadMode 1",
                  static_cast<long long>(a.expert_capacity));
  }

  const TensorView& grad_y = a.grad_y;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(grad_y, "gradY", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad_y, "gradY"));
  const int64_t R = grad_y.sizes[0];
  const int64_t H = grad_y.sizes[1];
  const TensorView& idx = a.expanded_row_idx;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expandedRowIdx", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expandedRowIdx", DType::kInt32));
  const int64_t pairs = idx.sizes[0];

  // With no tokens nothing else determines K; an expertIdx of shape (0, K) fixes it instead of being rejected.
  const int64_t k_if_empty = expert_idx != nullptr && expert_idx->rank == 2 ? expert_idx->sizes[1] : 0;
  int64_t K = 0;
  MOEGRAD_RETURN_IF_ERROR(c.PairsPerToken(pairs, scales, R, "gradY", k_if_empty, &K));
  if (expert_idx != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*expert_idx, "expertIdx", {R, K}));
    MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*expert_idx, "expertIdx", DType::kInt32));
  }
  if (bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Rank(*bias, "bias", 2));
    if (bias->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld columns but gradY has H = %lld",
                    static_cast<long long>(bias->sizes[1]), static_cast<long long>(H));
    }
    if (mode == 1 && bias->sizes[0] != a.expert_num) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld rows but expertNum = %lld",
                    static_cast<long long>(bias->sizes[0]), static_cast<long long>(a.expert_num));
    }
  }

  int64_t rows = pairs;
  if (mode == 0 && a.active_num > 0 && a.active_num < pairs) rows = a.active_num;
  if (mode == 1 && __builtin_mul_overflow(a.expert_num, a.expert_capacity, &rows)) {
    return c.Fail(StatusCode::kInvalid, "expertNum * expertCapacity = %lld * %lld overflows",
                  static_cast<long long>(a.expert_num), static_cast<long long>(a.expert_capacity));
  }
  auto check_rows_shape = [&](const TensorView& t, const char* name) {
    return mode == 1 ? c.Shape(t, name, {a.expert_num, a.expert_capacity, H}) : c.Shape(t, name, {rows, H});
  };
  if (expanded_x != nullptr) MOEGRAD_RETURN_IF_ERROR(check_rows_shape(*expanded_x, "expandedX"));
  // The outputs' shapes here, their dtype with the other float tensors' below.
  MOEGRAD_RETURN_IF_ERROR(mode == 1 ? c.OutputShape(&a.grad_expanded_x, "gradExpandedXOut",
                                                    {a.expert_num, a.expert_capacity, H}, grad_y.dtype)
                                    : c.OutputShape(&a.grad_expanded_x, "gradExpandedXOut", {rows, H}, grad_y.dtype));
  if (scales != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.OutputShape(Opt(a.grad_scales), "gradScalesOut", {R, K}, scales->dtype));
  }

  // The two dtype groups: the tokens (gradY's dtype) and the weights (scales').
  const char* tokens_group = GroupNames<FinalizeRoutingV2GradArgs>(DTypeGroup::kTokens);
  const struct {
    const TensorView* t;
    const char* name;
  } floats[] = {{expanded_x, "expandedX"}, {bias, "bias"}, {c.Given(&a.grad_expanded_x), "gradExpandedXOut"}};
  for (const auto& f : floats) {
    if (f.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.SameDType(*f.t, f.name, grad_y, "gradY", tokens_group));
  }
  if (scales != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.FloatDType(*scales, "scales"));
    if (const TensorView* gs = c.Given(Opt(a.grad_scales))) {
      MOEGRAD_RETURN_IF_ERROR(c.SameDType(*gs, "gradScalesOut", *scales, "scales",
                                          GroupNames<FinalizeRoutingV2GradArgs>(DTypeGroup::kWeights)));
    }
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(grad_y.dtype);
  q.weight_dtype = scales != nullptr ? CoreDType(scales->dtype) : q.dtype;
  q.mode = mode;
  q.tokens = R;
  q.topk = K;
  q.hidden = H;
  q.rows = rows;
  q.grad_y = Rows2D(grad_y);
  q.row_idx = Flat(idx);
  auto rows_view = [&](const TensorView& t) { return mode == 1 ? Rows3D(t) : Rows2D(t); };
  q.grad_expanded_x = rows_view(a.grad_expanded_x);
  if (scales != nullptr) {
    q.scales = Flat(*scales);
    q.expanded_x = rows_view(*expanded_x);
    q.grad_scales = Flat(*a.grad_scales);
    if (bias != nullptr) {
      q.bias = Rows2D(*bias);
      q.expert_idx = Flat(*expert_idx);
      q.bias_rows = bias->sizes[0];
      q.has_bias = true;
    }
  }
  return MakePlan<FinalizeRoutingV2GradArgs>(q, device, plan);
}

}  // namespace moegrad::ops
