#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

void TokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapArgs& a) {
  const TensorView& x = a.permuted_tokens;
  const int64_t N = a.sorted_indices.sizes[0];
  const int64_t T = a.unpermuted_tokens.sizes[0];
  const int64_t H = a.unpermuted_tokens.sizes[1];
  const bool pad = a.padded_mode;
  const bool probs = a.probs.has_value();
  const int64_t E = probs ? a.probs->sizes[1] : a.routing_map ? a.routing_map->sizes[1] : 0;
  const int64_t K = !pad && T > 0 ? N / T : 0;
  const int64_t C = pad && E > 0 ? N / E : 0;

  // The contributions q: token, permuted row and (with probs) expert.
  std::vector<int64_t> tok(static_cast<size_t>(N)), row(static_cast<size_t>(N)), expert(static_cast<size_t>(N));
  for (int64_t q = 0; q < N; ++q) {
    const int64_t v = GetI(a.sorted_indices, {q});
    tok[static_cast<size_t>(q)] = pad ? v : q / K;
    row[static_cast<size_t>(q)] = pad ? q : v;
    expert[static_cast<size_t>(q)] = pad && C > 0 ? q / C : 0;
  }
  if (probs && !pad) {
    // Token t's k-th routed expert (ascending e) is contribution t*K + k.
    for (int64_t t = 0; t < T; ++t) {
      int64_t k = 0;
      for (int64_t e = 0; e < E; ++e) {
        if (GetI(*a.routing_map, {t, e}) != 0) expert[static_cast<size_t>(t * K + k++)] = e;
      }
    }
  }
  auto weight = [&](int64_t q) {
    return probs ? GetF(*a.probs, {tok[static_cast<size_t>(q)], expert[static_cast<size_t>(q)]}) : 1.0f;
  };

  // unpermutedTokens[t] = sum over q with tok(q) == t, ascending q, of w(q) * x[row(q)], from the first term.
  std::vector<float> acc(static_cast<size_t>(T * H), 0.0f);
  std::vector<int64_t> terms(static_cast<size_t>(T), 0);
  for (int64_t q = 0; q < N; ++q) {
    const int64_t t = tok[static_cast<size_t>(q)];
    const float w = weight(q);
    for (int64_t j = 0; j < H; ++j) {
      float& dst = acc[static_cast<size_t>(t * H + j)];
      const float term = w * GetF(x, {row[static_cast<size_t>(q)], j});
      dst = terms[static_cast<size_t>(t)] == 0 ? term : dst + term;
    }
    ++terms[static_cast<size_t>(t)];
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < H; ++j) SetF(a.unpermuted_tokens, {t, j}, acc[static_cast<size_t>(t * H + j)]);
  }

  // outIndex, permuteTokenId: the contributions ordered by token, ties by ascending q.
  std::vector<std::vector<int64_t>> of_token(static_cast<size_t>(T));
  for (int64_t q = 0; q < N; ++q) of_token[static_cast<size_t>(tok[static_cast<size_t>(q)])].push_back(q);
  int64_t i = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t q : of_token[static_cast<size_t>(t)]) {
      SetI(a.out_index, {i}, row[static_cast<size_t>(q)]);
      SetI(a.permute_token_id, {i}, t);
      ++i;
    }
  }
  // permuteProbs[q] = w(q), bit for bit (copied element, same dtype).
  if (probs) {
    for (int64_t q = 0; q < N; ++q) {
      const char* src = ElementPtr(*a.probs, {tok[static_cast<size_t>(q)], expert[static_cast<size_t>(q)]});
      char* dst = ElementPtr(*a.permute_probs, {q});
      for (size_t b = 0; b < a.probs->element_size(); ++b) dst[b] = src[b];
    }
  }
}

}  // namespace moegrad::ref
