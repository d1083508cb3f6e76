// The row primitives of src/backend/cpu/kernels/ tested directly, white box, on every SIMD target this
// machine supports and the build generates (HWY_EXPORT_AND_TEST_P: one test per target, named after it):
// widening and narrowing (row_ops-inl.h), the streaming stores and streamed zeroing (row_ops_stream-inl.h),
// the pairs of vectors with their raw x86 bf16 / fp16 paths (row_ops_pair-inl.h), scaled row copies, sums of
// rows, zeroing and dot products in their documented order (row_ops-inl.h, row_ops_scale_dot-inl.h,
// row_ops_gather_sum-inl.h), the assist-free products and the sums of weighted terms in both their product
// forms (row_ops-inl.h, row_ops_terms-inl.h), for f32, fp16 and bf16, unit-stride and strided rows, lengths
// around every vector width.
//
// Every expected value comes from the scalar computation written out here, with the conversions of
// src/core/float16.h (tested exhaustively in float16_test.cc), never from the code under test: products
// rne(x * s), sums left to right from the first term, and dots whose element j goes to partial sum j % 16,
// the 16 partials folded 8 + 8, 4 + 4, 2 + 2, 1 + 1 (docs/design.md, Determinism). Results are compared bit
// for bit, and every element a call must not write (stride gaps, the elements around a row) is checked to
// keep its sentinel.
//
// This file is compiled once per target (foreach_target.h includes it again for each).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/row_ops_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/tests/hwy_gtest.h"
#include "src/testing/float16.h"
#include "src/testing/row_ops-inl.h"

// Target-independent helpers, once.
#ifndef MOEGRAD_TESTS_ROW_OPS_TEST_ONCE_
#define MOEGRAD_TESTS_ROW_OPS_TEST_ONCE_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace moegrad::row_ops_test {

// --- the scalar model ----------------------------------------------------------------------------------
template <typename T>
uint32_t BitsOf(T v) {
  return v.bits;
}
template <>
inline uint32_t BitsOf<float>(float v) {
  return F32Bits(v);
}

template <typename T>
T FromBits(uint32_t b) {
  T v;
  v.bits = static_cast<uint16_t>(b);
  return v;
}
template <>
inline float FromBits<float>(uint32_t b) {
  return F32FromBits(b);
}

inline float Widen(float v) { return v; }
inline float Widen(hwy::bfloat16_t v) { return F32FromBF16Bits(v.bits); }
inline float Widen(hwy::float16_t v) { return F32FromF16Bits(v.bits); }

// What a store of the fp32 result f writes: f rounded to T, to nearest even, and a NaN as the one NaN of
// arithmetic results (x86's default NaN: 0xFFC00000, bf16 0xFFC0, fp16 0xFE00), whatever f's sign and payload.
template <typename T>
T Narrow(float f);
template <>
inline float Narrow<float>(float f) {
  return std::isnan(f) ? F32FromBits(0xFFC00000u) : f;
}
template <>
inline hwy::bfloat16_t Narrow<hwy::bfloat16_t>(float f) {
  return FromBits<hwy::bfloat16_t>(std::isnan(f) ? 0xFFC0u : BF16BitsFromF32(f));
}
template <>
inline hwy::float16_t Narrow<hwy::float16_t>(float f) {
  return FromBits<hwy::float16_t>(std::isnan(f) ? 0xFE00u : F16BitsFromF32(f));
}

template <typename T>
const char* TypeName() {
  return sizeof(T) == 4 ? "f32" : hwy::IsSame<T, hwy::bfloat16_t>() ? "bf16" : "f16";
}

// Explicit mantissa bits of T.
template <typename T>
constexpr int MantissaBits() {
  return sizeof(T) == 4 ? 23 : hwy::IsSame<T, hwy::bfloat16_t>() ? 7 : 10;
}

// The dot product of the kernels, element by element: (x[j] + b[j]) * g[j] (x or b null: left out) into
// partial sum j % 16, from `part` (16 sums, zero when null) and column `start` on; then the fixed fold.
template <typename T>
float RefDot(const T* x, int64_t xs, const T* b, int64_t bs, const T* g, int64_t gs, int64_t n, int64_t start = 0,
             const float* part_in = nullptr, float* part_out = nullptr) {
  float part[16];
  for (int q = 0; q < 16; ++q) part[q] = part_in != nullptr ? part_in[q] : 0.0f;
  if (x != nullptr || b != nullptr) {
    for (int64_t j = start; j < n; ++j) {
      float v;
      if (x != nullptr && b != nullptr) {
        v = Widen(x[j * xs]) + Widen(b[j * bs]);
      } else if (x != nullptr) {
        v = Widen(x[j * xs]);
      } else {
        v = Widen(b[j * bs]);
      }
      part[j % 16] = part[j % 16] + v * Widen(g[j * gs]);
    }
  }
  if (part_out != nullptr) {
    for (int q = 0; q < 16; ++q) part_out[q] = part[q];
  }
  for (int q = 0; q < 8; ++q) part[q] = part[q] + part[q + 8];
  for (int q = 0; q < 4; ++q) part[q] = part[q] + part[q + 4];
  for (int q = 0; q < 2; ++q) part[q] = part[q] + part[q + 2];
  return part[0] + part[1];
}

// --- test data -----------------------------------------------------------------------------------------
// Row lengths around every vector width (1 to 16 fp32 lanes, pairs of them, TokenStep columns) with odd tails.
inline const std::vector<int64_t>& Lengths() {
  static const std::vector<int64_t> n = {1, 3, 8, 15, 16, 17, 31, 33, 64, 100, 128, 129, 273, 1031};
  return n;
}

enum class Specials { kNone, kNoNaN, kAll };

// The exponents of tiny values of T: near 2^-70 (products of two, or with a tiny scale, fall below fp32's
// normal range); fp16, which cannot hold them, its smallest normals.
template <typename T>
constexpr int TinyEmin() { return hwy::IsSame<T, hwy::float16_t>() ? -14 : -72; }
template <typename T>
constexpr int TinyEmax() { return hwy::IsSame<T, hwy::float16_t>() ? -12 : -60; }

// A random value exact in T, magnitude in [2^emin, 2^(emax+1)), random sign; with `specials`, now and then
// +-0, a subnormal of T, +-infinity, the largest finite T, or (kAll) a NaN, quiet or signalling.
template <typename T>
T RandomValue(std::mt19937& rng, int emin, int emax, Specials specials) {
  const uint32_t r = rng();
  if (specials != Specials::kNone && r % 16 == 0) {
    const uint32_t sign = (r >> 8) & 1u;
    const uint32_t pick = (r >> 9) % (specials == Specials::kAll ? 6u : 4u);
    if (sizeof(T) == 4) {
      const uint32_t s = sign << 31;
      const uint32_t bits[6] = {s, s | 0x00000001u, s | 0x7f800000u, s | 0x7f7fffffu, s | 0x7fc01234u,
                                s | 0x7f800001u};
      return FromBits<T>(bits[pick]);
    }
    const uint32_t s = sign << 15;
    const bool bf = hwy::IsSame<T, hwy::bfloat16_t>();
    const uint32_t bits[6] = {s, s | 0x0001u, s | (bf ? 0x7f80u : 0x7c00u), s | (bf ? 0x7f7fu : 0x7bffu),
                              s | (bf ? 0x7fc5u : 0x7e05u), s | (bf ? 0x7f81u : 0x7c01u)};
    return FromBits<T>(bits[pick]);
  }
  const int e = emin + static_cast<int>(rng() % static_cast<uint32_t>(emax - emin + 1));
  const float m = 1.0f + static_cast<float>(r & 0x7fffffu) * (1.0f / 8388608.0f);
  const float f = std::ldexp((r >> 31) != 0 ? -m : m, e);
  return Narrow<T>(f);
}

// A row of `count` elements of T in aligned storage: element `offset + j * stride` for j < n, every other
// element the sentinel, which no operation here produces.
template <typename T>
class Buffer {
 public:
  static constexpr uint32_t kSentinel = sizeof(T) == 4 ? 0x5a5a5a5au : 0x5a5au;
  Buffer(int64_t n, int64_t stride, int64_t offset)
      : n_(n), stride_(stride), offset_(offset),
        size_(offset + (n > 0 ? (n - 1) * stride + 1 : 0) + 80),
        data_(hwy::AllocateAligned<T>(static_cast<size_t>(size_))) {
    for (int64_t i = 0; i < size_; ++i) data_[i] = FromBits<T>(kSentinel);
  }
  T* row() { return data_.get() + offset_; }
  const T* row() const { return data_.get() + offset_; }
  T& at(int64_t j) { return row()[j * stride_]; }
  int64_t n() const { return n_; }
  int64_t stride() const { return stride_; }

  void Fill(std::mt19937& rng, int emin, int emax, Specials specials) {
    for (int64_t j = 0; j < n_; ++j) at(j) = RandomValue<T>(rng, emin, emax, specials);
  }

  // True when element j holds expected(j) bit for bit for every j in [first, n), and every other element
  // the sentinel; otherwise a message naming the first difference.
  ::testing::AssertionResult Check(const std::function<T(int64_t)>& expected, int64_t first = 0) const {
    std::vector<uint32_t> want(static_cast<size_t>(size_), kSentinel);
    for (int64_t j = first; j < n_; ++j) want[static_cast<size_t>(offset_ + j * stride_)] = BitsOf(expected(j));
    for (int64_t i = 0; i < size_; ++i) {
      const uint32_t got = BitsOf(data_[i]);
      if (got == want[static_cast<size_t>(i)]) continue;
      const int64_t rel = i - offset_;
      const bool in_row = rel >= 0 && rel % stride_ == 0 && rel / stride_ < n_ && rel / stride_ >= first;
      char msg[200];
      std::snprintf(msg, sizeof(msg), "%s element %lld%s: got 0x%08x, want 0x%08x", TypeName<T>(),
                    static_cast<long long>(in_row ? rel / stride_ : i),
                    in_row ? "" : " of the storage (outside the row)", got, want[static_cast<size_t>(i)]);
      return ::testing::AssertionFailure() << msg;
    }
    return ::testing::AssertionSuccess();
  }

 private:
  int64_t n_, stride_, offset_, size_;
  hwy::AlignedFreeUniquePtr<T[]> data_;
};

inline ::testing::AssertionResult SameFloat(float got, float want) {
  if (F32Bits(got) == F32Bits(want)) return ::testing::AssertionSuccess();
  char msg[120];
  std::snprintf(msg, sizeof(msg), "dot: got %.9g (0x%08x), want %.9g (0x%08x)", got, F32Bits(got), want,
                F32Bits(want));
  return ::testing::AssertionFailure() << msg;
}

// The context of a failure: target, operation, type, length and whatever else varies.
inline std::string Where(int64_t target, const char* what, const char* type, int64_t n, const std::string& more) {
  return std::string(hwy::TargetName(target)) + " " + what + " " + type + " n=" + std::to_string(n) + " " + more;
}

}  // namespace moegrad::row_ops_test

#endif  // MOEGRAD_TESTS_ROW_OPS_TEST_ONCE_

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {
namespace rt = moegrad::row_ops_test;
using rt::Buffer;
using rt::Specials;

// Calls fn(T{}) for T = float, fp16, bf16.
template <class Fn>
void ForEachType(const Fn& fn) {
  fn(float{});
  fn(hwy::float16_t{});
  fn(hwy::bfloat16_t{});
}

// Calls fn(std::integral_constant<int, kForm>()) for every ProductForm of the element-by-element loops
// (ScalarProduct: the plain multiply, the scalar FMA, MulNoAssistScalar), whatever the core's watch would take.
template <class Fn>
void ForEachScalarForm(const Fn& fn) {
  fn(std::integral_constant<int, kPlainMul>());
  fn(std::integral_constant<int, kFused>());
  fn(std::integral_constant<int, kNoAssist>());
}
inline std::string FormName(int form) {
  return form == kNoAssist ? " no-assist" : form == kFused ? " fused" : " plain";
}

template <typename T>
std::string At(const char* what, int64_t n, const std::string& more = "") {
  return rt::Where(HWY_TARGET, what, rt::TypeName<T>(), n, more);
}

// The f32 inputs of the narrowing sweep: every sign, exponent and upper mantissa (all 2^16 upper halves) with
// lower halves at, just below and just above the rounding points of bf16 (bit 15) and of fp16 (bit 12 for
// normal results, up to bit 23 for subnormal ones; the upper half covers those above bit 15).
std::vector<float> NarrowingInputs() {
  static const uint32_t kLow[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x3fff,
                                  0x4000, 0x4001, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xdfff, 0xe000,
                                  0xefff, 0xf000, 0xffff, 0x5a17};
  std::vector<float> v;
  v.reserve(65536 * (sizeof(kLow) / sizeof(kLow[0])));
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : kLow) v.push_back(F32FromBits((hi << 16) | lo));
  }
  return v;
}

// --- widening and narrowing ----------------------------------------------------------------------------

// LoadF32 widens every fp16 and bf16 bit pattern exactly as F32FromF16Bits / F32FromBF16Bits (NaNs included),
// and f32 rows unchanged.
HWY_NOINLINE void TestWidenEveryPattern() {
  std::fprintf(stderr, "row_ops_test: target %s, %d fp32 lanes\n", hwy::TargetName(HWY_TARGET),
               static_cast<int>(hn::Lanes(DF())));
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    const DF d;
    const size_t lanes = hn::Lanes(d);
    const size_t count = sizeof(T) == 4 ? 4096 : 65536;
    std::mt19937 rng(7);
    auto src = hwy::AllocateAligned<T>(count);
    auto out = hwy::AllocateAligned<float>(count);
    for (size_t i = 0; i < count; ++i) {
      src[i] = sizeof(T) == 4 ? rt::RandomValue<T>(rng, -130, 127, Specials::kAll) : rt::FromBits<T>(uint32_t(i));
    }
    for (size_t i = 0; i < count; i += lanes) hn::StoreU(LoadF32(d, src.get() + i), d, out.get() + i);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(F32Bits(out[i]), F32Bits(rt::Widen(src[i])))
          << At<T>("LoadF32", 1, "input bits " + std::to_string(rt::BitsOf(src[i])));
    }
  });
}

// StoreF32 (and StreamF32 where the target streams T) round every f32 to nearest even, ties to even, NaNs
// kept NaN and quiet, overflow to infinity, exactly as BF16BitsFromF32 / F16BitsFromF32.
HWY_NOINLINE void TestNarrowRoundsToNearestEven() {
  const std::vector<float> in = NarrowingInputs();
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    const DF d;
    const size_t lanes = hn::Lanes(d);
    auto src = hwy::AllocateAligned<float>(in.size());
    auto out = hwy::AllocateAligned<T>(in.size());
    for (size_t i = 0; i < in.size(); ++i) src[i] = in[i];
    for (int stream = 0; stream < (CanStream<T>() ? 2 : 1); ++stream) {
      for (size_t i = 0; i < in.size(); ++i) out[i] = rt::FromBits<T>(Buffer<T>::kSentinel);
      for (size_t i = 0; i + lanes <= in.size(); i += lanes) {
        const VF v = hn::LoadU(d, src.get() + i);
        if (stream) StreamF32(d, v, out.get() + i);
        else StoreF32(d, v, out.get() + i);
      }
      hwy::FlushStream();
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_EQ(rt::BitsOf(out[i]), rt::BitsOf(rt::Narrow<T>(in[i])))
            << At<T>(stream ? "StreamF32" : "StoreF32", 1, "input bits " + std::to_string(F32Bits(in[i])));
      }
    }
  });
}

// Two vectors at a time (LoadPair, PutPair: AVX-512's and AVX2's raw 16-bit paths): a row widened and
// narrowed again is every pattern rounded as the scalar conversions do (a signalling NaN comes back quiet),
// and the sum of two rows (column j: a[j] + b[j] with b[j] a half, a quarter or three quarters of a unit in
// the last place of a[j]) rounds ties to even. Ordinary and streaming stores.
HWY_NOINLINE void TestPairsRoundTripAndRoundTies() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    const DF d;
    const size_t pair = 2 * hn::Lanes(d);
    const size_t count = sizeof(T) == 4 ? 4096 : 65536;
    std::mt19937 rng(11);
    auto a = hwy::AllocateAligned<T>(count);
    auto b = hwy::AllocateAligned<T>(count);
    auto out = hwy::AllocateAligned<T>(count);
    for (size_t i = 0; i < count; ++i) {
      a[i] = sizeof(T) == 4 ? rt::RandomValue<T>(rng, -130, 127, Specials::kAll) : rt::FromBits<T>(uint32_t(i));
    }
    for (int stream = 0; stream < (CanStream<T>() ? 2 : 1); ++stream) {
      for (size_t i = 0; i + pair <= count; i += pair) {
        VF v0, v1;
        LoadPair(a.get() + i, &v0, &v1);
        if (stream) PutPair<CanStream<T>()>(v0, v1, out.get() + i);
        else PutPair<false>(v0, v1, out.get() + i);
      }
      hwy::FlushStream();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(rt::BitsOf(out[i]), rt::BitsOf(rt::Narrow<T>(rt::Widen(a[i]))))
            << At<T>(stream ? "LoadPair+PutPair<stream>" : "LoadPair+PutPair", 1,
                     "input bits " + std::to_string(rt::BitsOf(a[i])));
      }
    }
    // Ties: a[j] in [1, 2) (both parities of its last bit), b[j] = +-1/2, +-1/4 or +-3/4 of its ulp 2^-M.
    constexpr int M = rt::MantissaBits<T>();
    for (size_t i = 0; i < count; ++i) {
      a[i] = rt::RandomValue<T>(rng, 0, 0, Specials::kNone);
      const float frac[6] = {0.5f, -0.5f, 0.25f, -0.25f, 0.75f, -0.75f};
      b[i] = rt::Narrow<T>(std::ldexp(frac[rng() % 6], -M));
    }
    for (int stream = 0; stream < (CanStream<T>() ? 2 : 1); ++stream) {
      for (size_t i = 0; i + pair <= count; i += pair) {
        VF a0, a1, b0, b1;
        LoadPair(a.get() + i, &a0, &a1);
        LoadPair(b.get() + i, &b0, &b1);
        if (stream) PutPair<CanStream<T>()>(hn::Add(a0, b0), hn::Add(a1, b1), out.get() + i);
        else PutPair<false>(hn::Add(a0, b0), hn::Add(a1, b1), out.get() + i);
      }
      hwy::FlushStream();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(rt::BitsOf(out[i]), rt::BitsOf(rt::Narrow<T>(rt::Widen(a[i]) + rt::Widen(b[i]))))
            << At<T>("LoadPair+Add+PutPair", 1, "column " + std::to_string(i));
      }
    }
  });
}

// --- rows ----------------------------------------------------------------------------------------------

// ZeroRow (any stride) and ZeroRowUnit (ordinary and streaming stores, rows starting anywhere in a line).
HWY_NOINLINE void TestZeroRows() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    const auto zero_of = [](int64_t) { return rt::FromBits<T>(0); };
    for (int64_t n : rt::Lengths()) {
      for (int64_t stride : {1, 2, 3}) {
        Buffer<T> dst(n, stride, 1);
        ZeroRow(dst.row(), stride, n);
        ASSERT_TRUE(dst.Check(zero_of)) << At<T>("ZeroRow", n, "stride " + std::to_string(stride));
      }
      for (int64_t offset : {0, 1, 5}) {
        for (bool stream : {false, true}) {
          Buffer<T> dst(n, 1, offset);
          ZeroRowUnit(dst.row(), n, stream);
          hwy::FlushStream();
          ASSERT_TRUE(dst.Check(zero_of))
              << At<T>("ZeroRowUnit", n, "offset " + std::to_string(offset) + (stream ? " stream" : ""));
        }
      }
    }
    for (int64_t n : {int64_t{4099}, int64_t{0}}) {  // longer than any streaming threshold; empty
      Buffer<T> dst(n, 1, 3);
      ZeroRowUnit(dst.row(), n, true);
      hwy::FlushStream();
      ASSERT_TRUE(dst.Check(zero_of)) << At<T>("ZeroRowUnit", n, "stream");
    }
  });
}

// ScaleRow: dst[j] = rne(src[j] * s), unit-stride and strided rows, specials included; for the scales that
// put the product of a power of two exactly on a rounding tie, both directions of the tie; and tiny rows
// (near 2^-70, fp16 its smallest normals) times tiny scales, whose products fall below fp32's normal range
// (the element-by-element columns in every form of ScalarProduct).
HWY_NOINLINE void TestScaleRow() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    constexpr int M = rt::MantissaBits<T>();
    const float h = std::ldexp(1.0f, -(M + 1));  // half an ulp of [1, 2) in T
    const bool f16 = hwy::IsSame<T, hwy::float16_t>();
    const float tiny_s = f16 ? 0x1.8p-118f : 0x1.8p-66f;  // times values near 2^-14 (fp16) or 2^-70
    const float scales[] = {1.0f, -0.75f, 0.1f, 1.0f + h, 1.0f + 3 * h, -(1.0f + h), 1.0f + h / 2, 3.0e38f,
                            tiny_s, -tiny_s * 0.75f};
    std::mt19937 rng(13);
    const int64_t strides[][2] = {{1, 1}, {2, 1}, {1, 3}, {3, 2}};
    for (int64_t n : rt::Lengths()) {
      for (const auto& st : strides) {
        for (int64_t offset : {0, 1}) {
          Buffer<T> src(n, st[0], offset);
          for (float s : scales) {
            // Powers of two for the tie scales, random values (specials included) for the others.
            const bool ties = s == 1.0f + h || s == 1.0f + 3 * h || s == -(1.0f + h);
            const bool tiny = std::fabs(s) < 0x1p-63f;
            if (ties) {
              for (int64_t j = 0; j < n; ++j) src.at(j) = rt::Narrow<T>(std::ldexp(1.0f, int(rng() % 9) - 4));
            } else if (tiny) {
              src.Fill(rng, rt::TinyEmin<T>(), rt::TinyEmax<T>(), Specials::kAll);
            } else {
              src.Fill(rng, -10, 10, Specials::kAll);
            }
            ForEachScalarForm([&](auto form) {
              constexpr int kForm = decltype(form)::value;
              Buffer<T> dst(n, st[1], offset);
              ScaleRow<kForm>(src.row(), st[0], s, dst.row(), st[1], n);
              ASSERT_TRUE(dst.Check([&](int64_t j) { return rt::Narrow<T>(rt::Widen(src.at(j)) * s); }))
                  << At<T>("ScaleRow", n, "strides " + std::to_string(st[0]) + "," + std::to_string(st[1]) +
                                              " offset " + std::to_string(offset) + " s=" + std::to_string(s) +
                                              FormName(kForm));
            });
          }
        }
      }
    }
  });
}

// The rows of a sum: rows[m] with scale scales[m].
template <typename T>
struct Rows {
  std::vector<Buffer<T>> rows;
  std::vector<float> scales;
  std::vector<const T*> ptrs;
  // The scalar model: rne(r_0 * s_0 + r_1 * s_1 + ...) left to right from the first product; +0 for none.
  T Expected(int64_t j, bool scaled) const {
    if (rows.empty()) return rt::FromBits<T>(0);
    float acc = scaled ? rt::Widen(ptrs[0][j * rows[0].stride()]) * scales[0] : rt::Widen(ptrs[0][j]);
    for (size_t m = 1; m < rows.size(); ++m) {
      acc = acc + (scaled ? rt::Widen(ptrs[m][j * rows[m].stride()]) * scales[m] : rt::Widen(ptrs[m][j]));
    }
    return rt::Narrow<T>(acc);
  }
};

// `count` random rows of n elements with inner stride `stride`; specials (NaNs, infinities) only in row 0,
// so that no column adds two of them. With `ties` (unit stride, two rows) the second row is a half, a
// quarter or three quarters of an ulp of the first: sums on rounding ties, both directions.
template <typename T>
Rows<T> MakeRows(std::mt19937& rng, int64_t count, int64_t n, int64_t stride, bool scaled, bool ties = false,
                 bool tiny = false) {
  const bool f16 = hwy::IsSame<T, hwy::float16_t>();
  Rows<T> r;
  for (int64_t m = 0; m < count; ++m) {
    r.rows.emplace_back(n, stride, static_cast<int64_t>(rng() % 3));
    if (ties) {
      constexpr int M = rt::MantissaBits<T>();
      const float frac[6] = {0.5f, -0.5f, 0.25f, -0.25f, 0.75f, -0.75f};
      for (int64_t j = 0; j < n; ++j) {
        r.rows.back().at(j) = m == 0 ? rt::RandomValue<T>(rng, 0, 0, Specials::kNone)
                                     : rt::Narrow<T>(std::ldexp(frac[rng() % 6], -M));
      }
    } else if (tiny) {
      r.rows.back().Fill(rng, rt::TinyEmin<T>(), rt::TinyEmax<T>(), m == 0 ? Specials::kAll : Specials::kNone);
    } else {
      r.rows.back().Fill(rng, -8, 8, m == 0 ? Specials::kAll : Specials::kNone);
    }
    // Tiny rows: scales that take their products below 2^-126 (fp16: values near 2^-14 times 2^-118..2^-109).
    const int e = tiny ? (f16 ? -118 : -70) + int(rng() % 10) : int(rng() % 5) - 2;
    const float s = !tiny && rng() % 4 == 0 ? 1.0f : std::ldexp(1.0f + float(rng() % 1000) / 999.0f, e);
    r.scales.push_back(scaled && !ties ? s : 1.0f);
  }
  for (auto& b : r.rows) r.ptrs.push_back(b.row());
  return r;
}

// SumRowsOf: dst[j] = rne(sum of rows[m][j] * scales[m]), in ascending m from the first product; zero rows
// give +0. Unit-stride and strided rows, ordinary and tiny (products below fp32's normal range).
HWY_NOINLINE void TestSumRowsOf() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(17);
    const int64_t strides[][2] = {{1, 1}, {2, 1}, {1, 2}, {3, 3}};
    for (int64_t n : rt::Lengths()) {
      for (const auto& st : strides) {
        for (int64_t count : {0, 1, 2, 3, 5, 9}) {
          for (int kind = 0; kind < 3; ++kind) {  // ordinary, ties, tiny
            const bool ties = kind == 1, tiny = kind == 2;
            if (ties && (count != 2 || st[0] != 1)) continue;
            const Rows<T> rows = MakeRows<T>(rng, count, n, st[0], true, ties, tiny);
            auto row = [&](int64_t m, float* scale) {
              *scale = rows.scales[static_cast<size_t>(m)];
              return rows.ptrs[static_cast<size_t>(m)];
            };
            ForEachScalarForm([&](auto form) {
              constexpr int kForm = decltype(form)::value;
              Buffer<T> dst(n, st[1], 1);
              SumRowsOf<T, kForm>(count, row, st[0], dst.row(), st[1], n);
              ASSERT_TRUE(dst.Check([&](int64_t j) { return rows.Expected(j, true); }))
                  << At<T>("SumRowsOf", n, "count " + std::to_string(count) + " strides " + std::to_string(st[0]) +
                                               "," + std::to_string(st[1]) + (ties ? " ties" : "") +
                                               (tiny ? " tiny" : "") + FormName(kForm));
            });
          }
        }
      }
    }
  });
}

// The gather sums of unit-stride rows: SumRowPtrs (two vectors per step, raw 16-bit paths; long rows in groups
// through an fp32 row, SumRowPtrsSplit) and SumManyRowsUnit (blocks of 2048 columns, eight rows per pass),
// ordinary and streaming stores: the same sums as SumRowsOf with every scale 1.
HWY_NOINLINE void TestGatherSums() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(19);
    std::vector<int64_t> lengths = rt::Lengths();
    lengths.push_back(2048 + 31);  // SumManyRowsUnit: more than one block of columns
    lengths.push_back(kSplitColumns / 2 + 33);  // rows that SplitsRows (8+ of them): groups of kSplitTerms
    for (int64_t n : lengths) {
      for (int64_t count : {0, 1, 2, 3, 7, 8, 9, 17, 33}) {
        for (bool ties : {false, true}) {
          if (ties && count != 2) continue;
          const Rows<T> rows = MakeRows<T>(rng, count, n, 1, false, ties);
          const Rows<T> next = MakeRows<T>(rng, 2, n, 1, false);  // only prefetched
          for (int64_t offset : {0, 1}) {
            for (bool stream : {false, true}) {
              const std::string more = "count " + std::to_string(count) + " offset " + std::to_string(offset) +
                                       (stream ? " stream" : "") + (ties ? " ties" : "");
              Buffer<T> dst(n, 1, offset);
              SumRowPtrs<T>(count, rows.ptrs.data(), 2, next.ptrs.data(), dst.row(), stream, n);
              hwy::FlushStream();
              ASSERT_TRUE(dst.Check([&](int64_t j) { return rows.Expected(j, false); }))
                  << At<T>("SumRowPtrs", n, more);
              if (count == 0) continue;
              Buffer<T> many(n, 1, offset);
              const auto row_at = [&](int64_t m) { return rows.ptrs[static_cast<size_t>(m)]; };
              if (CanStream<T>() && stream && StreamAligned(many.row())) {
                SumManyRowsUnit<T, CanStream<T>()>(count, row_at, many.row(), n);
              } else {
                SumManyRowsUnit<T, false>(count, row_at, many.row(), n);
              }
              hwy::FlushStream();
              ASSERT_TRUE(many.Check([&](int64_t j) { return rows.Expected(j, false); }))
                  << At<T>("SumManyRowsUnit", n, more);
            }
          }
        }
      }
    }
  });
}

// --- dot products --------------------------------------------------------------------------------------

// DotRow: sum_j (x[j] + b[j]) * g[j] (x or b absent: left out; both absent: +0) in the documented order,
// unit-stride and strided rows. Magnitudes spread over 2^-8 .. 2^8 so that another order or fold gives
// other bits; a fourth trial of tiny rows (near 2^-70, whose products fall below fp32's normal range; fp16
// takes its smallest normals, whose products do not).
HWY_NOINLINE void TestDotRow() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(23);
    const int64_t strides[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 3, 1}, {1, 1, 2}, {3, 2, 2}};
    for (int64_t n : rt::Lengths()) {
      for (const auto& st : strides) {
        Buffer<T> x(n, st[0], 1), b(n, st[1], 0), g(n, st[2], 2);
        for (int trial = 0; trial < 4; ++trial) {
          const bool tiny = trial == 3;
          const int lo = tiny ? rt::TinyEmin<T>() : -8, hi = tiny ? rt::TinyEmax<T>() : 8;
          x.Fill(rng, lo, hi, Specials::kNone);
          b.Fill(rng, lo, hi, Specials::kNone);
          g.Fill(rng, lo, hi, Specials::kNone);
          for (int which = 0; which < 4; ++which) {  // x and b, x only, b only, neither
            const T* xp = which == 0 || which == 1 ? x.row() : nullptr;
            const T* bp = which == 0 || which == 2 ? b.row() : nullptr;
            const float want = rt::RefDot(xp, st[0], bp, st[1], g.row(), st[2], n);
            ForEachScalarForm([&](auto form) {
              constexpr int kForm = decltype(form)::value;
              const float got = DotRow<kForm>(xp, st[0], bp, st[1], g.row(), st[2], n);
              ASSERT_TRUE(rt::SameFloat(got, want))
                  << At<T>("DotRow", n, "x,b present " + std::to_string(which) + " strides " +
                                            std::to_string(st[0]) + "," + std::to_string(st[1]) + "," +
                                            std::to_string(st[2]) + FormName(kForm) + (tiny ? " tiny" : ""));
            });
          }
        }
      }
    }
  });
}

// ScaleRowDot (the fused gradient of a weighted row, unit stride): out[j] = rne(g[j] * s) for j >= start and
// the dot of DotRow continued from the partial sums of columns [0, start); for out, out + x, out + x + b and
// b alone, ordinary and streaming stores.
HWY_NOINLINE void TestScaleRowDot() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(29);
    for (int64_t n : rt::Lengths()) {
      Buffer<T> g(n, 1, 0), x(n, 1, 1), b(n, 1, 3);
      for (int64_t start : {int64_t{0}, n / 16 / 2 * 16, n / 16 * 16}) {
        for (int which = 0; which < 4; ++which) {  // out + x + b, out + x, out, b
          for (int64_t offset : {0, 1}) {
            for (int form = 0; form < 6; ++form) {  // stores streamed or not; products by Mul, FMA, MulNoAssist
              const bool stream = (form & 1) != 0;
              const int product = form >> 1;  // ProductForm
              g.Fill(rng, -8, 8, Specials::kNone);
              x.Fill(rng, -8, 8, Specials::kNone);
              b.Fill(rng, -8, 8, Specials::kNone);
              const float s = std::ldexp(1.0f + float(rng() % 1000) / 999.0f, int(rng() % 5) - 2);
              Buffer<T> out(n, 1, offset);
              ScaleDotRows<T> r;
              r.g = g.row();
              r.out = which < 3 ? out.row() : nullptr;
              r.x = which < 2 ? x.row() : nullptr;
              r.b = which == 0 || which == 3 ? b.row() : nullptr;
              // The partial sums of columns [0, start), from the scalar model.
              float part[16];
              rt::RefDot(r.x, 1, r.b, 1, r.g, 1, start, 0, nullptr, part);
              const float want = r.x || r.b ? rt::RefDot(r.x, 1, r.b, 1, r.g, 1, n, start, part) : 0.0f;
              const float got = ScaleRowDot<T>(r, s, stream, n, start, start > 0 ? part : nullptr, product);
              hwy::FlushStream();
              const std::string more = "start " + std::to_string(start) + " case " + std::to_string(which) +
                                       " offset " + std::to_string(offset) + (stream ? " stream" : "") +
                                       (product == 1 ? " fma" : product == 2 ? " no-assist" : "");
              ASSERT_TRUE(rt::SameFloat(got, want)) << At<T>("ScaleRowDot", n, more);
              if (r.out == nullptr) {
                ASSERT_TRUE(out.Check([](int64_t) { return T(); }, n)) << At<T>("ScaleRowDot", n, more);
              } else {
                ASSERT_TRUE(out.Check([&](int64_t j) { return rt::Narrow<T>(rt::Widen(g.at(j)) * s); }, start))
                    << At<T>("ScaleRowDot", n, more);
              }
            }
          }
        }
      }
    }
  });
}

// ScaleDotToken, finished by ScaleRowDot exactly as the one-writer gradient does: up to kTokenGroup pairs
// of one token walk their rows together, TokenStep columns at a time (LoadPair / PutPair, the partial sums
// put back in column order by PairPartials); every out row and every dot as for each pair alone. Ordinary
// values; tiny ones (every product below fp32's normal range: MulNoAssistN's and ScaleNoAssistN's one test per
// step); and a mix (steps whose lanes are some below, some not); scales of either sign.
HWY_NOINLINE void TestScaleDotToken() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(31);
    std::vector<int64_t> lengths = rt::Lengths();
    lengths.push_back(3 * TokenStep<T>() + 5);
    lengths.push_back(3 * TokenStep<T>(true) + 5);
    // Both steps (TokenStep(short_step)), whichever this core takes (ShortTokenStep).
    for (int xb = 0; xb < 2; ++xb)
    for (int64_t n : lengths) {
      const bool short_step = xb != 0;
      const int64_t step = TokenStep<T>(short_step);
      const int64_t end = n / step * step;
      for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{3}, kTokenGroup}) {
        for (int scaled = 0; scaled < 2; ++scaled) {   // with scales (dots), without (copies only)
          for (int aligned = 0; aligned < 2; ++aligned) {  // outs start a cache line (streaming possible)
            for (int form = 0; form < 18; ++form) {  // stores streamed or not; Mul, FMA, MulNoAssist; values
              const bool stream = (form & 1) != 0;
              const int product = (form >> 1) % 3;  // ProductForm
              const int values = form / 6;          // ordinary, tiny (|v| < 2^-64), mixed
              const int emin = values == 0 ? -8 : -80;
              const int emax = values == 1 ? -65 : 8;
              Buffer<T> g(n, 1, 0), g_next(n, 1, 0);
              g.Fill(rng, emin, emax, Specials::kNone);
              std::vector<Buffer<T>> outs, xs, bs, x_next;
              TokenPairRows<T> pairs[kTokenGroup];
              for (int64_t m = 0; m < count; ++m) {
                outs.emplace_back(n, 1, aligned ? 0 : 1);
                xs.emplace_back(n, 1, 1);
                bs.emplace_back(n, 1, 2);
                x_next.emplace_back(n, 1, 0);
                xs.back().Fill(rng, emin, emax, Specials::kNone);
                bs.back().Fill(rng, emin, emax, Specials::kNone);
              }
              for (int64_t m = 0; m < count; ++m) {
                const size_t i = static_cast<size_t>(m);
                // Pair 1 writes no row (a dropped pair: b only); pair 2 has no bias.
                const bool written = m != 1;
                pairs[m].out = written ? outs[i].row() : nullptr;
                pairs[m].x = written && scaled ? xs[i].row() : nullptr;
                pairs[m].b = scaled && m != 2 ? bs[i].row() : nullptr;
                pairs[m].x_next = x_next[i].row();
                const bool tiny = values == 1 || (values == 2 && rng() % 2 == 0);
                const int e = tiny ? -64 - static_cast<int>(rng() % 8) : static_cast<int>(rng() % 5) - 2;
                const float sign = rng() % 2 == 0 ? 1.0f : -1.0f;
                pairs[m].s = scaled ? sign * std::ldexp(1.0f + float(rng() % 1000) / 999.0f, e) : 1.0f;
              }
              bool all_aligned = true;
              for (int64_t m = 0; m < count; ++m) {
                if (pairs[m].out != nullptr && !StreamAligned(pairs[m].out)) all_aligned = false;
              }
              HWY_ALIGN float part[kTokenGroup][16];
              constexpr bool kCan = CanStream<T>();
              const bool streamed = kCan && stream && all_aligned;
              const T* gn = g_next.row();
              // Unstreamed walks in the plain or fused form go as the callers take them (ScaleDotTokenWatched):
              // on tiny values they must switch after their first step (where the watch reads the flags) when
              // there is a second, on ordinary values never; to kNoAssist, or to kFused on a core that spares the
              // fused form (the watch told so on every other case, whatever this core is). The others walk in
              // two parts, split at a step boundary: the second goes on from the first's partial sums.
              const int64_t steps = end / step;
              const int64_t split = (form % (steps + 1)) * step;
              auto walk = [&](auto dot) {
                constexpr bool kD = decltype(dot)::value;
                if (product != kNoAssist && !stream) {
                  const bool spared = aligned != 0;
                  UnderflowWatch watch(WatchesUnderflow<T>(), spared);
                  const int got = ScaleDotTokenWatched<T, kD>(streamed, watch, product == kFused, g.row(), gn, pairs,
                                                              count, end, n, part, short_step);
                  const bool switches = MOEGRAD_UNDERFLOW_WATCH_MXCSR && WatchesUnderflow<T>() && kD &&
                                        values == 1 && end > step;
                  if (values != 2) {
                    EXPECT_EQ(got, switches ? (spared ? kFused : kNoAssist) : product)
                        << At<T>("ScaleDotTokenWatched", n) << (spared ? " spared" : "");
                  }
                  return got;
                }
                const int64_t reached =
                    ScaleDotTokenAny<T, kD>(streamed, product, g.row(), gn, pairs, count, 0, split, n, part, nullptr,
                                            short_step);
                EXPECT_EQ(reached, split) << At<T>("ScaleDotToken, first part", n);
                ScaleDotTokenAny<T, kD>(streamed, product, g.row(), gn, pairs, count, split, end, n, part, nullptr,
                                        short_step);
                return product;
              };
              const int tail_form = scaled ? walk(std::true_type()) : walk(std::false_type());
              for (int64_t m = 0; m < count; ++m) {
                const size_t i = static_cast<size_t>(m);
                ScaleDotRows<T> q;
                q.g = g.row();
                q.out = pairs[m].out;
                q.x = pairs[m].x;
                q.b = pairs[m].b;
                const std::string more = "pair " + std::to_string(m) + " of " + std::to_string(count) +
                                         (scaled ? " scaled" : "") + (aligned ? " aligned" : "") +
                                         (stream ? " stream" : "") +
                                         (product == 1 ? " fma" : product == 2 ? " no-assist" : "") +
                                         (values == 1 ? " tiny" : values == 2 ? " mixed" : "") +
                                         " step " + std::to_string(step);
                if (scaled) {
                  const float got = ScaleRowDot<T>(q, pairs[m].s, stream, n, end, part[m], tail_form);
                  const float want = rt::RefDot(q.x, 1, q.b, 1, q.g, 1, n);
                  ASSERT_TRUE(rt::SameFloat(got, want)) << At<T>("ScaleDotToken", n, more);
                } else if (q.out != nullptr && end < n) {
                  ScaleRowDot<T>(q, 1.0f, stream, n, end, nullptr, tail_form);
                }
                hwy::FlushStream();
                if (q.out == nullptr) {
                  ASSERT_TRUE(outs[i].Check([](int64_t) { return T(); }, n)) << At<T>("ScaleDotToken", n, more);
                } else {
                  const float s = pairs[m].s;
                  ASSERT_TRUE(outs[i].Check([&](int64_t j) { return rt::Narrow<T>(rt::Widen(g.at(j)) * s); }))
                      << At<T>("ScaleDotToken", n, more);
                }
              }
            }
          }
        }
      }
    }
  });
}

// A token walk's out = rne(g * s) once its products take the assist-free form, for every bf16 gradY value
// (all 2^16 patterns in order, so that each 256-byte step holds one sign and one exponent: whole steps below
// fp32's normal range take the one-test path, bf16 on AVX-512 the rounding by one float add) and scales of
// either sign: powers of two, whose exact products land on bf16 rounding ties of the subnormal grid, and
// scales with a full mantissa, whose products round to fp32 first (a second rounding, to bf16, that must
// not be skipped); for fp32 rows, random values of every exponent in the same blocks.
HWY_NOINLINE void TestScaleTokenEveryBF16() {
  std::mt19937 rng(37);
  std::vector<float> scales;
  for (int e = -45; e <= 2; ++e) {
    for (float sign : {1.0f, -1.0f}) {
      scales.push_back(sign * std::ldexp(1.0f, e));
      scales.push_back(sign * std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffffu) / 8388608.0f, e));
    }
  }
  auto run = [&](auto zero, Buffer<decltype(zero)>& g, int64_t n) {
    using T = decltype(zero);
    for (size_t k = 0; k < scales.size(); ++k) {
      const float s = scales[k];
      const bool stream = k % 2 == 0;
      Buffer<T> out(n, 1, 0);
      TokenPairRows<T> pair;
      pair.out = out.row();
      pair.s = s;
      ScaleDotTokenAny<T, false>(stream && CanStream<T>(), kNoAssist, g.row(), nullptr, &pair, 1, 0, n, n, nullptr,
                                 nullptr);
      hwy::FlushStream();
      ASSERT_TRUE(out.Check([&](int64_t j) { return rt::Narrow<T>(rt::Widen(g.at(j)) * s); }))
          << At<T>("ScaleDotToken every value", n, "s " + std::to_string(s));
    }
  };
  const int64_t n = int64_t{1} << 16;
  Buffer<hwy::bfloat16_t> gb(n, 1, 0);
  for (int64_t j = 0; j < n; ++j) gb.at(j) = rt::FromBits<hwy::bfloat16_t>(static_cast<uint32_t>(j));
  run(hwy::bfloat16_t{}, gb, n);
  Buffer<float> gf(n, 1, 0);
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t top = static_cast<uint32_t>(j / TokenStep<float>()) % 512;  // sign and exponent per step
    gf.at(j) = rt::FromBits<float>((top << 23) | (rng() & 0x7fffffu));
  }
  run(float{}, gf, n);
}

// --- products without a microcode assist ---------------------------------------------------------------

// Factor pairs for the assist-free products, in blocks of 16 lanes (a whole number of vectors on every
// target) of one kind each, so that every branch is taken: ordinary products; products below fp32's
// smallest normal 2^-126, down past 2^-150 (zero), half of them on a rounding tie of the subnormal grid
// ((2m + 1) * 2^-150); products within a few binades of 2^-126 either side; and a mix of all of these with
// zeros, subnormals, infinities, NaNs and the largest float.
inline float TinyTestFactor(std::mt19937& rng, int emin, int emax) {
  return rt::RandomValue<float>(rng, emin, emax, Specials::kNone);
}
inline void NoAssistPair(std::mt19937& rng, int kind, float* a, float* b) {
  const uint32_t r = rng();
  const bool mixed = kind == 3;
  if (mixed) kind = static_cast<int>(r % 3);
  if (mixed && (r >> 4) % 4 == 0) {  // a special factor
    const uint32_t sign = (r >> 8) & 1u;
    const uint32_t picks[6] = {0u, 0x00000001u, 0x7f800000u, 0x7f7fffffu, 0x7fc01234u,
                               static_cast<uint32_t>(rng() & 0x007fffffu)};
    *a = F32FromBits((sign << 31) | picks[(r >> 9) % 6]);
    *b = TinyTestFactor(rng, -130, 10);
    if ((r >> 12) & 1u) std::swap(*a, *b);
    return;
  }
  switch (kind) {
    case 0:
      *a = TinyTestFactor(rng, -20, 20);
      *b = TinyTestFactor(rng, -20, 20);
      return;
    case 1: {
      if ((r >> 3) & 1u) {  // a tie: (2m + 1) * 2^-23 times 2^-127
        const uint32_t m = rng() & 0x3fffffu;
        *a = std::ldexp(static_cast<float>(2 * m + 1), -23) * (((r >> 5) & 1u) ? -1.0f : 1.0f);
        *b = std::ldexp(1.0f, -127);
      } else {
        const int ea = -100 + static_cast<int>(rng() % 81);  // [-100, -20]
        const int total = -175 + static_cast<int>(rng() % 49);  // [-175, -127]
        *a = TinyTestFactor(rng, ea, ea);
        *b = TinyTestFactor(rng, total - ea, total - ea);
      }
      if ((r >> 6) & 1u) std::swap(*a, *b);
      return;
    }
    default: {
      const int ea = -100 + static_cast<int>(rng() % 101);
      const int total = -129 + static_cast<int>(rng() % 6);  // [-129, -124]
      *a = TinyTestFactor(rng, ea, ea);
      *b = TinyTestFactor(rng, total - ea, total - ea);
      return;
    }
  }
}

inline ::testing::AssertionResult SameProduct(float got, float a, float b) {
  volatile float x = a;  // the scalar multiply at run time, not folded
  const float want = x * b;
  if (F32Bits(got) == F32Bits(want) || (std::isnan(got) && std::isnan(want))) return ::testing::AssertionSuccess();
  char msg[160];
  std::snprintf(msg, sizeof(msg), "%a * %a: got %a (0x%08x), want %a (0x%08x)", a, b, got, F32Bits(got), want,
                F32Bits(want));
  return ::testing::AssertionFailure() << msg;
}

// MulNoAssist rounds every product exactly as the scalar multiply: subnormal results, ties of the subnormal grid,
// products that round up to 2^-126, signed zeros, specials; with its addend from either factor, vector or
// scalar (BelowNormalAddend), as the loops take it for a shared gradY vector or scale. So do the element
// loops' scalar forms (ScalarProduct: MulNoAssistScalar, the scalar FMA, the plain multiply).
HWY_NOINLINE void TestMulNoAssist() {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  constexpr size_t kCount = size_t{1} << 16;
  std::mt19937 rng(29);
  auto a = hwy::AllocateAligned<float>(kCount);
  auto b = hwy::AllocateAligned<float>(kCount);
  auto out = hwy::AllocateAligned<float>(kCount);
  for (size_t i = 0; i < kCount; ++i) NoAssistPair(rng, static_cast<int>((i / 16) % 4), &a[i], &b[i]);
  for (int order = 0; order < 2; ++order) {  // the addend of b, then a's addend with the factors swapped
    for (size_t i = 0; i < kCount; i += lanes) {
      const VF va = hn::Load(d, a.get() + i);
      const VF vb = hn::Load(d, b.get() + i);
      const VF p = order == 0 ? MulNoAssist(va, vb) : MulNoAssist(vb, va, BelowNormalAddend(va));
      hn::Store(p, d, out.get() + i);
    }
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_TRUE(SameProduct(out[i], a[i], b[i])) << "MulNoAssist lane " << i << " order " << order;
    }
  }
  // One factor for a whole vector, its addend from the scalar: that of its first lane, with every lane's a.
  for (size_t i = 0; i < kCount; i += lanes) {
    const float s = b[i];
    const VF p = MulNoAssist(hn::Load(d, a.get() + i), hn::Set(d, s), hn::Set(d, BelowNormalAddend(s)));
    hn::Store(p, d, out.get() + i);
  }
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(SameProduct(out[i], a[i], b[i / lanes * lanes])) << "MulNoAssist, one factor, lane " << i;
  }
  // One element at a time, every form of the element-by-element loops (ScalarProduct), both orders.
  for (size_t i = 0; i < kCount; ++i) {
    ForEachScalarForm([&](auto form) {
      constexpr int kForm = decltype(form)::value;
      ASSERT_TRUE(SameProduct(ScalarProduct<kForm>(a[i], b[i]), a[i], b[i])) << "ScalarProduct" << FormName(kForm);
      ASSERT_TRUE(SameProduct(ScalarProduct<kForm>(b[i], a[i]), b[i], a[i])) << "ScalarProduct" << FormName(kForm);
    });
  }
}

// SumTermsUnit and AddGroup give the scalar model's bits, rne((x_0 + b_0) * s_0 + (x_1 + b_1) * s_1 + ...)
// left to right, in the fused form and in the assist-free form a walk takes after an underflow (AddGroup in
// each form of its element loop too, whole tiles element by element included), on ordinary values and on
// values whose products fall below fp32's normal range; so does SumTermsRowWatched, whose long rows of 9 and
// 16 terms go in groups through an fp32 row (SumTermsSplit).
HWY_NOINLINE void TestSumTermsForms() {
  ForEachType([&](auto zero) {
    using T = decltype(zero);
    std::mt19937 rng(31);
    // Tiny rows: values near 2^-70 (fp16: its smallest normals) times scales that take products below 2^-126.
    const bool f16 = hwy::IsSame<T, hwy::float16_t>();
    std::vector<int64_t> lengths = rt::Lengths();
    lengths.push_back(kSplitColumns / 2 + 33);  // 9 and 16 terms: SumTermsRowWatched takes SumTermsSplit
    for (int64_t n : lengths) {
      for (int count : {1, 2, 5, 9, 16, 21}) {  // 21: three groups through the fp32 row (kAccOut, both, kAccIn)
        if (n > 2048 && count != 9 && count != 16) continue;
        for (bool bias : {false, true}) {
          for (bool tiny : {false, true}) {
            std::vector<Buffer<T>> xs, bs;
            std::vector<Term<T>> terms;
            for (int m = 0; m < count; ++m) {
              xs.emplace_back(n, 1, 0);
              bs.emplace_back(n, 1, 0);
              const Specials sp = m == 0 ? Specials::kNoNaN : Specials::kNone;
              if (tiny) {
                xs.back().Fill(rng, rt::TinyEmin<T>(), rt::TinyEmax<T>(), sp);
                bs.back().Fill(rng, rt::TinyEmin<T>(), rt::TinyEmax<T>(), Specials::kNone);
              } else {
                xs.back().Fill(rng, -8, 8, sp);
                bs.back().Fill(rng, -8, 8, Specials::kNone);
              }
              const int e = tiny ? (f16 ? -118 : -70) + static_cast<int>(rng() % 10) : static_cast<int>(rng() % 5) - 2;
              float s = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 999.0f, e);
              if (rng() % 8 == 0) s = -s;
              if (rng() % 16 == 0) s = 0.0f;
              terms.push_back({xs.back().row(), 1, bias ? bs.back().row() : nullptr, 1, s, m != 0 || count == 1});
            }
            auto expected = [&](int64_t j) {
              float acc = 0.0f;
              for (int m = 0; m < count; ++m) {
                const Term<T>& t = terms[static_cast<size_t>(m)];
                float v = rt::Widen(t.x[j]);
                if (t.b != nullptr) v = v + rt::Widen(t.b[j]);
                if (t.scaled) v = v * t.s;
                acc = m == 0 ? v : acc + v;
              }
              return rt::Narrow<T>(acc);
            };
            const std::string more = "count " + std::to_string(count) + (bias ? " bias" : "") + (tiny ? " tiny" : "");
            HWY_ALIGN float acc[kTile];
            auto check = [&](auto form) {
              constexpr int kForm = decltype(form)::value;
              const std::string what = more + (kForm == kNoAssist ? " no-assist" : " fused");
              Buffer<T> dst(n, 1, 0);
              if (count > kGroup) {
                // Groups of at most kGroup terms, the sums carried in an fp32 row of n floats.
                std::vector<float> row(static_cast<size_t>(n));
                const Term<T>* t = terms.data();
                SumTermsUnit<T, false, false, true, kForm>(t, kGroup, t + kGroup, 3, dst.row(), n, row.data());
                SumTermsUnit<T, false, true, true, kForm>(t + kGroup, 3, t + kGroup + 3, 2, dst.row(), n, row.data());
                SumTermsUnit<T, false, true, false, kForm>(t + kGroup + 3, count - kGroup - 3, nullptr, 0, dst.row(), n,
                                                           row.data());
                ASSERT_TRUE(dst.Check(expected)) << At<T>("SumTermsUnit in groups", n, what);
                return;
              }
              SumTermsUnit<T, false, false, false, kForm>(terms.data(), count, nullptr, 0, dst.row(), n);
              ASSERT_TRUE(dst.Check(expected)) << At<T>("SumTermsUnit", n, what);
            };
            check(std::integral_constant<int, kFused>());
            check(std::integral_constant<int, kNoAssist>());
            if (count <= kGroup && n <= kTile) {
              // A tile in each form of the element loops (ScalarFormAfter), as vectors with the last columns
              // one at a time, and every column one at a time as for strided rows.
              ForEachScalarForm([&](auto form) {
                constexpr int kForm = decltype(form)::value;
                for (bool unit : {true, false}) {
                  Buffer<T> tile(n, 1, 0);
                  AddGroup<kForm>(terms.data(), count, true, true, acc, tile.row(), 1, n, unit);
                  ASSERT_TRUE(tile.Check(expected))
                      << At<T>("AddGroup", n, more + FormName(kForm) + (unit ? "" : " element by element"));
                }
              });
            }
            if (count <= kGroup) {
              // As the forward walks take a row: a first row (probe) of tiny products switches to kNoAssist
              // after its first kTermProbeBytes (where the watch is read), the rest of it in that form; a row
              // after it does not split. The same bits either way.
              const int64_t probe_n = kTermProbeBytes / static_cast<int64_t>(sizeof(T));
              // A product below 2^-126, or a subnormal operand (the denormal-operand flag), in the columns
              // before the watch is read.
              bool tiny_product = false;
              for (int64_t j = 0; j < std::min(n, probe_n); ++j) {
                for (const Term<T>& t : terms) {
                  float v = rt::Widen(t.x[j]);
                  if (std::fpclassify(v) == FP_SUBNORMAL) tiny_product = true;
                  if (t.b != nullptr) {
                    if (std::fpclassify(rt::Widen(t.b[j])) == FP_SUBNORMAL) tiny_product = true;
                    v = v + rt::Widen(t.b[j]);
                  }
                  const double p = static_cast<double>(v) * static_cast<double>(t.s);
                  if (t.scaled && p != 0.0 && std::fabs(p) < 0x1p-126) tiny_product = true;
                }
              }
              // A watch whose core spares the fused form (UnderflowWatch::fused_spared, AMD) never switches;
              // both kinds are taken on any core.
              for (int probe = 0; probe < 2; ++probe) {
                for (bool stream : {false, true}) {
                  for (bool spared : {false, true}) {
                    Buffer<T> dst(n, 1, 0);
                    UnderflowWatch watch(WatchesUnderflow<T>(), spared);
                    const int got =
                        SumTermsRowWatched<T>(watch, probe == 1, stream, terms.data(), count, nullptr, 0, dst.row(), n);
                    hwy::FlushStream();
                    const std::string how = more + (spared ? " spared" : "");
                    ASSERT_TRUE(dst.Check(expected)) << At<T>("SumTermsRowWatched", n, how);
                    const bool switches = MOEGRAD_UNDERFLOW_WATCH_MXCSR && WatchesUnderflow<T>() && tiny_product &&
                                          probe == 1 && n > probe_n && !spared;
                    if (tiny) {
                      EXPECT_EQ(got, switches ? kNoAssist : kFused) << At<T>("SumTermsRowWatched", n, how);
                    }
                    // The form the rows after it take: kNoAssist once an underflow was seen, unless spared.
                    EXPECT_EQ(TermsNoAssist(watch), watch.seen() && !spared) << At<T>("TermsNoAssist", n, how);
                  }
                }
              }
            }
          }
        }
      }
    }
  });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

HWY_BEFORE_TEST(RowOpsTest);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestWidenEveryPattern);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestNarrowRoundsToNearestEven);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestPairsRoundTripAndRoundTies);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestZeroRows);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestScaleRow);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestSumRowsOf);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestGatherSums);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestDotRow);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestScaleRowDot);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestScaleDotToken);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestScaleTokenEveryBF16);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestMulNoAssist);
HWY_EXPORT_AND_TEST_P(RowOpsTest, TestSumTermsForms);

// The targets the tests above run on: those this machine supports among those compiled.
TEST(RowOpsTargets, ListsTheTargetsTested) {
  std::string names;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) names += std::string(" ") + hwy::TargetName(target);
  std::fprintf(stderr, "row_ops_test: targets tested:%s\n", names.c_str());
  EXPECT_FALSE(names.empty());
}

// 128-byte steps for the 16-bit token walks on AVX2 on AMD's Zen 3 and later only: not on Zen 1 and 2
// (family 0x17), on Hygon's (0x18), on Intel's, or on an unknown CPU.
TEST(TokenStepRule, WideStepsOnAmdFrom19hOnly) {
  EXPECT_TRUE(WideTokenStepsOn("AuthenticAMD", 0x19));
  EXPECT_TRUE(WideTokenStepsOn("AuthenticAMD", 0x1A));
  EXPECT_FALSE(WideTokenStepsOn("AuthenticAMD", 0x17));
  EXPECT_FALSE(WideTokenStepsOn("HygonGenuine", 0x18));
  EXPECT_FALSE(WideTokenStepsOn("GenuineIntel", 6));
  EXPECT_FALSE(WideTokenStepsOn("", 0));
}

// The vendors whose cores keep the fused form after an underflow: AMD's and Hygon's; Intel's, any other, and a
// string that is not a whole vendor take MulNoAssist. A watch that is not enabled never reports it spared.
TEST(UnderflowWatchRule, FusedSparedOnAmdAndHygonOnly) {
  EXPECT_TRUE(FusedSparesUnderflowOn("AuthenticAMD"));
  EXPECT_TRUE(FusedSparesUnderflowOn("HygonGenuine"));
  EXPECT_FALSE(FusedSparesUnderflowOn("GenuineIntel"));
  EXPECT_FALSE(FusedSparesUnderflowOn("CentaurHauls"));
  EXPECT_FALSE(FusedSparesUnderflowOn("  Shanghai  "));
  EXPECT_FALSE(FusedSparesUnderflowOn("AuthenticAM"));
  EXPECT_FALSE(FusedSparesUnderflowOn(""));
  EXPECT_FALSE(UnderflowWatch(false, true).fused_spared());
  EXPECT_EQ(UnderflowWatch(true, true).fused_spared(), MOEGRAD_UNDERFLOW_WATCH_MXCSR != 0);
  EXPECT_FALSE(UnderflowWatch(true, false).fused_spared());
  std::fprintf(stderr, "row_ops_test: this CPU spares the fused form after an underflow: %s\n",
               FusedSparesUnderflow() ? "yes" : "no");
}

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
