#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

// out[r][j] = x1 + x2 + sum_k s_rk * (x_rk + b_rk), one fp32 left fold over the present terms in that
// order (a dropped pair without bias is no term at all; an absent x or b is left out, not added as 0).
void FinalizeRoutingV2(const FinalizeRoutingV2Args& a) {
  const int64_t R = a.out.sizes[0];
  const int64_t H = a.out.sizes[1];
  const int64_t pairs = a.expanded_row_idx.sizes[0];
  const int64_t K = a.scales ? a.scales->sizes[1] : (R > 0 ? pairs / R : 0);
  const int64_t mode = a.drop_pad_mode;
  const bool drop_pad = mode == 1 || mode == 3;
  const int64_t C = drop_pad ? a.expanded_x.sizes[1] : 0;
  auto x_at = [&](int64_t v, int64_t j) {
    return drop_pad ? GetF(a.expanded_x, {v / C, v % C, j}) : GetF(a.expanded_x, {v, j});
  };
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < H; ++j) {
      bool first = true;
      float acc = 0.0f;
      auto add = [&](float term) {
        acc = first ? term : acc + term;
        first = false;
      };
      if (a.x1) add(GetF(*a.x1, {r, j}));
      if (a.x2) add(GetF(*a.x2, {r, j}));
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = (mode == 0 || mode == 1) ? k * R + r : r * K + k;
        const int64_t v = GetI(a.expanded_row_idx, {p});
        const bool dropped = v == -1;
        if (dropped && !a.bias) continue;
        float u;
        if (a.bias) {
          const float b = GetF(*a.bias, {GetI(*a.expert_idx, {r, k}), j});
          u = dropped ? b : x_at(v, j) + b;
        } else {
          u = x_at(v, j);
        }
        const float s = a.scales ? GetF(*a.scales, {r, k}) : 1.0f;
        add(u * s);
      }
      SetF(a.out, {r, j}, acc);
    }
  }
}

}  // namespace moegrad::ref
