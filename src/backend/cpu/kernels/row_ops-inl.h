// Row primitives shared by every kernel, compiled once per SIMD target (include after foreach_target.h).
//
// Element types: float, hwy::float16_t, hwy::bfloat16_t. Rows are widened to fp32, computed in fp32 with
// separately rounded multiplies and adds (never fused, so every target and the scalar tails agree bit for
// bit; a vector multiply goes through MulRounded), and rounded once to the element type,
// round-to-nearest-even. Rows with an inner stride other than 1 take a
// scalar path with exactly the same arithmetic.

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "src/backend/cpu/kernels/kernel_types.h"
#include "src/backend/cpu/kernels/underflow_watch.h"
#include "src/core/float16.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// fp32 vectors of at most 16 lanes: the canonical dot product keeps 16 partial sums on every target.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

// a * b rounded once, bit for bit as hn::Mul rounds it, whatever the values: the exact product plus -0 is
// the exact product (a zero product keeps its sign: +0 + -0 = +0, -0 + -0 = -0), and the fused multiply-add
// rounds it once. Where the target has FMA the product goes through it because a multiply of normal
// operands whose product underflows (a subnormal, or zero) takes a slow path on some cores with gradual
// underflow (about 3x the time of a bf16 scale-and-dot loop on an AMD Zen 3 core; tiny gradients, `moegrad
// bench --values tiny`), and there the FMA does not; on an Intel Xeon with AVX-512 and AMX it does
// too (MulNoAssist, below, avoids it). A NaN stays a NaN (its payload, when both operands are NaNs, may come
// from either: NaN payloads are not part of the contract). The scale-and-dot loops of the gradients
// (row_ops_scale_dot-inl.h) take the plain multiply, the forward walks (row_ops_terms-inl.h) this one, and both
// MulNoAssist once a product has underflowed, unless the core spares the fused form (underflow_watch.h);
// DotRow keeps hn::Mul.
HWY_INLINE VF MulRounded(VF a, VF b) {
#if HWY_NATIVE_FMA
  return hn::MulAdd(a, b, hn::Set(DF(), -0.0f));
#else
  return hn::Mul(a, b);
#endif
}

// The product of two lanes of which one is tiny (0 < |v| < 2^-63) may be below fp32's normal range; two
// factors of at least 2^-63 (or a zero) make a normal product, or zero.
HWY_INLINE hn::Mask<DF> TinyLanes(VF v) {
  const DF d;
  const VF mag = hn::Abs(v);
  return hn::And(hn::Lt(mag, hn::Set(d, 0x1p-63f)), hn::Gt(mag, hn::Zero(d)));
}

// a * b rounded once, taken in double: the product of two floats is exact there (48 bits of 53, never below
// double's normal range) and rounds once to fp32 in the demotion, subnormals included, with no float multiply.
HWY_INLINE VF MulInDouble(VF a, VF b) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(DF(), static_cast<float>(static_cast<double>(hn::GetLane(a)) * static_cast<double>(hn::GetLane(b))));
#else
  const DF d;
  const hn::Half<DF> dh;
  const hn::Repartition<double, DF> dd;
  const auto lo = hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, a)), hn::PromoteTo(dd, hn::LowerHalf(dh, b)));
  const auto hi = hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, a)), hn::PromoteTo(dd, hn::UpperHalf(dh, b)));
  return hn::Combine(d, hn::DemoteTo(dh, hi), hn::DemoteTo(dh, lo));
#endif
}

// 2^-126 with b's sign: the addend MulBelowNormal takes for a factor b, computed once where b is shared (a
// gradY vector by all the pairs of a token, a scale by a whole row).
HWY_INLINE VF BelowNormalAddend(VF b) {
  const DF d;
  return hn::Or(hn::And(b, hn::SignBit(d)), hn::Set(d, 0x1p-126f));
}
HWY_INLINE float BelowNormalAddend(float b) { return std::copysign(0x1p-126f, b); }

// Products below fp32's normal range without a subnormal in or out of any float operation, by a fused
// multiply-add with a normal result: y = fma(a, b, c) with c = 2^-126 carrying the product's sign (from
// cb = BelowNormalAddend(b) and a's sign) is sign * rne(2^-126 + |a * b|), and for |a * b| < 2^-126 that sum
// lies in [2^-126, 2^-125], whose floats are spaced 2^-149 apart exactly as the subnormals are: rounding it is
// rounding |a * b| to the subnormal grid, ties to even included (2^-126 is an even number of steps), once. Its
// bits less those of 2^-126 are then the bits of rne(a * b), the sign kept (a zero product gives c itself: a
// zero of the product's sign), and 2^-125 (a product that rounds up to the smallest normal) gives 2^-126.
// Where |y| < 2^-125 (its exponent field is 1: never 0, as |y| >= 2^-126, and a NaN's is all ones), |a * b| <
// 2^-126 for certain; elsewhere the bits are not the product's.
// MulBelowNormal returns y's bits; BelowNormalLanes tells those lanes from them, AllBelowNormal every lane of
// several y's from their OR, and BelowNormalBits gives the product's bits there.
#undef MOEGRAD_ROW_OPS_SUBNORMAL_FMA  // per target
#if HWY_NATIVE_FMA
#define MOEGRAD_ROW_OPS_SUBNORMAL_FMA 1
using VU32 = hn::Vec<hn::RebindToUnsigned<DF>>;
HWY_INLINE VU32 MulBelowNormal(VF a, VF b, VF cb) {
  const DF d;
  return hn::BitCast(hn::RebindToUnsigned<DF>(), hn::MulAdd(a, b, hn::Xor(hn::And(a, hn::SignBit(d)), cb)));
}
HWY_INLINE hn::Mask<DF> BelowNormalLanes(VU32 y) {
  const hn::RebindToUnsigned<DF> du;
  return hn::RebindMask(DF(), hn::Eq(hn::And(y, hn::Set(du, 0x7F000000u)), hn::Zero(du)));
}
HWY_INLINE bool AllBelowNormal(VU32 any) {
  const hn::RebindToUnsigned<DF> du;
  return hn::AllTrue(du, hn::Eq(hn::And(any, hn::Set(du, 0x7F000000u)), hn::Zero(du)));
}
HWY_INLINE VF BelowNormalBits(VU32 y) {
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(DF(), hn::Sub(y, hn::Set(du, 0x00800000u)));
}

// `no` where m is set, a * b elsewhere, the float multiply computing only the lanes where m is clear (a
// masked multiply on AVX-512; elsewhere those lanes multiply a zero).
HWY_INLINE VF MulWhereNot(hn::Mask<DF> m, VF no, VF a, VF b) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return VF{_mm512_mask_mul_ps(no.raw, _knot_mask16(m.raw), a.raw, b.raw)};
#else
  return hn::IfThenElse(m, no, hn::Mul(hn::IfThenZeroElse(m, a), b));
#endif
}
#else
#define MOEGRAD_ROW_OPS_SUBNORMAL_FMA 0
#endif

// a * b rounded once, bit for bit as hn::Mul rounds it, with no subnormal in or out of any float multiply; cb
// is BelowNormalAddend(b). On cores where a multiply whose product underflows takes a microcode assist even in
// the fused form (an Intel Xeon with AVX-512 and AMX: about 40 times a multiply), this keeps tiny values near
// the speed of ordinary ones rather than tens of times slower; it costs ordinary values five operations for
// one, so the loops take it only once their UnderflowWatch has seen an underflow (row_ops_scale_dot-inl.h,
// row_ops_terms-inl.h). With FMA, without a branch: the lanes whose product is below the normal range take
// BelowNormalBits, the others the float multiply (MulWhereNot); without FMA, a vector with a tiny lane
// (TinyLanes) takes those lanes' products in double (MulInDouble). A non-finite factor always goes through the
// float multiply.
HWY_INLINE VF MulNoAssist(VF a, VF b, VF cb) {
#if MOEGRAD_ROW_OPS_SUBNORMAL_FMA
  const VU32 y = MulBelowNormal(a, b, cb);
  return MulWhereNot(BelowNormalLanes(y), BelowNormalBits(y), a, b);
#else
  (void)cb;
  const DF d;
  hn::Mask<DF> tiny = hn::Or(TinyLanes(a), TinyLanes(b));
  if (HWY_LIKELY(hn::AllFalse(d, tiny))) return MulRounded(a, b);
  tiny = hn::And(tiny, hn::And(hn::IsFinite(a), hn::IsFinite(b)));  // a non-finite factor: the float multiply
  const VF one = hn::Set(d, 1.0f);
  const VF rest = MulRounded(hn::IfThenElse(tiny, one, a), hn::IfThenElse(tiny, one, b));
  return hn::IfThenElse(tiny, MulInDouble(a, b), rest);
#endif
}
HWY_INLINE VF MulNoAssist(VF a, VF b) { return MulNoAssist(a, b, BelowNormalAddend(b)); }

// a * b for one element, rounded once: the fused form (MulRounded's, one scalar FMA) where the target has FMA,
// else the plain multiply. On AMD cores a scalar multiply whose product underflows takes the slow path and the
// FMA does not (a strided loop of products below fp32's normal range on the Zen 5 guest: 0.56 ns an element
// with the multiply, 0.22 with the FMA, as for ordinary products with either).
HWY_INLINE float MulRoundedScalar(float a, float b) {
#if HWY_NATIVE_FMA && (defined(__GNUC__) || defined(__clang__))
  return __builtin_fmaf(a, b, -0.0f);
#else
  return a * b;
#endif
}

// a * b for one element, rounded once, with no subnormal in or out of any float multiply: MulNoAssist's
// construction in one lane, for the element-by-element loops after an underflow on a core whose scalar FMA
// has the slow path too. With FMA, y = fma(a, b, 2^-126 with the product's sign) has the product's bits plus
// those of 2^-126 where |a * b| < 2^-126 (there |y| < 2^-125), and the plain multiply, whose product is
// then normal (or non-finite), rounds the rest; without FMA, a product with a tiny finite factor is taken in
// double (exact there, rounded once in the demotion).
HWY_INLINE float MulNoAssistScalar(float a, float b) {
#if HWY_NATIVE_FMA
  // In one vector lane, so that the sign and bit operations stay in the float registers.
  const hn::CappedTag<float, 1> d1;
  const hn::RebindToUnsigned<decltype(d1)> du1;
  const auto va = hn::Set(d1, a);
  const auto vb = hn::Set(d1, b);
  const auto c = hn::Or(hn::And(hn::Xor(va, vb), hn::SignBit(d1)), hn::Set(d1, 0x1p-126f));
  const auto y = hn::MulAdd(va, vb, c);
  if (!(std::fabs(hn::GetLane(y)) < 0x1p-125f)) return a * b;  // a normal product, or a non-finite one
  return hn::GetLane(hn::BitCast(d1, hn::Sub(hn::BitCast(du1, y), hn::Set(du1, 0x00800000u))));
#else
  const float fa = std::fabs(a), fb = std::fabs(b);
  const bool tiny = (fa < 0x1p-63f && fa > 0.0f) || (fb < 0x1p-63f && fb > 0.0f);
  if (tiny && std::isfinite(a) && std::isfinite(b)) {
    return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
  }
  return a * b;
#endif
}

// The products of the element-by-element loops (strided rows, the last columns of unit-stride ones) in
// ProductForm kForm: kPlainMul the plain multiply, which costs ordinary values less in those loops than the
// FMA (7-14% in a strided walk); kFused MulRoundedScalar; kNoAssist MulNoAssistScalar. The same bits. The
// callers take the form their UnderflowWatch gives (ScalarFormAfter, WithScalarForm in underflow_watch.h).
template <int kForm>
HWY_INLINE float ScalarProduct(float a, float b) {
  if constexpr (kForm == kNoAssist) {
    return MulNoAssistScalar(a, b);
  } else if constexpr (kForm == kFused) {
    return MulRoundedScalar(a, b);
  } else {
    return a * b;
  }
}

// The products p[i] = a[i] * b[i], i < kN, MulNoAssist's bits (cb[i] = BelowNormalAddend(b[i])), with one test
// for all kN vectors: when every lane of every product is below the normal range (as every product of a tiny
// row is), BelowNormalBits alone, without a lane test and multiply per vector.
template <size_t kN>
HWY_INLINE void MulNoAssistN(const VF* a, const VF* b, const VF* cb, VF* p) {
#if MOEGRAD_ROW_OPS_SUBNORMAL_FMA
  VU32 y[kN];
  VU32 any = hn::Zero(hn::RebindToUnsigned<DF>());
  for (size_t i = 0; i < kN; ++i) {
    y[i] = MulBelowNormal(a[i], b[i], cb[i]);
    any = hn::Or(any, y[i]);
  }
  if (AllBelowNormal(any)) {
    for (size_t i = 0; i < kN; ++i) p[i] = BelowNormalBits(y[i]);
    return;
  }
  for (size_t i = 0; i < kN; ++i) p[i] = MulWhereNot(BelowNormalLanes(y[i]), BelowNormalBits(y[i]), a[i], b[i]);
#else
  for (size_t i = 0; i < kN; ++i) p[i] = MulNoAssist(a[i], b[i], cb[i]);
#endif
}

// MulNoAssistN for kN vectors a[i] by one shared factor b (cb = BelowNormalAddend(b)): the forward walks' rows by
// their scale (TermPair in row_ops_terms-inl.h). A row of tiny values takes, per vector, the fused form, its
// sign and an integer subtraction, with one lane test for all kN (a lane test and a masked multiply per vector
// ran a one-thread bf16 combine of tiny values at about 0.5-0.6 of ordinary values' speed on the Intel Xeon).
template <size_t kN>
HWY_INLINE void MulNoAssistN(const VF* a, VF b, VF cb, VF* p) {
#if MOEGRAD_ROW_OPS_SUBNORMAL_FMA
  VU32 y[kN];
  VU32 any = hn::Zero(hn::RebindToUnsigned<DF>());
  for (size_t i = 0; i < kN; ++i) {
    y[i] = MulBelowNormal(a[i], b, cb);
    any = hn::Or(any, y[i]);
  }
  if (HWY_LIKELY(AllBelowNormal(any))) {
    for (size_t i = 0; i < kN; ++i) p[i] = BelowNormalBits(y[i]);
    return;
  }
  for (size_t i = 0; i < kN; ++i) p[i] = MulWhereNot(BelowNormalLanes(y[i]), BelowNormalBits(y[i]), a[i], b);
#else
  for (size_t i = 0; i < kN; ++i) p[i] = MulNoAssist(a[i], b, cb);
#endif
}

#if MOEGRAD_ROW_OPS_SUBNORMAL_FMA
// MulBelowNormal for g[i] * s, i < kN (cg[i] = BelowNormalAddend(g[i])), its FMA taking |s| so that cg[i] carries
// the product's sign but for s's; `fix` is the integer whose addition to y[i] gives the bits of rne(g[i] * s)
// in y's lanes below 2^-125 (2^-126's bits taken away, s's sign put in: plus 2^31 mod 2^32 flips the sign).
// Returns AllBelowNormal of every y[i].
template <size_t kN>
HWY_INLINE bool ScaleBelowNormalN(const VF* g, const VF* cg, float s, VU32* y, VU32* fix) {
  const hn::RebindToUnsigned<DF> du;
  const VF abs_s = hn::Set(DF(), std::fabs(s));
  *fix = hn::Set(du, std::signbit(s) ? 0x7F800000u : 0xFF800000u);
  VU32 any = hn::Zero(du);
  for (size_t i = 0; i < kN; ++i) {
    y[i] = hn::BitCast(du, hn::MulAdd(g[i], abs_s, cg[i]));
    any = hn::Or(any, y[i]);
  }
  return AllBelowNormal(any);
}
// rne(g * s) from ScaleBelowNormalN's y and fix for one vector g whose lanes need not all be below.
HWY_INLINE VF ScaleFromBelowNormal(VU32 y, VU32 fix, VF g, float s) {
  return MulWhereNot(BelowNormalLanes(y), hn::BitCast(DF(), hn::Add(y, fix)), g, hn::Set(DF(), s));
}
#endif

// The products p[i] = g[i] * s, i < kN, MulNoAssist's bits (cg[i] = BelowNormalAddend(g[i]), shared by every s
// a gradY vector is scaled by), with MulNoAssistN's one test for all kN (ScaleBelowNormalN).
template <size_t kN>
HWY_INLINE void ScaleNoAssistN(const VF* g, const VF* cg, float s, VF* p) {
  const DF d;
#if MOEGRAD_ROW_OPS_SUBNORMAL_FMA
  VU32 y[kN];
  VU32 fix;
  if (ScaleBelowNormalN<kN>(g, cg, s, y, &fix)) {
    for (size_t i = 0; i < kN; ++i) p[i] = hn::BitCast(d, hn::Add(y[i], fix));
    return;
  }
  for (size_t i = 0; i < kN; ++i) p[i] = ScaleFromBelowNormal(y[i], fix, g[i], s);
#else
  for (size_t i = 0; i < kN; ++i) p[i] = MulNoAssist(hn::Set(d, s), g[i], cg[i]);
#endif
}

// A loop takes its products in one ProductForm (underflow_watch.h): kPlainMul hn::Mul, kFused MulRounded,
// kNoAssist MulNoAssist.

// a * b; cb = BelowNormalAddend(b), read only by kNoAssist (a loop computes it once for a shared factor).
template <int kForm>
HWY_INLINE VF Product(VF a, VF b, VF cb) {
  if constexpr (kForm == kNoAssist) {
    return MulNoAssist(a, b, cb);
  } else if constexpr (kForm == kFused) {
    (void)cb;
    return MulRounded(a, b);
  } else {
    (void)cb;
    return hn::Mul(a, b);
  }
}
template <int kForm>
HWY_INLINE VF Product(VF a, VF b) {
  if constexpr (kForm == kNoAssist) {
    return MulNoAssist(a, b);
  } else {
    return Product<kForm>(a, b, b);
  }
}

// Whether a loop over rows of T watches for underflow at all: products of two fp16 values (at least 2^-24
// each) cannot underflow fp32, while fp16 outputs raise the underflow flag for ordinary small gradients
// (below 2^-14), so an fp16 loop keeps the plain multiply.
template <typename T>
constexpr bool WatchesUnderflow() {
  return !hwy::IsSame<T, hwy::float16_t>();
}

// --- scalar element access ------------------------------------------------------------------------------
HWY_INLINE float ToF32(float v) { return v; }
HWY_INLINE float ToF32(hwy::bfloat16_t v) { return F32FromBF16Bits(v.bits); }
HWY_INLINE float ToF32(hwy::float16_t v) { return F32FromF16Bits(v.bits); }

// --- the one NaN of arithmetic results ---------------------------------------------------------------------
// Every NaN that arithmetic writes to an output has these bits: x86's default NaN (sign and quiet bit set, no
// payload), the NaN its own invalid operations (0 * Inf, Inf - Inf) give. Which NaN a sum or product of NaNs
// gives depends on the order of the operands in the instruction, which the compiler may swap, and which
// differs between SIMD targets and between a loop's product forms (underflow_watch.h), so without this a
// NaN's sign could depend on the thread count. Every store of an arithmetic result (FromF32, StoreF32,
// StreamF32, PutPair, PutPairLanes) writes it in place of any NaN; the bf16 stores for free, where the rounding
// already treats NaNs apart, the f32 and f16 stores with a compare and a select. Elements copied without
// arithmetic (MoeInitRoutingV2, MoeTokenPermuteWithRoutingMap, the dropless probsGrad of its gradient, the
// permuteProbs of MoeTokenUnpermuteWithRoutingMap) keep their NaNs' bits.
constexpr uint32_t kNaNBitsF32 = 0xFFC00000u;
constexpr uint16_t kNaNBitsBF16 = 0xFFC0u;
constexpr uint16_t kNaNBitsF16 = 0xFE00u;

// v with every NaN lane replaced by kNaNBitsF32.
HWY_INLINE VF OneNaN(VF v) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  return hn::IfThenElse(hn::IsNaN(v), hn::BitCast(d, hn::Set(du, kNaNBitsF32)), v);
}

template <typename T>
HWY_INLINE T FromF32(float v);
template <>
HWY_INLINE float FromF32<float>(float v) {
  return std::isnan(v) ? F32FromBits(kNaNBitsF32) : v;
}
template <>
HWY_INLINE hwy::bfloat16_t FromF32<hwy::bfloat16_t>(float v) {
  hwy::bfloat16_t r;
  r.bits = std::isnan(v) ? kNaNBitsBF16 : BF16BitsFromF32(v);
  return r;
}
template <>
HWY_INLINE hwy::float16_t FromF32<hwy::float16_t>(float v) {
  hwy::float16_t r;
  r.bits = std::isnan(v) ? kNaNBitsF16 : F16BitsFromF32(v);
  return r;
}

// Routing weights (scales, probabilities and their gradients) have a dtype of their own, independent of the
// token rows' (docs/design.md, "Mixed precision"). There is one weight per pair against a row of H token
// elements, so a weight is widened or narrowed element by element with a switch on its dtype, exactly as
// ToF32 / FromF32 do, instead of instantiating every kernel for every pair of dtypes.
HWY_INLINE float LoadWeight(const FlatView& v, int64_t i, DType w) {
  switch (w) {
    case DType::kFloat16: return ToF32(v.At<const hwy::float16_t>(i));
    case DType::kBFloat16: return ToF32(v.At<const hwy::bfloat16_t>(i));
    default: return v.At<const float>(i);
  }
}
HWY_INLINE void StoreWeight(const FlatView& v, int64_t i, DType w, float value) {
  switch (w) {
    case DType::kFloat16: v.At<hwy::float16_t>(i) = FromF32<hwy::float16_t>(value); return;
    case DType::kBFloat16: v.At<hwy::bfloat16_t>(i) = FromF32<hwy::bfloat16_t>(value); return;
    default: v.At<float>(i) = FromF32<float>(value); return;
  }
}

// --- vector load / store with widening and round-to-nearest-even narrowing --------------------------------
#undef MOEGRAD_ROW_OPS_F16C  // per target
#if HWY_ARCH_X86 && HWY_TARGET < HWY_SSE4 && !defined(HWY_DISABLE_F16C)
#define MOEGRAD_ROW_OPS_F16C 1
#else
#define MOEGRAD_ROW_OPS_F16C 0
#endif
// Whether Highway 1.0.3 converts fp16 to fp32 with an instruction (F16C; NEON and SVE with fp16 support)
// rather than emulating the conversion.
#undef MOEGRAD_ROW_OPS_F16_NATIVE  // per target
#if MOEGRAD_ROW_OPS_F16C || (HWY_ARCH_ARM && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && \
                             defined(__ARM_FP) && (__ARM_FP & 2))
#define MOEGRAD_ROW_OPS_F16_NATIVE 1
#else
#define MOEGRAD_ROW_OPS_F16_NATIVE 0
#endif

HWY_INLINE VF LoadF32(DF d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadF32(DF d, const hwy::bfloat16_t* p) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(d, hn::ShiftLeft<16>(bits));
}
HWY_INLINE VF LoadF32(DF d, const hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
#if MOEGRAD_ROW_OPS_F16_NATIVE
  return hn::PromoteTo(d, hn::LoadU(dh, p));
#else
  // Highway 1.0.3's emulated conversion is exact for finite values but treats the all-ones exponent as a
  // finite one (infinity becomes 65536, a NaN 65600 to 131008): those lanes are rebuilt as F32FromF16Bits
  // does, from the sign, the all-ones exponent and the mantissa shifted up, a NaN made quiet.
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  const auto h = hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  const auto mant = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x3ffu)));
  const auto quiet = hn::IfThenElseZero(hn::Ne(mant, hn::Zero(du)), hn::Set(du, 0x00400000u));
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto special = hn::Or(hn::Or(sign, hn::Set(du, 0x7f800000u)), hn::Or(mant, quiet));
  const auto is_special = hn::Eq(hn::And(h, hn::Set(du, 0x7c00u)), hn::Set(du, 0x7c00u));
  const auto promoted = hn::BitCast(du, hn::PromoteTo(d, hn::LoadU(dh, p)));
  return hn::BitCast(d, hn::IfThenElse(is_special, special, promoted));
#endif
}

HWY_INLINE void StoreF32(DF d, VF v, float* p) { hn::StoreU(OneNaN(v), d, p); }
// The bf16 bit patterns of v, rounded to nearest even, a NaN as kNaNBitsBF16. (Highway 1.0.3 demotes f32 to
// bf16 by truncation; round by hand.)
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> BF16BitsRNE(VF v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1));
  const auto rounded = hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb));
  const auto magnitude = hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(magnitude, hn::Set(di, 0x7f800000)));
  const auto bits = hn::IfThenElse(is_nan, hn::Set(du, kNaNBitsF32), rounded);
  const auto high = hn::BitCast(di, hn::ShiftRight<16>(bits));  // in [0, 65535]: the demotion is exact
  return hn::DemoteTo(du16, high);
}
HWY_INLINE void StoreF32(DF /*d*/, VF v, hwy::bfloat16_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  hn::StoreU(BF16BitsRNE(v), du16, reinterpret_cast<uint16_t*>(p));
}
HWY_INLINE void StoreF32(DF d, VF v, hwy::float16_t* p) {
#if MOEGRAD_ROW_OPS_F16C
  // AVX2 and up convert with F16C (vcvtps2ph), which rounds to nearest even.
  (void)d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  hn::StoreU(hn::DemoteTo(dh, OneNaN(v)), dh, p);
#else
  // Elsewhere Highway 1.0.3 emulates the demotion by truncation (and without overflow to infinity): round
  // each lane with the scalar conversion instead.
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(v, d, lanes);
  for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = FromF32<hwy::float16_t>(lanes[i]);
#endif
}

// --- rows -----------------------------------------------------------------------------------------------

// dst[j] = 0.
template <typename T>
HWY_INLINE void ZeroRow(T* dst, int64_t dst_stride, int64_t n) {
  const T zero = FromF32<T>(0.0f);
  if (dst_stride == 1) {
    // +0 is all zero bits in all three types. (A loop over the 16-bit struct types stays a scalar store loop.)
    std::memset(static_cast<void*>(dst), 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  for (int64_t j = 0; j < n; ++j) dst[j * dst_stride] = zero;
}

// dst[j] = rne(src[j] * s); kForm: the element loop's form (ScalarProduct).
template <int kForm = kPlainMul, typename T>
HWY_INLINE void ScaleRow(const T* src, int64_t src_stride, float s, T* dst, int64_t dst_stride, int64_t n) {
  int64_t j = 0;
  if (src_stride == 1 && dst_stride == 1) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const VF vs = hn::Set(d, s);
    for (; j + lanes <= n; j += lanes) StoreF32(d, MulRounded(LoadF32(d, src + j), vs), dst + j);
  }
  for (; j < n; ++j) dst[j * dst_stride] = FromF32<T>(ScalarProduct<kForm>(ToF32(src[j * src_stride]), s));
}

// dst[j] = rne(p_0 + p_1 + ... + p_{count-1}) with p_m = row_m[j] * scale_m, summed in fp32 left to right
// starting from p_0; zero when count is 0. `row(m, &scale)` returns row m and sets its scale. Every row
// shares `src_stride` as its inner stride. kForm: the element loop's form (ScalarProduct).
template <typename T, int kForm = kPlainMul, typename RowFn>
HWY_INLINE void SumRowsOf(int64_t count, const RowFn& row, int64_t src_stride, T* dst, int64_t dst_stride,
                          int64_t n) {
  if (count == 0) return ZeroRow(dst, dst_stride, n);
  float s0;
  const T* r0 = row(0, &s0);
  if (count == 1) return ScaleRow<kForm>(r0, src_stride, s0, dst, dst_stride, n);
  int64_t j = 0;
  if (src_stride == 1 && dst_stride == 1) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    for (; j + lanes <= n; j += lanes) {
      VF acc = MulRounded(LoadF32(d, r0 + j), hn::Set(d, s0));
      for (int64_t m = 1; m < count; ++m) {
        float s;
        const T* r = row(m, &s);
        acc = hn::Add(acc, MulRounded(LoadF32(d, r + j), hn::Set(d, s)));
      }
      StoreF32(d, acc, dst + j);
    }
  }
  for (; j < n; ++j) {
    float acc = ScalarProduct<kForm>(ToF32(r0[j * src_stride]), s0);
    for (int64_t m = 1; m < count; ++m) {
      float s;
      const T* r = row(m, &s);
      acc += ScalarProduct<kForm>(ToF32(r[j * src_stride]), s);
    }
    dst[j * dst_stride] = FromF32<T>(acc);
  }
}

// sum_j (x[j] + b[j]) * g[j] with x or b null meaning 0, in the canonical order every target shares:
// element j goes to partial sum j % 16 (ascending j), then the 16 partials are added as a fixed tree. kForm:
// the element loop's form (ScalarProduct).
template <int kForm = kPlainMul, typename T>
HWY_INLINE float DotRow(const T* x, int64_t x_stride, const T* b, int64_t b_stride, const T* g,
                        int64_t g_stride, int64_t n) {
  constexpr int kParts = 16;
  HWY_ALIGN float part[kParts] = {};
  const int64_t blocked = (x == nullptr && b == nullptr) ? 0 : n / kParts * kParts;
  int64_t j = 0;
  const bool unit = (x == nullptr || x_stride == 1) && (b == nullptr || b_stride == 1) && g_stride == 1;
  if (unit && blocked > 0) {
    const DF d;
    constexpr size_t kLanes = hn::MaxLanes(DF());
    static_assert(kParts % kLanes == 0, "a vector must hold a whole number of partial sums");
    constexpr size_t kVecs = kParts / kLanes;
    VF acc[kVecs];
    for (size_t q = 0; q < kVecs; ++q) acc[q] = hn::Zero(d);
    for (; j < blocked; j += kParts) {
      for (size_t q = 0; q < kVecs; ++q) {
        const int64_t o = j + static_cast<int64_t>(q * kLanes);
        VF v;
        if (x && b) v = hn::Add(LoadF32(d, x + o), LoadF32(d, b + o));
        else v = LoadF32(d, x ? x + o : b + o);
        acc[q] = hn::Add(acc[q], hn::Mul(v, LoadF32(d, g + o)));
      }
    }
    for (size_t q = 0; q < kVecs; ++q) hn::Store(acc[q], d, part + q * kLanes);
  }
  if (x != nullptr || b != nullptr) {
    for (; j < n; ++j) {
      float v;
      if (x && b) v = ToF32(x[j * x_stride]) + ToF32(b[j * b_stride]);
      else v = x ? ToF32(x[j * x_stride]) : ToF32(b[j * b_stride]);
      part[j % kParts] += ScalarProduct<kForm>(v, ToF32(g[j * g_stride]));
    }
  }
  for (int w = kParts / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_INL_H_
