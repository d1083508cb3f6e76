// MoeTokenPermuteWithRoutingMapGrad: every rule of docs/ops/token_permute_with_routing_map_grad.md, and the
// problem.
#include "src/backend/token_permute_with_routing_map_grad.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

Status Plan(const TokenPermuteWithRoutingMapGradArgs& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::TokenPermuteWithRoutingMapGradProblem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* probs_in = Opt(a.permuted_probs_output_grad);
  const TensorView* routing_map = Opt(a.routing_map);
  const TensorView* probs_grad = Opt(a.probs_grad);
  const bool has_probs = probs_in != nullptr;
  if (has_probs) {
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(probs_grad, "probsGradOut (required with permutedProbsOutputGrad)"));
    if (!a.drop_and_pad) {
      MOEGRAD_RETURN_IF_ERROR(
          c.Required(routing_map, "routingMap (required with permutedProbsOutputGrad when dropAndPad is false)"));
    }
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  const int64_t E = a.num_experts;
  const int64_t T = a.tokens_num;
  if (E <= 0) return c.Fail(StatusCode::kInvalid, "numExperts = %lld must be > 0", static_cast<long long>(E));
  if (T <= 0) return c.Fail(StatusCode::kInvalid, "tokensNum = %lld must be > 0", static_cast<long long>(T));

  const TensorView& grad = a.permuted_token_output_grad;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(grad, "permutedTokenOutputGrad", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad, "permutedTokenOutputGrad"));
  const int64_t N = grad.sizes[0];
  const int64_t H = grad.sizes[1];

  const TensorView& idx = a.sorted_indices;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "sortedIndices", 1));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "sortedIndices", DType::kInt32));
  if (idx.sizes[0] != N) {
    return c.Fail(StatusCode::kInvalid, "sortedIndices has %lld rows but permutedTokenOutputGrad has %lld",
                  static_cast<long long>(idx.sizes[0]), static_cast<long long>(N));
  }
  if (has_probs) {
    const TensorView& pg = *probs_in;
    MOEGRAD_RETURN_IF_ERROR(c.Rank(pg, "permutedProbsOutputGrad", 1));
    if (pg.sizes[0] != N) {
      return c.Fail(StatusCode::kInvalid, "permutedProbsOutputGrad has %lld rows but permutedTokenOutputGrad has %lld",
                    static_cast<long long>(pg.sizes[0]), static_cast<long long>(N));
    }
    MOEGRAD_RETURN_IF_ERROR(c.FloatDType(pg, "permutedProbsOutputGrad"));  // the weight group: its own dtype
  }

  if (!a.drop_and_pad && N % T != 0) {
    return c.Fail(StatusCode::kInvalid,
                  "permutedTokenOutputGrad has %lld rows, not a multiple of tokensNum = %lld (dropless: N = T*K)",
                  static_cast<long long>(N), static_cast<long long>(T));
  }
  if (a.drop_and_pad && N % E != 0) {
    return c.Fail(StatusCode::kInvalid,
                  "permutedTokenOutputGrad has %lld rows, not a multiple of numExperts = %lld (dropAndPad: N = E*C)",
                  static_cast<long long>(N), static_cast<long long>(E));
  }

  if (routing_map != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*routing_map, "routingMap", {T, E}));
    MOEGRAD_RETURN_IF_ERROR(c.IndexMapDType(*routing_map, "routingMap"));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.tokens_grad, "tokensGradOut", {T, H}, grad, "permutedTokenOutputGrad",
                                   GroupNames<TokenPermuteWithRoutingMapGradArgs>(DTypeGroup::kTokens)));
  if (has_probs) {
    MOEGRAD_RETURN_IF_ERROR(c.Output(probs_grad, "probsGradOut", {T, E}, *probs_in, "permutedProbsOutputGrad",
                                     GroupNames<TokenPermuteWithRoutingMapGradArgs>(DTypeGroup::kWeights)));
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(grad.dtype);
  q.weight_dtype = has_probs ? CoreDType(probs_in->dtype) : q.dtype;
  q.drop_and_pad = a.drop_and_pad;
  q.tokens = T;
  q.experts = E;
  q.hidden = H;
  q.rows = N;
  q.topk = N / T;
  q.capacity = N / E;
  q.grad = Rows2D(grad);
  q.sorted_indices = Flat(idx);
  q.tokens_grad = Rows2D(a.tokens_grad);
  if (has_probs) {
    q.probs_grad_in = Flat(*probs_in);
    q.probs_grad = Rows2D(*probs_grad);
    if (!a.drop_and_pad) q.routing_map = Rows2D(*routing_map);
  }
  return MakePlan<TokenPermuteWithRoutingMapGradArgs>(q, device, plan);
}

}  // namespace moegrad::ops
