#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

void TokenUnpermuteWithRoutingMapGrad(const TokenUnpermuteWithRoutingMapGradArgs& a) {
  const TensorView& g = a.unpermuted_tokens_grad;
  const int64_t T = g.sizes[0];
  const int64_t H = g.sizes[1];
  const int64_t N = a.out_index.sizes[0];
  const bool probs = a.probs.has_value();
  const int64_t E = probs ? a.probs->sizes[1] : 0;
  const int64_t K = T > 0 ? N / T : 0;
  const int64_t C = E > 0 ? N / E : 0;

  // The pairs: row, token and expert of each (the expert only with probs).
  std::vector<int64_t> row(static_cast<size_t>(N)), tok(static_cast<size_t>(N)), exp(static_cast<size_t>(N), 0);
  for (int64_t i = 0; i < N; ++i) {
    row[static_cast<size_t>(i)] = GetI(a.out_index, {i});
    tok[static_cast<size_t>(i)] = a.drop_and_pad ? GetI(a.permute_token_id, {i}) : i / K;
    if (probs && a.drop_and_pad) exp[static_cast<size_t>(i)] = row[static_cast<size_t>(i)] / C;
  }
  if (probs && !a.drop_and_pad) {
    // Token t's k-th routed expert, ascending e.
    for (int64_t t = 0; t < T; ++t) {
      int64_t k = 0;
      for (int64_t e = 0; e < E; ++e) {
        if (GetI(*a.routing_map, {t, e}) != 0) exp[static_cast<size_t>(t * K + k++)] = e;
      }
    }
  }
  auto weight = [&](int64_t i) {
    return probs ? GetF(*a.probs, {tok[static_cast<size_t>(i)], exp[static_cast<size_t>(i)]}) : 1.0f;
  };

  // permutedTokensGrad[r] = sum over pairs i with r_i == r, ascending i, of v_i * g[t_i], from the first term.
  std::vector<float> acc(static_cast<size_t>(N * H), 0.0f);
  std::vector<int64_t> terms(static_cast<size_t>(N), 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = row[static_cast<size_t>(i)];
    const float v = weight(i);
    for (int64_t j = 0; j < H; ++j) {
      const float product = v * GetF(g, {tok[static_cast<size_t>(i)], j});
      float& dst = acc[static_cast<size_t>(r * H + j)];
      dst = terms[static_cast<size_t>(r)] == 0 ? product : dst + product;
    }
    ++terms[static_cast<size_t>(r)];
  }
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < H; ++j) SetF(a.permuted_tokens_grad, {r, j}, acc[static_cast<size_t>(r * H + j)]);
  }
  if (!probs) return;

  // probsGrad[t][e] = sum over pairs i with (t_i, e_i) == (t, e), ascending i, of d_i.
  std::vector<float> pacc(static_cast<size_t>(T * E), 0.0f);
  std::vector<int64_t> pterms(static_cast<size_t>(T * E), 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = row[static_cast<size_t>(i)];
    const int64_t t = tok[static_cast<size_t>(i)];
    const float d = CanonicalDot(
        H, [&](int64_t j) { return GetF(*a.permuted_tokens, {r, j}); }, [&](int64_t j) { return GetF(g, {t, j}); });
    const size_t at = static_cast<size_t>(t * E + exp[static_cast<size_t>(i)]);
    pacc[at] = pterms[at] == 0 ? d : pacc[at] + d;
    ++pterms[at];
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) SetF(*a.probs_grad, {t, e}, pacc[static_cast<size_t>(t * E + e)]);
  }
}

}  // namespace moegrad::ref
