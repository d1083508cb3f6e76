#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

void InitRoutingV2Grad(const InitRoutingV2GradArgs& a) {
  const TensorView& g = a.grad_expanded_x;
  const bool mode1 = a.drop_pad_mode == 1;
  const int64_t K = a.top_k;
  const int64_t L = a.expanded_row_idx.sizes[0];
  const int64_t N = L / K;
  const int64_t H = mode1 ? g.sizes[2] : g.sizes[1];
  const int64_t C = mode1 ? g.sizes[1] : 0;
  // Mode 0: the forward materialized rows [0, A), A = min(activeNum, L) when activeNum > 0; mode 1 dropped -1.
  const int64_t A = a.active_num > 0 && a.active_num < L ? a.active_num : L;
  auto skipped = [&](int64_t v) { return mode1 ? v == -1 : v >= A; };

  // out[n][j] = gradExpandedX[v_0][j] + gradExpandedX[v_1][j] + ... over the pairs n*K + k, ascending k, that
  // are not skipped; +0 when every pair is.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < H; ++j) {
      float acc = 0.0f;
      bool first = true;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t v = GetI(a.expanded_row_idx, {n * K + k});
        if (skipped(v)) continue;
        const float x = mode1 ? GetF(g, {v / C, v % C, j}) : GetF(g, {v, j});
        acc = first ? x : acc + x;
        first = false;
      }
      SetF(a.out, {n, j}, acc);
    }
  }
}

}  // namespace moegrad::ref
