#include "tools/moegrad/common/routing.h"

#include <numeric>

namespace moegrad::tool {

Routing RandomRouting(int64_t tokens, int64_t experts, int64_t topk, std::mt19937_64& rng) {
  Routing r;
  r.tokens = tokens;
  r.experts = experts;
  r.topk = topk;
  r.expert.resize(static_cast<size_t>(tokens * topk));
  std::vector<int32_t> ids(static_cast<size_t>(experts));
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    // Partial Fisher-Yates: the first K entries become a uniform random K-subset in random order.
    for (int64_t k = 0; k < topk; ++k) {
      std::uniform_int_distribution<int64_t> pick(k, experts - 1);
      std::swap(ids[static_cast<size_t>(k)], ids[static_cast<size_t>(pick(rng))]);
      r.expert[static_cast<size_t>(t * topk + k)] = ids[static_cast<size_t>(k)];
    }
  }
  return r;
}

std::vector<uint8_t> RoutingMap(const Routing& r) {
  std::vector<uint8_t> map(static_cast<size_t>(r.tokens * r.experts), 0);
  for (int64_t i = 0; i < r.tokens * r.topk; ++i) {
    map[static_cast<size_t>((i / r.topk) * r.experts + r.expert[static_cast<size_t>(i)])] = 1;
  }
  return map;
}

std::vector<int32_t> InitRoutingRowIdx(const Routing& r, int64_t capacity) {
  const int64_t pairs = r.tokens * r.topk;
  std::vector<int64_t> count(static_cast<size_t>(r.experts), 0);
  std::vector<int64_t> position(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) position[static_cast<size_t>(i)] = count[static_cast<size_t>(r.expert[i])]++;
  std::vector<int64_t> start(static_cast<size_t>(r.experts) + 1, 0);
  for (int64_t e = 0; e < r.experts; ++e) start[static_cast<size_t>(e) + 1] = start[e] + count[e];
  std::vector<int32_t> idx(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t e = r.expert[static_cast<size_t>(i)];
    const int64_t p = position[static_cast<size_t>(i)];
    if (capacity > 0) idx[static_cast<size_t>(i)] = static_cast<int32_t>(p < capacity ? e * capacity + p : -1);
    else idx[static_cast<size_t>(i)] = static_cast<int32_t>(start[static_cast<size_t>(e)] + p);
  }
  return idx;
}

std::vector<int32_t> PermuteSortedIndices(const std::vector<uint8_t>& map, int64_t tokens, int64_t experts,
                                          int64_t capacity) {
  auto routed = [&](int64_t t, int64_t e) { return map[static_cast<size_t>(t * experts + e)] != 0; };
  std::vector<int32_t> out;
  if (capacity > 0) {
    out.reserve(static_cast<size_t>(experts * capacity));
    for (int64_t e = 0; e < experts; ++e) {
      int64_t c = 0;
      for (int pass = 0; pass < 2 && c < capacity; ++pass) {
        for (int64_t t = 0; t < tokens && c < capacity; ++t) {
          if (routed(t, e) == (pass == 0)) {
            out.push_back(static_cast<int32_t>(t));
            ++c;
          }
        }
      }
    }
    return out;
  }
  // Row of each routed (t, e) in expert-major order; slots of token t follow its experts in ascending id.
  std::vector<int64_t> row(static_cast<size_t>(tokens * experts), -1);
  int64_t n = 0;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t t = 0; t < tokens; ++t) {
      if (routed(t, e)) row[static_cast<size_t>(t * experts + e)] = n++;
    }
  }
  out.reserve(static_cast<size_t>(n));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) {
      if (routed(t, e)) out.push_back(static_cast<int32_t>(row[static_cast<size_t>(t * experts + e)]));
    }
  }
  return out;
}

}  // namespace moegrad::tool
