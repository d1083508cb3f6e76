// MoeInitRoutingV2Grad: every rule of docs/ops/init_routing_v2_grad.md, and the problem.
#include "src/backend/init_routing_v2_grad.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

Status Plan(const InitRoutingV2GradArgs& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::InitRoutingV2GradProblem;
  const ArgChecker c(Problem::kName, outputs);
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
  const int64_t K = a.top_k;
  if (K <= 0) return c.Fail(StatusCode::kInvalid, "topK = %lld must be > 0", static_cast<long long>(K));

  const TensorView& grad = a.grad_expanded_x;
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad, "gradExpandedX"));
  const int rank = mode == 1 ? 3 : 2;
  if (grad.rank != rank) {
    return c.Fail(StatusCode::kInvalid, "gradExpandedX must be %s for dropPadMode %lld but has shape %s",
                  mode == 1 ? "3-D (E, C, H)" : "2-D (rows, H)", static_cast<long long>(mode),
                  ShapeString(grad).text);
  }
  const TensorView& idx = a.expanded_row_idx;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expandedRowIdx", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expandedRowIdx", DType::kInt32));
  const int64_t L = idx.sizes[0];
  if (L % K != 0) {
    return c.Fail(StatusCode::kInvalid, "expandedRowIdx has %lld elements, not a multiple of topK = %lld (L = N*topK)",
                  static_cast<long long>(L), static_cast<long long>(K));
  }
  const int64_t N = L / K;
  const int64_t H = grad.sizes[rank - 1];
  // out's shape with the rule's own message, then its report (a query) or dtype (a phase one).
  if (const TensorView* out = c.Given(&a.out)) {
    if (out->rank != 2 || out->sizes[0] != N || out->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "out has shape %s but must be %s = (L/topK, H)", ShapeString(*out).text,
                    ShapeString({N, H}).text);
    }
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.out, "out", {N, H}, grad, "gradExpandedX",
                                   GroupNames<InitRoutingV2GradArgs>(DTypeGroup::kTokens)));

  // Mode 0: the forward's (A, H), A = min(activeNum, L) when activeNum > 0. Mode 1: E and C are the shape's.
  int64_t rows = L;
  if (mode == 0) {
    const bool truncated = a.active_num > 0 && a.active_num < L;
    if (truncated) rows = a.active_num;
    if (grad.sizes[0] != rows && truncated) {
      return c.Fail(StatusCode::kInvalid, "gradExpandedX has %lld rows but must have %lld (activeNum %lld)",
                    static_cast<long long>(grad.sizes[0]), static_cast<long long>(rows),
                    static_cast<long long>(a.active_num));
    }
    if (grad.sizes[0] != rows) {
      return c.Fail(StatusCode::kInvalid,
                    "gradExpandedX has %lld rows but must have L = N*topK = %lld (activeNum %lld is 0 or >= L)",
                    static_cast<long long>(grad.sizes[0]), static_cast<long long>(rows),
                    static_cast<long long>(a.active_num));
    }
  } else {
    rows = grad.sizes[0] * grad.sizes[1];  // no overflow: WellFormed bounds E*C (and the element count)
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(grad.dtype);
  q.mode = mode;
  q.tokens = N;
  q.topk = K;
  q.hidden = H;
  q.rows = rows;
  q.grad_expanded_x = mode == 1 ? Rows3D(grad) : Rows2D(grad);
  q.row_idx = Flat(idx);
  q.out = Rows2D(a.out);
  return MakePlan<InitRoutingV2GradArgs>(q, device, plan);
}

}  // namespace moegrad::ops
