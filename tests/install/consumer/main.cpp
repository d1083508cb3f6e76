// Uses the C++ API of an installed moegrad (found with find_package, linked as moegrad::moegrad), checks
// one small MoeFinalizeRoutingV2Grad call against plain loops over its formulas, and a bad call's Status.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "moegrad/ops.hpp"

int main() {
  constexpr int64_t R = 2, K = 2, H = 3;
  std::vector<float> grad_y = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -1.0f};
  std::vector<int32_t> row_idx = {1, 3, 0, 2};
  std::vector<float> expanded_x = {0.5f, 1.0f, -1.5f, 2.0f, 0.0f, 1.0f, -0.5f, 0.25f, 4.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> scales = {0.5f, 0.25f, 2.0f, -1.0f};
  std::vector<float> grad_x(R * K * H, -7.0f), grad_scales(R * K, -7.0f);

  moegrad::FinalizeRoutingV2GradArgs args;
  args.grad_y = moegrad::TensorView(grad_y.data(), moegrad::DType::kFloat32, {R, H});
  args.expanded_row_idx = moegrad::TensorView(row_idx.data(), moegrad::DType::kInt32, {R * K});
  args.expanded_x = moegrad::TensorView(expanded_x.data(), moegrad::DType::kFloat32, {R * K, H});
  args.scales = moegrad::TensorView(scales.data(), moegrad::DType::kFloat32, {R, K});
  args.grad_expanded_x = moegrad::TensorView(grad_x.data(), moegrad::DType::kFloat32, {R * K, H});
  args.grad_scales = moegrad::TensorView(grad_scales.data(), moegrad::DType::kFloat32, {R, K});
  const moegrad::Status status = moegrad::FinalizeRoutingV2Grad(args);
  if (!status.ok()) {
    std::printf("FinalizeRoutingV2Grad failed: %s\nRESULT: FAIL\n", status.message().c_str());
    return 1;
  }

  bool ok = true;
  for (int64_t i = 0; i < R * K; ++i) {
    const int64_t v = row_idx[i], r = i / K;
    double dot = 0.0;
    for (int64_t j = 0; j < H; ++j) {
      ok = ok && grad_x[v * H + j] == grad_y[r * H + j] * scales[i];
      dot += static_cast<double>(expanded_x[v * H + j]) * grad_y[r * H + j];
    }
    ok = ok && std::fabs(grad_scales[i] - dot) <= 1e-6 * (1.0 + std::fabs(dot));
    std::printf("gradScales[%ld] = %f (expected %f)\n", static_cast<long>(i), grad_scales[i], dot);
  }

  args.drop_pad_mode = 5;  // invalid: a Status, nothing written
  const std::vector<float> before = grad_x;
  const moegrad::Status bad = moegrad::FinalizeRoutingV2Grad(args);
  ok = ok && bad.code() == moegrad::StatusCode::kInvalid && !bad.message().empty() && grad_x == before;
  std::printf("moegrad %s, SIMD target %s; invalid call: %s\n", moegrad::Version(), moegrad::SimdTarget(),
              bad.message().c_str());
  std::printf("RESULT: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
