// MoeTokenUnpermuteWithRoutingMapGrad: every rule of docs/ops/token_unpermute_with_routing_map_grad.md, in the
// order of its error table, and the problem.
#include <string>

#include "src/backend/token_unpermute_with_routing_map_grad.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

namespace {

// "(4, 7)" for a restoreShape of any length.
std::string ListString(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

}  // namespace

Status Plan(const TokenUnpermuteWithRoutingMapGradArgs& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Args = TokenUnpermuteWithRoutingMapGradArgs;
  using Problem = backend::TokenUnpermuteWithRoutingMapGradProblem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* map = Opt(a.routing_map);
  const TensorView* perm = Opt(a.permuted_tokens);
  const TensorView* probs = Opt(a.probs);
  const TensorView* probs_grad = Opt(a.probs_grad);
  const char* tokens_group = GroupNames<Args>(DTypeGroup::kTokens);
  const char* weights_group = GroupNames<Args>(DTypeGroup::kWeights);
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(perm, "permutedTokensOptional (required with probsOptional)"));
    MOEGRAD_RETURN_IF_ERROR(c.Required(map, "routingMapOptional (required with probsOptional)"));
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(probs_grad, "probsGradOutOptional (required with probsOptional)"));
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));
  const TensorView& grad = a.unpermuted_tokens_grad;
  const TensorView& out_index = a.out_index;
  const TensorView& token_id = a.permute_token_id;
  const TensorView* grad_out = c.Given(&a.permuted_tokens_grad);
  const TensorView* probs_out = probs != nullptr ? c.Given(probs_grad) : nullptr;

  // Ranks.
  MOEGRAD_RETURN_IF_ERROR(c.Rank(grad, "unpermutedTokensGrad", 2));
  MOEGRAD_RETURN_IF_ERROR(c.Rank(out_index, "outIndex", 1));
  MOEGRAD_RETURN_IF_ERROR(c.Rank(token_id, "permuteTokenId", 1));
  if (map != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*map, "routingMapOptional", 2));
  if (perm != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*perm, "permutedTokensOptional", 2));
  if (probs != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*probs, "probsOptional", 2));
  if (grad_out != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*grad_out, "permutedTokensGradOut", 2));
  if (probs_out != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*probs_out, "probsGradOutOptional", 2));

  // Dtypes, one per group.
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(grad, "unpermutedTokensGrad"));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(out_index, "outIndex", DType::kInt32));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(token_id, "permuteTokenId", DType::kInt32));
  if (map != nullptr) MOEGRAD_RETURN_IF_ERROR(c.IndexMapDType(*map, "routingMapOptional"));
  if (perm != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(
        c.SameDType(*perm, "permutedTokensOptional", grad, "unpermutedTokensGrad", tokens_group));
  }
  if (probs != nullptr) MOEGRAD_RETURN_IF_ERROR(c.FloatDType(*probs, "probsOptional"));
  if (grad_out != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(
        c.SameDType(*grad_out, "permutedTokensGradOut", grad, "unpermutedTokensGrad", tokens_group));
  }
  if (probs_out != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*probs_out, "probsGradOutOptional", *probs, "probsOptional", weights_group));
  }

  // Every N, H and T agree; routingMap's shape is probs'.
  const int64_t T = grad.sizes[0];
  const int64_t H = grad.sizes[1];
  const int64_t N = out_index.sizes[0];
  auto rows_differ = [&](const char* name, int64_t rows, const char* ref, int64_t ref_rows) {
    return c.Fail(StatusCode::kInvalid, "%s has %lld rows but %s has %lld", name, static_cast<long long>(rows), ref,
                  static_cast<long long>(ref_rows));
  };
  if (token_id.sizes[0] != N) return rows_differ("permuteTokenId", token_id.sizes[0], "outIndex", N);
  if (perm != nullptr) {
    if (perm->sizes[0] != N) return rows_differ("permutedTokensOptional", perm->sizes[0], "outIndex", N);
    if (perm->sizes[1] != H) {
      return c.Fail(StatusCode::kInvalid, "permutedTokensOptional has %lld columns but unpermutedTokensGrad has %lld",
                    static_cast<long long>(perm->sizes[1]), static_cast<long long>(H));
    }
  }
  if (map != nullptr && map->sizes[0] != T) {
    return rows_differ("routingMapOptional", map->sizes[0], "unpermutedTokensGrad", T);
  }
  if (probs != nullptr) {
    if (probs->sizes[0] != T) return rows_differ("probsOptional", probs->sizes[0], "unpermutedTokensGrad", T);
    if (map->sizes[1] != probs->sizes[1]) {
      return c.Fail(StatusCode::kInvalid, "routingMapOptional has shape %s but probsOptional has shape %s",
                    ShapeString(*map).text, ShapeString(*probs).text);
    }
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.permuted_tokens_grad, "permutedTokensGradOut", {N, H}, grad,
                                   "unpermutedTokensGrad", tokens_group));
  const int64_t E = probs != nullptr ? probs->sizes[1] : (map != nullptr ? map->sizes[1] : -1);
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(
        c.Output(probs_grad, "probsGradOutOptional", {T, E}, *probs, "probsOptional", weights_group));
  }

  // N = T*K (dropless), N = E*C (drop-and-pad with E known).
  if (!a.drop_and_pad && (T == 0 ? N != 0 : N % T != 0)) {
    return c.Fail(StatusCode::kInvalid, "outIndex has %lld rows, not a multiple of T = %lld (dropAndPad false: N = T*K)",
                  static_cast<long long>(N), static_cast<long long>(T));
  }
  if (a.drop_and_pad && E >= 0 && (E == 0 ? N != 0 : N % E != 0)) {
    return c.Fail(StatusCode::kInvalid, "outIndex has %lld rows, not a multiple of E = %lld (dropAndPad true: N = E*C)",
                  static_cast<long long>(N), static_cast<long long>(E));
  }
  const std::vector<int64_t>* restore = a.restore_shape ? &*a.restore_shape : nullptr;
  if (restore != nullptr && (restore->size() != 2 || (*restore)[0] != T || (*restore)[1] != H)) {
    return c.Fail(StatusCode::kInvalid, "restoreShapeOptional is %s but unpermutedTokensGrad is %s",
                  ListString(*restore).c_str(), ShapeString(grad).text);
  }
  if (N > int64_t{INT32_MAX}) {
    return c.Fail(StatusCode::kInvalid, "N = %lld rows cannot be indexed by INT32", static_cast<long long>(N));
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(grad.dtype);
  q.weight_dtype = probs != nullptr ? CoreDType(probs->dtype) : q.dtype;
  q.drop_and_pad = a.drop_and_pad;
  q.tokens = T;
  q.experts = E > 0 ? E : 0;
  q.hidden = H;
  q.rows = N;
  q.topk = T > 0 ? N / T : 0;
  q.capacity = E > 0 ? N / E : 0;
  q.grad = Rows2D(grad);
  q.out_index = Flat(out_index);
  q.permute_token_id = Flat(token_id);
  q.permuted_tokens_grad = Rows2D(a.permuted_tokens_grad);
  if (probs != nullptr) {
    q.routing_map = Rows2D(*map);
    q.permuted_tokens = Rows2D(*perm);
    q.probs = Flat(*probs);
    q.probs_grad = Rows2D(*probs_grad);
  }
  return MakePlan<Args>(q, device, plan);
}

}  // namespace moegrad::ops
