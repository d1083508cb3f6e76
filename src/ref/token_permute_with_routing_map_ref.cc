#include <algorithm>
#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

// The formulas of the spec taken literally: build the expert-major token list, argsort it stably, gather.
void TokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& a) {
  const int64_t T = a.tokens.sizes[0];
  const int64_t H = a.tokens.sizes[1];
  const int64_t E = a.routing_map.sizes[1];
  const int64_t N = a.num_out_tokens;
  auto routed = [&](int64_t t, int64_t e) { return GetI(a.routing_map, {t, e}) != 0; };
  // A float element copied as it is (bits through fp32 are exact for every float dtype except NaN
  // payloads, which the tests do not use).
  auto copy = [](const TensorView& src, std::initializer_list<int64_t> si, const TensorView& dst,
                 std::initializer_list<int64_t> di) { SetF(dst, di, GetF(src, si)); };

  if (!a.drop_and_pad) {
    const int64_t K = T > 0 ? N / T : 0;
    // first = arange(T).expand(E, T).masked_select(routingMap.T); the expert of each entry alongside.
    std::vector<int64_t> first, expert;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t t = 0; t < T; ++t) {
        if (routed(t, e)) {
          first.push_back(t);
          expert.push_back(e);
        }
      }
    }
    std::vector<int64_t> order(first.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return first[x] < first[y]; });
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = order[static_cast<size_t>(i)];
      SetI(a.sorted_indices, {i}, row);
      for (int64_t j = 0; j < H; ++j) copy(a.tokens, {i / K, j}, a.permute_tokens, {row, j});
    }
    if (a.probs) {
      for (int64_t q = 0; q < N; ++q) {
        copy(*a.probs, {first[static_cast<size_t>(q)], expert[static_cast<size_t>(q)]}, *a.permute_probs, {q});
      }
    }
    return;
  }

  const int64_t C = E > 0 ? N / E : 0;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> list;
    for (int64_t t = 0; t < T; ++t) {
      if (routed(t, e)) list.push_back(t);
    }
    for (int64_t t = 0; t < T; ++t) {
      if (!routed(t, e)) list.push_back(t);
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t q = e * C + c;
      const int64_t t = list[static_cast<size_t>(c)];
      SetI(a.sorted_indices, {q}, t);
      for (int64_t j = 0; j < H; ++j) copy(a.tokens, {t, j}, a.permute_tokens, {q, j});
      if (a.probs) copy(*a.probs, {t, e}, *a.permute_probs, {q});
    }
  }
}

}  // namespace moegrad::ref
