// MoeTokenUnpermuteWithRoutingMap: every rule of docs/ops/token_unpermute_with_routing_map.md, in the order of
// its error table, and the problem.
#include <string>

#include "src/backend/token_unpermute_with_routing_map.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {
namespace {

using Args = TokenUnpermuteWithRoutingMapArgs;

// "(4, 7)" for an integer array, as ShapeString prints a shape.
std::string ArrayString(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

long long L(int64_t v) { return static_cast<long long>(v); }

}  // namespace

Status Plan(const Args& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::TokenUnpermuteWithRoutingMapProblem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* probs = Opt(a.probs);
  const TensorView* map = Opt(a.routing_map);
  const std::vector<int64_t>* restore = a.restore_shape ? &*a.restore_shape : nullptr;
  const bool pad = a.padded_mode;
  if (probs == nullptr && restore == nullptr) {
    return c.Fail(StatusCode::kNullptr, "restoreShapeOptional is required when probsOptional is null");
  }
  if (probs != nullptr) {
    if (!pad) {
      MOEGRAD_RETURN_IF_ERROR(
          c.Required(map, "routingMapOptional (required with probsOptional when paddedMode is false)"));
    }
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(Opt(a.permute_probs), "permuteProbs (required with probsOptional)"));
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  // Ranks, in the order of the tensors.
  const TensorView& x = a.permuted_tokens;
  const TensorView& idx = a.sorted_indices;
  const TensorView* out = c.Given(&a.unpermuted_tokens);
  const TensorView* out_index = c.Given(&a.out_index);
  const TensorView* token_id = c.Given(&a.permute_token_id);
  const TensorView* out_probs = probs != nullptr ? c.Given(Opt(a.permute_probs)) : nullptr;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(x, "permutedTokens", 2));
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "sortedIndices", 1));
  if (map != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*map, "routingMapOptional", 2));
  if (probs != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*probs, "probsOptional", 2));
  if (out != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*out, "unpermutedTokens", 2));
  if (out_index != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*out_index, "outIndex", 1));
  if (token_id != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*token_id, "permuteTokenId", 1));
  if (out_probs != nullptr) MOEGRAD_RETURN_IF_ERROR(c.Rank(*out_probs, "permuteProbs", 1));

  // Dtypes: each group's first tensor any float dtype, the rest of the group the same.
  const char* tokens_group = GroupNames<Args>(DTypeGroup::kTokens);
  const char* weights_group = GroupNames<Args>(DTypeGroup::kWeights);
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(x, "permutedTokens"));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "sortedIndices", DType::kInt32));
  if (map != nullptr) MOEGRAD_RETURN_IF_ERROR(c.IndexMapDType(*map, "routingMapOptional"));
  if (probs != nullptr) MOEGRAD_RETURN_IF_ERROR(c.FloatDType(*probs, "probsOptional"));
  if (out != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*out, "unpermutedTokens", x, "permutedTokens", tokens_group));
  }
  if (out_index != nullptr) MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*out_index, "outIndex", DType::kInt32));
  if (token_id != nullptr) MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*token_id, "permuteTokenId", DType::kInt32));
  if (out_probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*out_probs, "permuteProbs", *probs, "probsOptional", weights_group));
  }

  // N, H and T agree everywhere.
  const int64_t N = idx.sizes[0];
  const int64_t H = x.sizes[1];
  if (x.sizes[0] != N) {
    return c.Fail(StatusCode::kInvalid, "permutedTokens has %lld rows but sortedIndices has %lld", L(x.sizes[0]),
                  L(N));
  }
  const struct {
    const TensorView* t;
    const char* name;
  } flats[] = {{out_index, "outIndex"}, {token_id, "permuteTokenId"}, {out_probs, "permuteProbs"}};
  for (const auto& f : flats) {
    if (f.t != nullptr && f.t->sizes[0] != N) {
      return c.Fail(StatusCode::kInvalid, "%s has %lld rows but sortedIndices has %lld", f.name, L(f.t->sizes[0]),
                    L(N));
    }
  }
  // T: the rows of probs, else of routingMap, which unpermutedTokens then has too; without either, those of
  // unpermutedTokens (an output query: restoreShape's first value). H: the columns of permutedTokens.
  const TensorView* t_from = probs != nullptr ? probs : map;
  const char* t_name = probs != nullptr ? "probsOptional" : "routingMapOptional";
  int64_t T = 0;
  if (t_from != nullptr) {
    T = t_from->sizes[0];
    if (map != nullptr && map != t_from && map->sizes[0] != T) {
      return c.Fail(StatusCode::kInvalid, "routingMapOptional has %lld rows but probsOptional has %lld",
                    L(map->sizes[0]), L(T));
    }
    if (out != nullptr && out->sizes[0] != T) {
      return c.Fail(StatusCode::kInvalid, "unpermutedTokens has %lld rows but %s has %lld", L(out->sizes[0]),
                    t_name, L(T));
    }
  } else if (out != nullptr) {
    T = out->sizes[0];
  } else {
    // An output query without probs: restoreShape (required there) is the shape.
    if (restore->size() != 2 || (*restore)[0] < 0 || (*restore)[1] < 0) {
      return c.Fail(StatusCode::kInvalid, "restoreShapeOptional is %s but must be (T, H) with T, H >= 0",
                    ArrayString(*restore).c_str());
    }
    T = (*restore)[0];
  }
  if (out != nullptr && out->sizes[1] != H) {
    return c.Fail(StatusCode::kInvalid, "unpermutedTokens has %lld columns but permutedTokens has %lld",
                  L(out->sizes[1]), L(H));
  }
  if (map != nullptr && probs != nullptr && map->sizes[1] != probs->sizes[1]) {
    return c.Fail(StatusCode::kInvalid, "routingMapOptional has shape %s but probsOptional has shape %s",
                  ShapeString(*map).text, ShapeString(*probs).text);
  }

  // K (dropless) and C (pad, E known).
  const int64_t E = probs != nullptr ? probs->sizes[1] : map != nullptr ? map->sizes[1] : 0;
  int64_t K = 0, C = 0;
  if (!pad) {
    if (T == 0 && N != 0) {
      return c.Fail(StatusCode::kInvalid, "permutedTokens has %lld rows but T = 0 (paddedMode false: N = T*K)",
                    L(N));
    }
    if (T > 0 && N % T != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "permutedTokens has %lld rows, not a multiple of T = %lld (paddedMode false: N = T*K)", L(N),
                    L(T));
    }
    K = T > 0 ? N / T : 0;
  } else if (probs != nullptr || map != nullptr) {
    if (E == 0 && N != 0) {
      return c.Fail(StatusCode::kInvalid, "permutedTokens has %lld rows but E = 0 (paddedMode true: N = E*C)",
                    L(N));
    }
    if (E > 0 && N % E != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "permutedTokens has %lld rows, not a multiple of E = %lld (paddedMode true: N = E*C)", L(N),
                    L(E));
    }
    C = E > 0 ? N / E : 0;
  }
  // restoreShape, when given, is unpermutedTokens' (T, H).
  if (restore != nullptr && (restore->size() != 2 || (*restore)[0] != T || (*restore)[1] != H)) {
    return c.Fail(StatusCode::kInvalid, "restoreShapeOptional is %s but unpermutedTokens is %s",
                  ArrayString(*restore).c_str(), ShapeString({T, H}).text);
  }
  if (N > INT32_MAX) return c.Fail(StatusCode::kInvalid, "N = %lld rows cannot be indexed by INT32", L(N));

  MOEGRAD_RETURN_IF_ERROR(c.Output(out, "unpermutedTokens", {T, H}, x, "permutedTokens", tokens_group));
  MOEGRAD_RETURN_IF_ERROR(c.Output(out_index, "outIndex", {N}, DType::kInt32));
  MOEGRAD_RETURN_IF_ERROR(c.Output(token_id, "permuteTokenId", {N}, DType::kInt32));
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Output(out_probs, "permuteProbs", {N}, *probs, "probsOptional", weights_group));
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.dtype = CoreDType(x.dtype);
  q.weight_dtype = probs != nullptr ? CoreDType(probs->dtype) : q.dtype;
  q.padded_mode = pad;
  q.tokens = T;
  q.experts = E;
  q.hidden = H;
  q.rows = N;
  q.topk = K;
  q.capacity = C;
  q.permuted = Rows2D(x);
  q.sorted_indices = Flat(idx);
  if (map != nullptr) q.routing_map = Rows2D(*map);
  if (probs != nullptr) {
    q.probs = Rows2D(*probs);
    q.permute_probs = Flat(*out_probs);
  }
  q.unpermuted = Rows2D(*out);
  q.out_index = Flat(*out_index);
  q.permute_token_id = Flat(*token_id);
  return MakePlan<Args>(q, device, plan);
}

}  // namespace moegrad::ops
