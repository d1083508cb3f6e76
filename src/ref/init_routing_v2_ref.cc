#include <algorithm>
#include <cstring>
#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

// The formulas of the spec taken literally: sort the pairs by (expert, pair), then place every row.
void InitRoutingV2(const InitRoutingV2Args& a) {
  const int64_t N = a.x.sizes[0];
  const int64_t H = a.x.sizes[1];
  const int64_t K = a.expert_idx.sizes[1];
  const int64_t P = N * K;
  const int64_t E = a.expert_num;
  const int64_t C = a.expert_capacity;
  const bool drop_pad = a.drop_pad_mode == 1;
  const size_t bytes = a.x.element_size();
  auto expert = [&](int64_t p) { return GetI(a.expert_idx, {p / K, p % K}); };
  // Row n of x into `dst` (the element pointers of one output row), bit for bit.
  auto copy_row = [&](int64_t n, auto dst) {
    for (int64_t j = 0; j < H; ++j) std::memcpy(dst(j), ElementPtr(a.x, {n, j}), bytes);
  };

  // s: every pair, sorted by its expert, ties by the pair.
  std::vector<int64_t> s(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) s[static_cast<size_t>(p)] = p;
  std::sort(s.begin(), s.end(), [&](int64_t p, int64_t q) {
    return expert(p) != expert(q) ? expert(p) < expert(q) : p < q;
  });
  // cnt(e) (only for a count output, whose E elements exist; E may be anything when unused), and c_p: the
  // pairs q < p of p's expert, which precede p in s.
  const int64_t flag = a.expert_tokens_count_or_cumsum_flag;
  const bool counts = drop_pad ? a.expert_tokens_before_capacity_flag : flag == 1 || flag == 2;
  std::vector<int64_t> cnt(static_cast<size_t>(counts ? E : 0), 0);
  std::vector<int64_t> rank(static_cast<size_t>(P), 0);
  for (int64_t i = 0; i < P; ++i) {
    const int64_t p = s[static_cast<size_t>(i)];
    if (i > 0 && expert(s[static_cast<size_t>(i - 1)]) == expert(p)) {
      rank[static_cast<size_t>(p)] = rank[static_cast<size_t>(s[static_cast<size_t>(i - 1)])] + 1;
    }
    if (counts) ++cnt[static_cast<size_t>(expert(p))];
  }

  if (!drop_pad) {
    const int64_t A = a.active_num > 0 ? std::min(a.active_num, P) : P;
    for (int64_t i = 0; i < P; ++i) {
      const int64_t p = s[static_cast<size_t>(i)];
      SetI(a.expanded_row_idx, {p}, i);
      if (i < A) copy_row(p / K, [&](int64_t j) { return ElementPtr(a.expanded_x, {i, j}); });
    }
    if (counts) {
      int64_t sum = 0;
      for (int64_t e = 0; e < E; ++e) {
        sum += cnt[static_cast<size_t>(e)];
        SetI(*a.expert_tokens_count_or_cumsum, {e}, flag == 1 ? sum : cnt[static_cast<size_t>(e)]);
      }
    }
    return;
  }

  for (int64_t e = 0; e < (H > 0 ? E : 0); ++e) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < H; ++j) std::memset(ElementPtr(a.expanded_x, {e, c, j}), 0, bytes);
    }
  }
  for (int64_t p = 0; p < P; ++p) {
    const int64_t e = expert(p), c = rank[static_cast<size_t>(p)];
    SetI(a.expanded_row_idx, {p}, c < C ? e * C + c : -1);
    if (c < C) copy_row(p / K, [&](int64_t j) { return ElementPtr(a.expanded_x, {e, c, j}); });
  }
  if (counts) {
    for (int64_t e = 0; e < E; ++e) SetI(*a.expert_tokens_before_capacity, {e}, cnt[static_cast<size_t>(e)]);
  }
}

}  // namespace moegrad::ref
