// Tensors past 2^31 elements (320000 x 7168 BFLOAT16, 4.6 GB each) through the gradient operators and
// MoeInitRoutingV2: element
// offsets must be 64-bit everywhere. Each case holds at most two such tensors (about 9.2 GB) and frees them
// before the next; broadcast (stride-0) inputs stand in for a third. Values are checked on sampled rows, on
// the rows around element 2^31 and on the last rows, against the formulas evaluated here directly.
// Label "large": not part of the default test run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
#include "src/testing/float16.h"
#include "tests/support/api.h"

namespace moegrad {
namespace {

constexpr int64_t kRows = 320000, kH = 7168;  // kRows * kH = 2293760000 > 2^31
static_assert(kRows * kH > (int64_t{1} << 31), "the point of this file");

// Zero-filled BFLOAT16 storage straight from the kernel (calloc of this size maps fresh zero pages, so an
// output row the operator fails to write reads as zero rather than as leftovers).
struct Bf16Buffer {
  explicit Bf16Buffer(int64_t n) : data(static_cast<uint16_t*>(std::calloc(static_cast<size_t>(n), 2))) {}
  ~Bf16Buffer() { std::free(data); }
  uint16_t* data;
};

// A pseudo-random normal BFLOAT16 value of magnitude in [0.5, 32), either sign, from its flat index.
inline uint16_t Pattern(uint64_t i, uint64_t salt) {
  uint64_t h = (i + salt) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  const uint16_t sign = static_cast<uint16_t>((h >> 40) & 1u) << 15;
  const uint16_t exp = static_cast<uint16_t>(126 + (h >> 41) % 6);
  return static_cast<uint16_t>(sign | (exp << 7) | (h & 0x7f));
}

void FillPattern(uint16_t* p, int64_t n, uint64_t salt) {
  const int parts = 2;
  std::vector<std::thread> threads;
  for (int w = 0; w < parts; ++w) {
    threads.emplace_back([=] {
      for (int64_t i = n * w / parts; i < n * (w + 1) / parts; ++i) p[i] = Pattern(static_cast<uint64_t>(i), salt);
    });
  }
  for (auto& t : threads) t.join();
}

float Bf(uint16_t bits) { return F32FromBF16Bits(bits); }

// Rows to check: a random sample, the rows around flat element 2^31 and the last rows.
std::vector<int64_t> SampleRows(int64_t rows, int64_t h) {
  std::vector<int64_t> out;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) out.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
  const int64_t boundary = (int64_t{1} << 31) / h;
  for (int64_t r = boundary - 2; r <= boundary + 2; ++r) out.push_back(r);
  for (int64_t r = rows - 3; r < rows; ++r) out.push_back(r);
  out.push_back(0);
  return out;
}

TensorView Bf16View(void* data, int64_t rows, int64_t row_stride) {
  return TensorView(data, DType::kBFloat16, {rows, kH}, {row_stride, 1});
}

// Mode 0, K = 1, with scales: gradY and gradExpandedX real, expandedX one broadcast row.
TEST(LargeTensors, FinalizeRoutingV2GradDroplessWithScales) {
  auto grad_y = std::make_unique<Bf16Buffer>(kRows * kH);
  auto grad_x = std::make_unique<Bf16Buffer>(kRows * kH);
  ASSERT_TRUE(grad_y->data && grad_x->data) << "needs about 9.2 GB of memory";
  FillPattern(grad_y->data, kRows * kH, 1);
  std::vector<uint16_t> x_row(kH), scales(kRows), grad_scales(kRows, 0xffff);
  std::vector<int32_t> idx(kRows);
  for (int64_t j = 0; j < kH; ++j) x_row[j] = Pattern(j, 2);
  for (int64_t i = 0; i < kRows; ++i) {
    scales[i] = Pattern(i, 3);
    idx[i] = static_cast<int32_t>(kRows - 1 - i);  // reversed: the first pair writes the last row
  }
  FinalizeRoutingV2GradArgs a;
  a.grad_y = Bf16View(grad_y->data, kRows, kH);
  a.expanded_row_idx = TensorView(idx.data(), DType::kInt32, {kRows});
  a.expanded_x = Bf16View(x_row.data(), kRows, 0);
  a.scales = TensorView(scales.data(), DType::kBFloat16, {kRows, 1});
  a.grad_expanded_x = Bf16View(grad_x->data, kRows, kH);
  a.grad_scales = TensorView(grad_scales.data(), DType::kBFloat16, {kRows, 1});
  const Status s = FinalizeRoutingV2Grad(a);
  ASSERT_TRUE(s.ok()) << s.message();

  for (int64_t v : SampleRows(kRows, kH)) {
    const int64_t i = kRows - 1 - v;
    const float sc = Bf(scales[i]);
    double dot = 0.0, mag = 0.0;
    for (int64_t j = 0; j < kH; ++j) {
      const float g = Bf(grad_y->data[i * kH + j]);
      ASSERT_EQ(grad_x->data[v * kH + j], BF16BitsFromF32(g * sc)) << "gradExpandedX[" << v << "][" << j << "]";
      dot += static_cast<double>(Bf(x_row[j])) * g;
      mag += std::fabs(static_cast<double>(Bf(x_row[j])) * g);
    }
    // A dot product: fp32 summation error, plus one bf16 rounding.
    const double got = Bf(grad_scales[i]);
    EXPECT_NEAR(got, dot, std::fabs(dot) / 128 + mag * kH * 0x1p-24) << "gradScales[" << i << "]";
  }
}

// Mode 1 (E, C, H) output past 2^31 elements, every 97th pair dropped: its row must be zero. gradY is one
// broadcast row, so only the output is large.
TEST(LargeTensors, FinalizeRoutingV2GradDropPadThreeDimensional) {
  const int64_t E = 64, C = kRows / E;
  auto grad_x = std::make_unique<Bf16Buffer>(E * C * kH);
  ASSERT_TRUE(grad_x->data) << "needs about 4.6 GB of memory";
  FillPattern(grad_x->data, E * C * kH, 4);  // stale values: every row must be overwritten
  std::vector<uint16_t> gy_row(kH), scales(kRows);
  std::vector<int32_t> idx(kRows);
  for (int64_t j = 0; j < kH; ++j) gy_row[j] = Pattern(j, 5);
  for (int64_t i = 0; i < kRows; ++i) {
    scales[i] = Pattern(i, 6);
    idx[i] = i % 97 == 0 ? -1 : static_cast<int32_t>((i * 7919) % kRows);
  }
  FinalizeRoutingV2GradArgs a;
  a.grad_y = Bf16View(gy_row.data(), kRows, 0);
  a.expanded_row_idx = TensorView(idx.data(), DType::kInt32, {kRows});
  a.drop_pad_mode = 1;
  a.expert_num = E;
  a.expert_capacity = C;
  a.grad_expanded_x = TensorView(grad_x->data, DType::kBFloat16, {E, C, kH});
  // No scales: gradExpandedX[v] = gradY[i] exactly. With scales the product is checked above.
  const Status s = FinalizeRoutingV2Grad(a);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<int64_t> writer(kRows, -1);
  for (int64_t i = 0; i < kRows; ++i) {
    if (idx[i] >= 0) writer[idx[i]] = i;
  }
  std::vector<int64_t> rows = SampleRows(kRows, kH);
  for (int64_t i = 0; i < 2000; i += 97) rows.push_back((i * 7919) % kRows);  // dropped pairs' rows
  for (int64_t v : rows) {
    for (int64_t j = 0; j < kH; ++j) {
      const uint16_t want = writer[v] < 0 ? 0 : gy_row[j];
      ASSERT_EQ(grad_x->data[v * kH + j], want) << "gradExpandedX row " << v << " (" << v / C << ", " << v % C
                                                << ") column " << j;
    }
  }
}

using testing::AclTensorPtr;

AclTensorPtr MakeAcl(std::vector<int64_t> dims, std::vector<int64_t> strides, aclDataType dt, int64_t storage,
                     void* data) {
  return AclTensorPtr(aclCreateTensor(dims.data(), dims.size(), dt, strides.data(), 0, ACL_FORMAT_ND, &storage, 1,
                                      data));
}

// Dropless, K = 1, with probs, through aclnn: tokensGrad[t] = grad[sortedIndices[t]].
TEST(LargeTensors, TokenPermuteWithRoutingMapGradDroplessThroughAclnn) {
  const int64_t T = kRows, E = 8, N = T;
  auto grad = std::make_unique<Bf16Buffer>(N * kH);
  auto tokens_grad = std::make_unique<Bf16Buffer>(T * kH);
  ASSERT_TRUE(grad->data && tokens_grad->data) << "needs about 9.2 GB of memory";
  FillPattern(grad->data, N * kH, 7);
  std::vector<int32_t> sorted(N);
  std::vector<int8_t> map(T * E, 0);
  std::vector<uint16_t> probs_in(N), probs_grad(T * E, 0xffff);
  for (int64_t t = 0; t < T; ++t) {
    sorted[t] = static_cast<int32_t>((t * 7919) % N);
    map[t * E + t % E] = 1;
  }
  for (int64_t p = 0; p < N; ++p) probs_in[p] = Pattern(p, 8);
  auto g = MakeAcl({N, kH}, {kH, 1}, ACL_BF16, N * kH, grad->data);
  auto pin = MakeAcl({N}, {1}, ACL_BF16, N, probs_in.data());
  auto si = MakeAcl({N}, {1}, ACL_INT32, N, sorted.data());
  auto rm = MakeAcl({T, E}, {E, 1}, ACL_INT8, T * E, map.data());
  auto tg = MakeAcl({T, kH}, {kH, 1}, ACL_BF16, T * kH, tokens_grad->data);
  auto pg = MakeAcl({T, E}, {E, 1}, ACL_BF16, T * E, probs_grad.data());
  ASSERT_TRUE(g && pin && si && rm && tg && pg) << aclGetRecentErrMsg();
  uint64_t ws_size = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(g.get(), pin.get(), si.get(), rm.get(), E, T,
                                                                   false, tg.get(), pg.get(), &ws_size, &executor),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  void* ws = nullptr;
  if (ws_size > 0) {
    ASSERT_EQ(aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  }
  ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGrad(ws, ws_size, executor, nullptr), ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  if (ws != nullptr) aclrtFree(ws);

  for (int64_t t : SampleRows(T, kH)) {
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(tokens_grad->data[t * kH + j], grad->data[sorted[t] * kH + j]) << "tokensGrad[" << t << "][" << j << "]";
    }
  }
  // probsGrad, all of it: expert e's routed tokens are t = e, e + E, ... in expert-major order.
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      const uint16_t want = e == t % E ? probs_in[e * (T / E) + t / E] : 0;
      ASSERT_EQ(probs_grad[t * E + e], want) << "probsGrad[" << t << "][" << e << "]";
    }
  }
}

// Drop-and-pad with E = 2 and C = T: each token gathers rows t and T + t of a broadcast gradient, so
// tokensGrad[t] = rne(g + g) = 2g exactly; only the output is large.
TEST(LargeTensors, TokenPermuteWithRoutingMapGradDropAndPadBroadcastInput) {
  const int64_t T = kRows, E = 2, C = T, N = E * C;
  auto tokens_grad = std::make_unique<Bf16Buffer>(T * kH);
  ASSERT_TRUE(tokens_grad->data) << "needs about 4.6 GB of memory";
  FillPattern(tokens_grad->data, T * kH, 9);  // stale values: every row must be overwritten
  std::vector<uint16_t> g_row(kH);
  std::vector<int32_t> sorted(N);
  for (int64_t j = 0; j < kH; ++j) g_row[j] = Pattern(j, 10);
  for (int64_t p = 0; p < N; ++p) sorted[p] = static_cast<int32_t>(p % T);
  TokenPermuteWithRoutingMapGradArgs a;
  a.permuted_token_output_grad = Bf16View(g_row.data(), N, 0);
  a.sorted_indices = TensorView(sorted.data(), DType::kInt32, {N});
  a.num_experts = E;
  a.tokens_num = T;
  a.drop_and_pad = true;
  a.tokens_grad = Bf16View(tokens_grad->data, T, kH);
  const Status s = TokenPermuteWithRoutingMapGrad(a);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t t : SampleRows(T, kH)) {
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(tokens_grad->data[t * kH + j], BF16BitsFromF32(Bf(g_row[j]) + Bf(g_row[j])))
          << "tokensGrad[" << t << "][" << j << "]";
    }
  }
}

// Mode 0, K = 1, through aclnn: out[n] = gradExpandedX[expandedRowIdx[n]], a permutation of the rows.
TEST(LargeTensors, InitRoutingV2GradDroplessThroughAclnn) {
  const int64_t N = kRows;
  auto grad = std::make_unique<Bf16Buffer>(N * kH);
  auto out = std::make_unique<Bf16Buffer>(N * kH);
  ASSERT_TRUE(grad->data && out->data) << "needs about 9.2 GB of memory";
  FillPattern(grad->data, N * kH, 11);
  std::vector<int32_t> idx(N);
  for (int64_t n = 0; n < N; ++n) idx[n] = static_cast<int32_t>((n * 7919) % N);
  auto g = MakeAcl({N, kH}, {kH, 1}, ACL_BF16, N * kH, grad->data);
  auto ri = MakeAcl({N}, {1}, ACL_INT32, N, idx.data());
  auto o = MakeAcl({N, kH}, {kH, 1}, ACL_BF16, N * kH, out->data);
  ASSERT_TRUE(g && ri && o) << aclGetRecentErrMsg();
  uint64_t ws_size = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(aclnnMoeInitRoutingV2GradGetWorkspaceSize(g.get(), ri.get(), 1, 0, 0, o.get(), &ws_size, &executor),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  void* ws = nullptr;
  if (ws_size > 0) {
    ASSERT_EQ(aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  }
  ASSERT_EQ(aclnnMoeInitRoutingV2Grad(ws, ws_size, executor, nullptr), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  if (ws != nullptr) aclrtFree(ws);
  for (int64_t n : SampleRows(N, kH)) {
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(out->data[n * kH + j], grad->data[idx[n] * kH + j]) << "out[" << n << "][" << j << "]";
    }
  }
}

// Mode 1 with E = 2 and C = N: token n reads rows n and N + n of a broadcast gradient (one row), so
// out[n] = rne(g + g) = 2g exactly; only the output is large.
TEST(LargeTensors, InitRoutingV2GradDropPadBroadcastInput) {
  const int64_t N = kRows, K = 2;
  auto out = std::make_unique<Bf16Buffer>(N * kH);
  ASSERT_TRUE(out->data) << "needs about 4.6 GB of memory";
  FillPattern(out->data, N * kH, 12);  // stale values: every row must be overwritten
  std::vector<uint16_t> g_row(kH);
  std::vector<int32_t> idx(N * K);
  for (int64_t j = 0; j < kH; ++j) g_row[j] = Pattern(j, 13);
  for (int64_t n = 0; n < N; ++n) {
    idx[n * K] = static_cast<int32_t>(n);
    idx[n * K + 1] = static_cast<int32_t>(N + n);
  }
  InitRoutingV2GradArgs a;
  a.grad_expanded_x = TensorView(g_row.data(), DType::kBFloat16, {2, N, kH}, {0, 0, 1});
  a.expanded_row_idx = TensorView(idx.data(), DType::kInt32, {N * K});
  a.top_k = K;
  a.drop_pad_mode = 1;
  a.out = Bf16View(out->data, N, kH);
  const Status s = InitRoutingV2Grad(a);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t n : SampleRows(N, kH)) {
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(out->data[n * kH + j], BF16BitsFromF32(Bf(g_row[j]) + Bf(g_row[j]))) << "out[" << n << "][" << j << "]";
    }
  }
}

// MoeInitRoutingV2 dropless, K = 1, through aclnn: x and expandedX real; expandedX[i] = x[s[i]] with s the
// tokens sorted by expert (stably), and the cumsum of every expert's tokens.
TEST(LargeTensors, InitRoutingV2DroplessThroughAclnn) {
  const int64_t N = kRows, E = 64;
  auto x = std::make_unique<Bf16Buffer>(N * kH);
  auto out = std::make_unique<Bf16Buffer>(N * kH);
  ASSERT_TRUE(x->data && out->data) << "needs about 9.2 GB of memory";
  FillPattern(x->data, N * kH, 11);
  std::vector<int32_t> expert(N), row_idx(N, -7), cumsum(E, -7);
  std::vector<int64_t> count(E, 0);
  for (int64_t n = 0; n < N; ++n) {
    expert[n] = static_cast<int32_t>((n * 7919) % E);
    ++count[expert[n]];
  }
  std::vector<int64_t> start(E + 1, 0), sorted(N);
  for (int64_t e = 0; e < E; ++e) start[e + 1] = start[e] + count[e];
  std::vector<int64_t> cursor(start.begin(), start.end() - 1);
  for (int64_t n = 0; n < N; ++n) sorted[cursor[expert[n]]++] = n;
  auto xa = MakeAcl({N, kH}, {kH, 1}, ACL_BF16, N * kH, x->data);
  auto ia = MakeAcl({N, 1}, {1, 1}, ACL_INT32, N, expert.data());
  auto oa = MakeAcl({N, kH}, {kH, 1}, ACL_BF16, N * kH, out->data);
  auto ra = MakeAcl({N}, {1}, ACL_INT32, N, row_idx.data());
  auto ca = MakeAcl({E}, {1}, ACL_INT32, E, cumsum.data());
  ASSERT_TRUE(xa && ia && oa && ra && ca) << aclGetRecentErrMsg();
  uint64_t ws_size = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(aclnnMoeInitRoutingV2GetWorkspaceSize(xa.get(), ia.get(), 0, 0, E, 0, 1, false, oa.get(), ra.get(),
                                                  ca.get(), nullptr, &ws_size, &executor),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  void* ws = nullptr;
  if (ws_size > 0) {
    ASSERT_EQ(aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  }
  ASSERT_EQ(aclnnMoeInitRoutingV2(ws, ws_size, executor, nullptr), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  if (ws != nullptr) aclrtFree(ws);

  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(row_idx[sorted[i]], i) << "expandedRowIdx[" << sorted[i] << "]";
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(cumsum[e], start[e + 1]) << "cumsum[" << e << "]";
  for (int64_t i : SampleRows(N, kH)) {
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(out->data[i * kH + j], x->data[sorted[i] * kH + j]) << "expandedX[" << i << "][" << j << "]";
    }
  }
}

// MoeInitRoutingV2 drop/pad with an (E, C, H) output past 2^31 elements and x one broadcast row: uneven
// experts, so rows past an expert's pairs are zero (over stale values) and pairs past C are dropped.
TEST(LargeTensors, InitRoutingV2DropPadThreeDimensional) {
  const int64_t N = kRows, E = 64, C = kRows / E;
  auto out = std::make_unique<Bf16Buffer>(E * C * kH);
  ASSERT_TRUE(out->data) << "needs about 4.6 GB of memory";
  FillPattern(out->data, E * C * kH, 12);  // stale values: every row must be overwritten
  std::vector<uint16_t> x_row(kH);
  for (int64_t j = 0; j < kH; ++j) x_row[j] = Pattern(j, 13);
  std::vector<int32_t> expert(N), row_idx(N), before(E);
  std::vector<int64_t> count(E, 0);
  for (int64_t n = 0; n < N; ++n) {
    expert[n] = static_cast<int32_t>(n % 97 < E ? n % 97 : n % 7);
    ++count[expert[n]];
  }
  InitRoutingV2Args a;
  a.x = Bf16View(x_row.data(), N, 0);
  a.expert_idx = TensorView(expert.data(), DType::kInt32, {N, 1});
  a.expert_num = E;
  a.expert_capacity = C;
  a.drop_pad_mode = 1;
  a.expert_tokens_before_capacity_flag = true;
  a.expanded_x = TensorView(out->data, DType::kBFloat16, {E, C, kH});
  a.expanded_row_idx = TensorView(row_idx.data(), DType::kInt32, {N});
  a.expert_tokens_before_capacity = TensorView(before.data(), DType::kInt32, {E});
  const Status s = InitRoutingV2(a);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<int64_t> rank(E, 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t c = rank[expert[n]]++;
    ASSERT_EQ(row_idx[n], c < C ? expert[n] * C + c : -1) << "expandedRowIdx[" << n << "]";
  }
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(before[e], count[e]) << "before capacity[" << e << "]";
  std::vector<int64_t> rows = SampleRows(E * C, kH);
  for (int64_t e = 0; e < E; ++e) rows.push_back(e * C + std::min(count[e], C) - 1);  // each expert's last
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] < C) rows.push_back(e * C + count[e]);  // and its first zero row
  }
  for (int64_t v : rows) {
    const bool filled = v % C < count[v / C];
    for (int64_t j = 0; j < kH; ++j) {
      ASSERT_EQ(out->data[v * kH + j], filled ? x_row[j] : 0) << "expandedX row " << v << " (" << v / C << ", "
                                                               << v % C << ") column " << j;
    }
  }
}

}  // namespace
}  // namespace moegrad
