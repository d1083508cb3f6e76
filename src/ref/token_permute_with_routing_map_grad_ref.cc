#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

void TokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& a) {
  const int64_t T = a.tokens_num;
  const int64_t E = a.num_experts;
  const int64_t N = a.permuted_token_output_grad.sizes[0];
  const int64_t H = a.permuted_token_output_grad.sizes[1];
  const bool probs = a.permuted_probs_output_grad.has_value();
  const TensorView& g = a.permuted_token_output_grad;

  // tokensGrad[t] = sum of the rows p of g that token t was copied to, ascending p, from the first term.
  std::vector<float> acc(static_cast<size_t>(T * H), 0.0f);
  std::vector<int64_t> terms(static_cast<size_t>(T), 0);
  auto add_row = [&](int64_t t, int64_t p) {
    for (int64_t j = 0; j < H; ++j) {
      float& dst = acc[static_cast<size_t>(t * H + j)];
      const float v = GetF(g, {p, j});
      dst = terms[static_cast<size_t>(t)] == 0 ? v : dst + v;
    }
    ++terms[static_cast<size_t>(t)];
  };

  std::vector<float> pacc(static_cast<size_t>(T * E), 0.0f);
  if (!a.drop_and_pad) {
    // Dropless: slot t*K + k of token t was written to row sortedIndices[t*K + k].
    const int64_t K = N / T;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) add_row(t, GetI(a.sorted_indices, {t * K + k}));
    }
    if (probs) {
      // probsGrad.T.masked_scatter_(routingMap.T, permutedProbsGrad): expert-major walk of the routed entries.
      int64_t c = 0;
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t t = 0; t < T; ++t) {
          if (GetI(*a.routing_map, {t, e}) != 0) {
            pacc[static_cast<size_t>(t * E + e)] = GetF(*a.permuted_probs_output_grad, {c++});
          }
        }
      }
    }
  } else {
    // Drop-and-pad: row p of the permuted output is token sortedIndices[p] under expert p / C.
    const int64_t C = N / E;
    std::vector<int64_t> pterms(static_cast<size_t>(T * E), 0);
    for (int64_t p = 0; p < N; ++p) {
      const int64_t t = GetI(a.sorted_indices, {p});
      add_row(t, p);
      if (probs) {
        const size_t at = static_cast<size_t>(t * E + p / C);
        const float v = GetF(*a.permuted_probs_output_grad, {p});
        pacc[at] = pterms[at] == 0 ? v : pacc[at] + v;
        ++pterms[at];
      }
    }
  }

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < H; ++j) SetF(a.tokens_grad, {t, j}, acc[static_cast<size_t>(t * H + j)]);
  }
  if (probs) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < E; ++e) SetF(*a.probs_grad, {t, e}, pacc[static_cast<size_t>(t * E + e)]);
    }
  }
}

}  // namespace moegrad::ref
