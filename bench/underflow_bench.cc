// underflow_bench: what a vector multiply costs when its products fall below fp32's normal range, against the
// same multiply on ordinary products, for the plain multiply and the fused multiply-add (a * b + -0, the same
// rounding). It is the fact behind the gradient walks' form after an underflow
// (src/backend/cpu/kernels/underflow_watch.h): on a core whose fused form is as fast on underflowing products
// as on ordinary ones, the walks keep it; where it is not, they take MulNoAssist. Each row runs 8 independent
// chains of products on the best SIMD target of this CPU (`lanes` floats a vector); `items_per_second` counts
// product vectors. A chain waits for each product, so the fused form, whose latency is longer, is slower than
// the plain multiply on ordinary products too: compare each form with itself. BM_ScalarProducts measures the
// element-by-element loops' three scalar forms (ScalarProduct in src/backend/cpu/kernels/row_ops-inl.h), by
// their throughput over an array in L1 as in a strided loop.
//
//     build/bench/underflow_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/underflow_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>
#include <cstring>

#include "src/testing/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `vectors` products of 8 chains: p = a * s (or fma(a, s, -0)), then a |= p & zero_bits, so that every product
// waits for the one before it in its chain without changing a (zero_bits is 0, unknown to the compiler).
// Returns an OR of the products, which the caller keeps.
template <bool kFused>
HWY_NOINLINE float Chains(float a0, float s0, uint32_t zero_bits, int64_t vectors) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  using V = hn::Vec<decltype(d)>;
  constexpr int kChains = 8;
  V a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = hn::Set(d, a0 * (1.0f + static_cast<float>(i) / 16.0f));
  const V s = hn::Set(d, s0);
  const V minus_zero = hn::Set(d, -0.0f);
  const auto zero = hn::Set(du, zero_bits);
  auto seen = hn::Zero(du);
  for (int64_t n = 0; n < vectors; n += kChains) {
    for (int i = 0; i < kChains; ++i) {
      const V p = kFused ? hn::MulAdd(a[i], s, minus_zero) : hn::Mul(a[i], s);
      const auto bits = hn::BitCast(du, p);
      seen = hn::Or(seen, bits);
      a[i] = hn::BitCast(d, hn::Or(hn::BitCast(du, a[i]), hn::And(bits, zero)));
    }
  }
  return hn::GetLane(hn::BitCast(d, seen));
}
float PlainChains(float a0, float s0, uint32_t zero_bits, int64_t vectors) {
  return Chains<false>(a0, s0, zero_bits, vectors);
}
float FusedChains(float a0, float s0, uint32_t zero_bits, int64_t vectors) {
  return Chains<true>(a0, s0, zero_bits, vectors);
}
size_t Lanes() { return hn::Lanes(hn::ScalableTag<float>()); }

// The element-by-element loops' products (strided rows, row tails): x[j] * s for the `count` floats of x (kept
// in L1), in ProductForm kForm (moegrad::kernels::ScalarProduct: the plain multiply, the scalar FMA,
// MulNoAssistScalar), `rounds` times. Nothing waits for a product but an OR of its bits, so this is the
// products' throughput, as in a strided loop. Returns the OR of all the products' bits.
// (Kept scalar, as the library's strided loops are: the compiler would otherwise vectorize the plain forms.)
#if defined(__GNUC__) && !defined(__clang__)
#define MOEGRAD_BENCH_SCALAR __attribute__((optimize("no-tree-vectorize")))
#else
#define MOEGRAD_BENCH_SCALAR
#endif
template <int kForm>
HWY_NOINLINE MOEGRAD_BENCH_SCALAR float ScalarChains(const float* x, int64_t count, float s, int64_t rounds) {
  constexpr int kAcc = 8;
  uint32_t seen[kAcc] = {};
  for (int64_t r = 0; r < rounds; ++r) {
#if defined(__clang__)
#pragma clang loop vectorize(disable)
#endif
    for (int64_t j = 0; j < count; j += kAcc) {
      for (int i = 0; i < kAcc; ++i) {
        const float p = moegrad::kernels::HWY_NAMESPACE::ScalarProduct<kForm>(x[j + i], s);
        uint32_t bits;
        std::memcpy(&bits, &p, sizeof(bits));
        seen[i] |= bits;
      }
    }
  }
  uint32_t all = 0;
  for (uint32_t v : seen) all |= v;
  float out;
  std::memcpy(&out, &all, sizeof(out));
  return out;
}
float ScalarForm(int form, const float* x, int64_t count, float s, int64_t rounds) {
  using namespace moegrad::kernels;  // NOLINT: the ProductForm names
  if (form == kNoAssist) return ScalarChains<kNoAssist>(x, count, s, rounds);
  if (form == kFused) return ScalarChains<kFused>(x, count, s, rounds);
  return ScalarChains<kPlainMul>(x, count, s, rounds);
}

}  // namespace moegrad::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>

#include <vector>

namespace moegrad::bench {
HWY_EXPORT(PlainChains);
HWY_EXPORT(FusedChains);
HWY_EXPORT(Lanes);
HWY_EXPORT(ScalarForm);

volatile uint32_t g_zero_bits = 0;

// range(0): 0 the plain multiply, 1 the fused form; range(1): 0 ordinary products (0.75 * 1.25), 1 products
// below the normal range (2^-93 * 2^-40 = 2^-133, as a tiny bf16 gradient times a small weight).
void BM_Products(benchmark::State& st) {
  const bool fused = st.range(0) != 0;
  const bool tiny = st.range(1) != 0;
  const float a = tiny ? 0x1p-93f : 0.75f;
  const float s = tiny ? 0x1p-40f : 1.25f;
  constexpr int64_t kVectors = int64_t{1} << 20;
  const uint32_t zero_bits = g_zero_bits;
  for (auto _ : st) {
    float r = fused ? HWY_DYNAMIC_DISPATCH(FusedChains)(a, s, zero_bits, kVectors)
                    : HWY_DYNAMIC_DISPATCH(PlainChains)(a, s, zero_bits, kVectors);
    benchmark::DoNotOptimize(r);
  }
  st.SetItemsProcessed(st.iterations() * kVectors);  // product vectors
  st.counters["lanes"] = static_cast<double>(HWY_DYNAMIC_DISPATCH(Lanes)());
  st.SetLabel(std::string(fused ? "fused" : "plain") + (tiny ? ", products below normal" : ", ordinary products"));
}
BENCHMARK(BM_Products)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"fused", "tiny"})->Unit(benchmark::kMicrosecond);

// The element loops' scalar products, their throughput. range(0): the ProductForm (0 the plain multiply, 1 the scalar FMA, 2
// MulNoAssistScalar); range(1) as BM_Products. The loops take the plain multiply until their watch sees an
// underflow, then 1 where the core spares the fused form, else 2 (ScalarFormAfter in underflow_watch.h).
void BM_ScalarProducts(benchmark::State& st) {
  const int form = static_cast<int>(st.range(0));
  const bool tiny = st.range(1) != 0;
  const float s = tiny ? 0x1p-40f : 1.25f;
  constexpr int64_t kCount = 4096;  // 16 KiB
  constexpr int64_t kRounds = 256;
  std::vector<float> x(kCount);
  for (int64_t j = 0; j < kCount; ++j) {
    x[static_cast<size_t>(j)] = (tiny ? 0x1p-93f : 0.75f) * (1.0f + static_cast<float>(j % 61) / 64.0f);
  }
  for (auto _ : st) {
    float r = HWY_DYNAMIC_DISPATCH(ScalarForm)(form, x.data(), kCount, s, kRounds);
    benchmark::DoNotOptimize(r);
  }
  st.SetItemsProcessed(st.iterations() * kCount * kRounds);  // products
  static const char* const kNames[] = {"plain", "scalar FMA", "no-assist"};
  st.SetLabel(std::string(kNames[form]) + (tiny ? ", products below normal" : ", ordinary products"));
}
BENCHMARK(BM_ScalarProducts)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->ArgNames({"form", "tiny"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace moegrad::bench

BENCHMARK_MAIN();
#endif  // HWY_ONCE
