// MoeFinalizeRoutingV2: every rule of docs/ops/finalize_routing_v2.md, and the problem.
#include "src/backend/finalize_routing_v2.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

Status Plan(const FinalizeRoutingV2Args& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::FinalizeRoutingV2Problem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* x1 = Opt(a.x1);
  const TensorView* x2 = Opt(a.x2);
  const TensorView* bias = Opt(a.bias);
  const TensorView* scales = Opt(a.scales);
  const TensorView* expert_idx = Opt(a.expert_idx);
  if (bias != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Required(expert_idx, "expertIdx (required with bias)"));
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  const int64_t mode = a.drop_pad_mode;
  if (mode < 0 || mode > 3) {
    return c.Fail(StatusCode::kInvalid,
                  "dropPadMode = %lld must be 0, 1 (expert-major, dropless / drop-pad) or 2, 3 (token-major)",
                  static_cast<long long>(mode));
  }
  const bool drop_pad = mode == 1 || mode == 3;

  const TensorView& x = a.expanded_x;
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(x, "expandedX"));
  const TensorView& out = a.out;
  const TensorView& idx = a.expanded_row_idx;
  int64_t R = 0, H = 0;
  if (c.querying()) {
    // out (R, H) without out: H from expandedX, R from the first (R, ...) input given, else K = 1.
    MOEGRAD_RETURN_IF_ERROR(c.Rank(x, "expandedX", drop_pad ? 3 : 2));
    H = x.sizes[x.rank - 1];
    R = idx.rank == 1 ? idx.sizes[0] : 0;
    for (const TensorView* t : {scales, x1, x2, expert_idx}) {
      if (t != nullptr && t->rank >= 1) {
        R = t->sizes[0];
        break;
      }
    }
  } else {
    MOEGRAD_RETURN_IF_ERROR(c.Rank(out, "out", 2));
    R = out.sizes[0];
    H = out.sizes[1];
  }
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expandedRowIdx", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expandedRowIdx", DType::kInt32));
  const int64_t pairs = idx.sizes[0];

  // With no tokens and no scales, an expertIdx of shape (0, K) fixes K (an expert-parallel rank that receives no
  // tokens may still pass bias and expertIdx).
  const int64_t k_if_empty = expert_idx != nullptr && expert_idx->rank == 2 ? expert_idx->sizes[1] : 0;
  int64_t K = 0;
  MOEGRAD_RETURN_IF_ERROR(c.PairsPerToken(pairs, scales, R, "out", k_if_empty, &K));
  if (expert_idx != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*expert_idx, "expertIdx", {R, K}));
    MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*expert_idx, "expertIdx", DType::kInt32));
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
  if (bias != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Rank(*bias, "bias", 2));
    if (bias->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld columns but out has H = %lld",
                    static_cast<long long>(bias->sizes[1]), static_cast<long long>(H));
    }
    if (drop_pad && bias->sizes[0] != x.sizes[0]) {
      return c.Fail(StatusCode::kInvalid, "bias has %lld rows but expandedX has E = %lld experts",
                    static_cast<long long>(bias->sizes[0]), static_cast<long long>(x.sizes[0]));
    }
  }
  if (x1 != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Shape(*x1, "x1", {R, H}));
  if (x2 != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Shape(*x2, "x2", {R, H}));

  const struct {
    const TensorView* t;
    const char* name;
  } floats[] = {{x1, "x1"}, {x2, "x2"}, {bias, "bias"}};
  const char* tokens_group = GroupNames<FinalizeRoutingV2Args>(DTypeGroup::kTokens);
  for (const auto& f : floats) {
    if (f.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.SameDType(*f.t, f.name, x, "expandedX", tokens_group));
  }
  // scales alone is the weight group: any float dtype.
  if (scales != nullptr) MOEGRAD_RETURN_IF_ERROR(c.FloatDType(*scales, "scales"));
  MOEGRAD_RETURN_IF_ERROR(c.Output(&out, "out", {R, H}, x, "expandedX", tokens_group));
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(x.dtype);
  q.weight_dtype = scales != nullptr ? CoreDType(scales->dtype) : q.dtype;
  q.mode = mode;
  q.tokens = R;
  q.topk = K;
  q.hidden = H;
  q.rows = rows;
  q.expert_major = mode == 0 || mode == 1;
  q.expanded_x = drop_pad ? Rows3D(x) : Rows2D(x);
  q.row_idx = Flat(idx);
  if (x1 != nullptr) q.x1 = Rows2D(*x1);
  if (x2 != nullptr) q.x2 = Rows2D(*x2);
  if (scales != nullptr) q.scales = Flat(*scales);
  if (bias != nullptr) {
    q.bias = Rows2D(*bias);
    q.expert_idx = Flat(*expert_idx);
    q.has_bias = true;
    q.bias_rows = bias->sizes[0];
  }
  q.out = Rows2D(out);
  return MakePlan<FinalizeRoutingV2Args>(q, device, plan);
}

}  // namespace moegrad::ops
