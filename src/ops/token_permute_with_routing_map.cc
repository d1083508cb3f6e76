// MoeTokenPermuteWithRoutingMap: every rule of docs/ops/token_permute_with_routing_map.md, and the problem.
#include "src/backend/token_permute_with_routing_map.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {

Status Plan(const TokenPermuteWithRoutingMapArgs& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::TokenPermuteWithRoutingMapProblem;
  const ArgChecker c(Problem::kName, outputs);
  const TensorView* probs = Opt(a.probs);
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(Opt(a.permute_probs), "permuteProbsOut (required with probs)"));
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  const TensorView& tokens = a.tokens;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(tokens, "tokens", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(tokens, "tokens"));
  const int64_t T = tokens.sizes[0];
  const int64_t H = tokens.sizes[1];
  const TensorView& map = a.routing_map;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(map, "routingMap", 2));
  MOEGRAD_RETURN_IF_ERROR(c.Shape(map, "routingMap", {T, -1}));
  MOEGRAD_RETURN_IF_ERROR(c.IndexMapDType(map, "routingMap"));
  const int64_t E = map.sizes[1];
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*probs, "probs", {T, E}));
    MOEGRAD_RETURN_IF_ERROR(c.FloatDType(*probs, "probs"));  // the weight group: its own dtype
  }

  const int64_t n = a.num_out_tokens;
  const int64_t max_out = T * E;  // no overflow: WellFormed bounds routingMap's element count
  if (n < 0 || n > max_out) {
    return c.Fail(StatusCode::kInvalid, "numOutTokens = %lld is outside [0, T*E] = [0, %lld]",
                  static_cast<long long>(n), static_cast<long long>(max_out));
  }
  int64_t K = 0, C = 0;
  if (!a.drop_and_pad && T > 0) {
    if (n % T != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "numOutTokens = %lld is not a multiple of T = %lld; dropless mode outputs T*K rows",
                    static_cast<long long>(n), static_cast<long long>(T));
    }
    K = n / T;
  }
  if (a.drop_and_pad && E > 0) {
    if (n % E != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "numOutTokens = %lld is not a multiple of E = %lld; drop-and-pad mode outputs E*C rows",
                    static_cast<long long>(n), static_cast<long long>(E));
    }
    C = n / E;
  }
  // sortedIndices is INT32: dropless it holds rows [0, N), drop-and-pad tokens [0, T).
  const int64_t largest = a.drop_and_pad ? T - 1 : n - 1;
  if (n > 0 && largest > INT32_MAX) {
    return c.Fail(StatusCode::kInvalid, "sortedIndicesOut would hold %lld, which INT32 cannot represent",
                  static_cast<long long>(largest));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.permute_tokens, "permuteTokensOut", {n, H}, tokens, "tokens",
                                   GroupNames<TokenPermuteWithRoutingMapArgs>(DTypeGroup::kTokens)));
  if (probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Output(Opt(a.permute_probs), "permuteProbsOut", {n}, *probs, "probs",
                                     GroupNames<TokenPermuteWithRoutingMapArgs>(DTypeGroup::kWeights)));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.sorted_indices, "sortedIndicesOut", {n}, DType::kInt32));
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.element_bytes = tokens.element_size();
  q.weight_element_bytes = probs != nullptr ? probs->element_size() : q.element_bytes;
  q.tokens = T;
  q.experts = E;
  q.hidden = H;
  q.out_rows = n;
  q.topk = K;
  q.capacity = C;
  q.drop_and_pad = a.drop_and_pad;
  q.src_tokens = Rows2D(tokens);
  q.map = static_cast<const uint8_t*>(map.data);
  q.map_row_stride = map.strides[0];
  q.map_col_stride = map.strides[1];
  if (probs != nullptr) {
    q.probs = static_cast<const char*>(probs->data);
    q.probs_row_stride = probs->strides[0];
    q.probs_col_stride = probs->strides[1];
    q.dst_probs = Flat(*a.permute_probs);
  }
  q.dst_tokens = Rows2D(a.permute_tokens);
  q.sorted_indices = Flat(a.sorted_indices);
  return MakePlan<TokenPermuteWithRoutingMapArgs>(q, device, plan);
}

}  // namespace moegrad::ops
