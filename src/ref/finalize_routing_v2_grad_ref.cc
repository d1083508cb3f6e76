#include <vector>

#include "src/ref/ref_util.h"
#include "src/ref/reference.h"

namespace moegrad::ref {

void FinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& a) {
  const int64_t R = a.grad_y.sizes[0];
  const int64_t H = a.grad_y.sizes[1];
  const int64_t pairs = a.expanded_row_idx.sizes[0];
  const int64_t K = a.scales ? a.scales->sizes[1] : (R > 0 ? pairs / R : 0);
  const bool mode1 = a.drop_pad_mode == 1;
  const int64_t C = mode1 ? a.expert_capacity : 0;
  const int64_t rows = mode1 ? a.expert_num * a.expert_capacity : a.grad_expanded_x.sizes[0];
  auto out_row = [&](int64_t v, int64_t j, float value) {
    if (mode1) SetF(a.grad_expanded_x, {v / C, v % C, j}, value);
    else SetF(a.grad_expanded_x, {v, j}, value);
  };
  auto x_at = [&](int64_t v, int64_t j) {
    return mode1 ? GetF(*a.expanded_x, {v / C, v % C, j}) : GetF(*a.expanded_x, {v, j});
  };

  // gradExpandedX[v] = sum over pairs i with expandedRowIdx[i] == v (ascending i) of gradY[i/K] * s_i.
  std::vector<float> acc(static_cast<size_t>(rows * H), 0.0f);
  std::vector<int64_t> writers(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t v = GetI(a.expanded_row_idx, {i});
    if (v < 0 || v >= rows) continue;  // dropped
    const float s = a.scales ? GetF(*a.scales, {i / K, i % K}) : 1.0f;
    for (int64_t j = 0; j < H; ++j) {
      const float product = GetF(a.grad_y, {i / K, j}) * s;
      float& dst = acc[static_cast<size_t>(v * H + j)];
      dst = writers[static_cast<size_t>(v)] == 0 ? product : dst + product;
    }
    ++writers[static_cast<size_t>(v)];
  }
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < H; ++j) out_row(v, j, acc[static_cast<size_t>(v * H + j)]);
  }

  if (!a.scales) return;
  // gradScales[i] = sum_j u_i[j] * gradY[i/K][j] over the terms the forward has: u_i = x_i + b_i, x_i alone
  // without bias, b_i alone for a dropped pair. A dropped pair without bias has no term: exactly +0, whatever
  // gradY holds (no 0 * Inf).
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t v = GetI(a.expanded_row_idx, {i});
    const bool dropped = v < 0 || v >= rows;
    const int64_t e = a.bias ? GetI(*a.expert_idx, {i / K, i % K}) : 0;
    float sum = 0.0f;
    if (!dropped || a.bias) {
      for (int64_t j = 0; j < H; ++j) {
        float u;
        if (dropped) u = GetF(*a.bias, {e, j});
        else u = a.bias ? x_at(v, j) + GetF(*a.bias, {e, j}) : x_at(v, j);
        sum += u * GetF(a.grad_y, {i / K, j});
      }
    }
    SetF(*a.grad_scales, {i / K, i % K}, sum);
  }
}

}  // namespace moegrad::ref
