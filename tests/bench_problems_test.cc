// The benchmark problems that draw each pair's bias row apart from the routing (bias_experts, moegrad_bench's
// bias-table rows): valid calls whose results match the scalar reference bit for bit, reading exactly
// bias_experts distinct bias rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tools/moegrad/common/problems.h"

namespace moegrad::testing {
namespace {

tool::Shape SmallShape() {
  tool::Shape s;
  s.tokens = 64;
  s.hidden = 48;
  s.experts = 16;
  s.topk = 4;
  return s;
}

template <typename Config>
std::unique_ptr<tool::Problem> Make(int64_t mode, int64_t bias_experts, DType dtype) {
  Config c;
  c.shape = SmallShape();
  c.dtype = dtype;
  c.seed = 77;
  c.mode = mode;
  c.scales = true;
  c.bias = true;
  c.bias_experts = bias_experts;
  return tool::MakeProblem(c);
}

template <typename Config>
void DrawnBiasRows(int64_t mode) {
  const int64_t H = SmallShape().hidden;
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const uint64_t row_bytes = static_cast<uint64_t>(H) * (dtype == DType::kFloat32 ? 4 : 2);
    std::vector<uint64_t> bytes;
    for (const int64_t bias_experts : {1, 2, 4, 16}) {
      const std::unique_ptr<tool::Problem> p = Make<Config>(mode, bias_experts, dtype);
      const std::vector<std::vector<uint8_t>> before = tool::SnapshotOutputs(*p);
      EXPECT_EQ(tool::VerifyRun(*p, p->Call(), before), "") << "bias_experts " << bias_experts;
      bytes.push_back(p->MinBytes());
    }
    // 256 pairs over 1, 2 and 4 rows name every one of them: each more row is one more bias row read. (The same
    // seed gives the same expandedX rows in all three; only expertIdx was drawn again.)
    EXPECT_EQ(bytes[1] - bytes[0], row_bytes);
    EXPECT_EQ(bytes[2] - bytes[1], 2 * row_bytes);
    EXPECT_GT(bytes[3], bytes[2]);
  }
}

TEST(BenchProblems, FinalizeRoutingV2GradBiasRowsDrawnApartFromTheRouting) {
  DrawnBiasRows<tool::FinalizeRoutingV2GradConfig>(0);
}

TEST(BenchProblems, FinalizeRoutingV2BiasRowsDrawnApartFromTheRouting) {
  DrawnBiasRows<tool::FinalizeRoutingV2Config>(2);
}

}  // namespace
}  // namespace moegrad::testing
