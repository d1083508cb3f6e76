// Two fp32 vectors of a unit-stride row at a time (LoadPair, PutPair, PairPartials), compiled once per SIMD
// target (include after foreach_target.h). On most targets a pair is two LoadF32 / PutF32 calls; for 16-bit
// rows on x86 it is raw intrinsics: bf16 loads and stores of a whole cache line per step on AVX-512, bf16
// loads and stores and fp16 stores of half a line on AVX2, which keep the 16-bit kernels bound by memory
// rather than by conversion instructions (docs/performance.md). They round exactly as StoreF32. They sit apart
// from the kernels that use them because they are written with raw intrinsics for one target at a time, and
// because AVX2's bf16 pairs hold the columns in another lane order, which PairPartials puts back before a
// dot's partial sums are added (docs/design.md, Determinism).

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_PAIR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_PAIR_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_PAIR_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_PAIR_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// bf16 rows with AVX-512BW, 32 elements (one cache line) per step: widening and narrowing are one word
// permutation each (vpermw, vpermt2w) instead of a widening move plus a shift, or a shift plus a pack and a
// lane permutation, which left the bf16 kernels bound by those instructions rather than by memory.

// Elements [0, 16) and [16, 32) of 32 bf16 at p, as fp32.
HWY_INLINE void LoadBF16x32(const hwy::bfloat16_t* p, __m512* lo, __m512* hi) {
  // Word 2i + 1 of the result takes word i (lo) or 16 + i (hi) of the input; even words are zero.
  const __m512i idx_lo = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0,
                                          4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  const __m512i raw = _mm512_loadu_si512(p);
  *lo = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx_lo, raw));
  *hi = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx_hi, raw));
}

// v rounded to bf16 as BF16BitsRNE does, the result in the upper 16 bits of each lane; four instructions
// instead of six: v's bits + 0x7fff, plus one where the lowest kept bit is set, then vfixupimmps puts in
// kNaNBitsF32 for a NaN (its response table answers a quiet or signalling NaN with the default NaN, QNaN
// Indefinite, and every other class with the rounded bits).
HWY_INLINE __m512i RoundToBF16High(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  const __m512i up = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_mask_add_epi32(up, odd, up, _mm512_set1_epi32(1));
  return _mm512_castps_si512(_mm512_fixupimm_ps(_mm512_castsi512_ps(rounded), v, _mm512_set1_epi32(0x33), 0));
}

// 32 bf16 to p, as one cache line.
template <bool kStream>
HWY_INLINE void PutLine(__m512i v, hwy::bfloat16_t* p) {
  if (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  else _mm512_storeu_si512(reinterpret_cast<void*>(p), v);
}

// Word kWord (0 the lower, 1 the upper) of lo's lanes, then of hi's, as 32 words.
template <int kWord>
HWY_INLINE __m512i PackWords(__m512i lo, __m512i hi) {
  const __m512i idx = _mm512_add_epi16(_mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34,
                                                        32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
                                       _mm512_set1_epi16(kWord));
  return _mm512_permutex2var_epi16(lo, idx, hi);
}

// Stores rne(lo) and rne(hi) as 32 bf16 at p.
template <bool kStream>
HWY_INLINE void PutBF16x32(__m512 lo, __m512 hi, hwy::bfloat16_t* p) {
  PutLine<kStream>(PackWords<1>(RoundToBF16High(lo), RoundToBF16High(hi)), p);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
// bf16 rows with AVX2, 16 elements (32 bytes) per pair of vectors. Interleaving the words with zeros widens
// them in one instruction per vector (vpunpcklwd, vpunpckhwd) but works within each 128-bit half, so the
// first vector holds elements [0, 4) and [8, 12), the second [4, 8) and [12, 16): a lane order that
// element-wise arithmetic does not see, that the pack of the store (vpackusdw, also per half) undoes, and
// that PairPartials undoes for the partial sums of a dot.
HWY_INLINE void LoadBF16x16(const hwy::bfloat16_t* p, __m256* v0, __m256* v1) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i zero = _mm256_setzero_si256();
  *v0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw));
  *v1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw));
}

// BF16BitsRNE's bits of v in the lower 16 bits of each lane (the upper ones zero).
HWY_INLINE __m256i RoundToBF16Low(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_set1_epi32(static_cast<int>(kNaNBitsF32)), nan), 16);
}

// Stores rne(v0) and rne(v1), in LoadBF16x16's lane order, as 16 bf16 at p.
template <bool kStream>
HWY_INLINE void PutBF16x16(__m256 v0, __m256 v1, hwy::bfloat16_t* p) {
  const __m256i packed = _mm256_packus_epi32(RoundToBF16Low(v0), RoundToBF16Low(v1));
  if (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packed);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}
#endif

// Two vectors of a row as fp32 (elements [0, 2 * lanes) at p), and their rounded store; for bf16 on AVX-512
// (two vectors: one cache line) a word permutation each way, on AVX2 an interleave each way (which leaves the
// lanes in another order, see LoadBF16x16).
template <typename T>
HWY_INLINE void LoadPair(const T* p, VF* v0, VF* v1) {
  const DF d;
  *v0 = LoadF32(d, p);
  *v1 = LoadF32(d, p + hn::MaxLanes(d));
}
template <bool kStream, typename T>
HWY_INLINE void PutPair(VF v0, VF v1, T* p) {
  const DF d;
  PutF32<kStream>(d, v0, p);
  PutF32<kStream>(d, v1, p + hn::MaxLanes(d));
}
// The 16 partial sums of a dot whose products came from LoadPair (vector i of every pair adding into acc[i]),
// stored in column order: partial q takes the columns congruent to q modulo 16.
template <typename T>
HWY_INLINE void PairPartials(const VF* acc, float* part) {
  constexpr size_t kLanes = hn::MaxLanes(DF());
  for (size_t q = 0; q < 16 / kLanes; ++q) hn::StoreU(acc[q], DF(), part + q * kLanes);
}
// The inverse of PairPartials: acc as a dot that stored `part` left it.
template <typename T>
HWY_INLINE void LoadPairPartials(const float* part, VF* acc) {
  constexpr size_t kLanes = hn::MaxLanes(DF());
  for (size_t q = 0; q < 16 / kLanes; ++q) acc[q] = hn::LoadU(DF(), part + q * kLanes);
}
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_INLINE void LoadPair(const hwy::bfloat16_t* p, VF* v0, VF* v1) { LoadBF16x32(p, &v0->raw, &v1->raw); }
template <bool kStream>
HWY_INLINE void PutPair(VF v0, VF v1, hwy::bfloat16_t* p) {
  PutBF16x32<kStream>(v0.raw, v1.raw, p);
}
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
HWY_INLINE void LoadPair(const hwy::bfloat16_t* p, VF* v0, VF* v1) { LoadBF16x16(p, &v0->raw, &v1->raw); }
template <bool kStream>
HWY_INLINE void PutPair(VF v0, VF v1, hwy::bfloat16_t* p) {
  PutBF16x16<kStream>(v0.raw, v1.raw, p);
}
// acc[0] holds partials 0-3 and 8-11, acc[1] partials 4-7 and 12-15 (LoadBF16x16's order).
template <>
HWY_INLINE void PairPartials<hwy::bfloat16_t>(const VF* acc, float* part) {
  _mm256_storeu_ps(part, _mm256_permute2f128_ps(acc[0].raw, acc[1].raw, 0x20));
  _mm256_storeu_ps(part + 8, _mm256_permute2f128_ps(acc[0].raw, acc[1].raw, 0x31));
}
template <>
HWY_INLINE void LoadPairPartials<hwy::bfloat16_t>(const float* part, VF* acc) {
  const __m256 lo = _mm256_loadu_ps(part);
  const __m256 hi = _mm256_loadu_ps(part + 8);
  acc[0].raw = _mm256_permute2f128_ps(lo, hi, 0x20);
  acc[1].raw = _mm256_permute2f128_ps(lo, hi, 0x31);
}
#if MOEGRAD_ROW_OPS_F16C
// fp16: both halves converted (vcvtps2ph, to nearest even as StoreF32) and stored as one 32-byte vector
// rather than two 16-byte ones (permute grad f16 +3 to +8 points of copy on AVX2; on AVX-512 the same with
// one 64-byte vector changed nothing, so it keeps the two 32-byte stores).
template <bool kStream>
HWY_INLINE void PutPair(VF v0, VF v1, hwy::float16_t* p) {
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i packed = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(OneNaN(v0).raw, kRne)),
                                                 _mm256_cvtps_ph(OneNaN(v1).raw, kRne), 1);
  if (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packed);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}
#endif
#endif

// LoadPair in the form the token walks take (row_ops_scale_dot-inl.h), whose loads follow stores of 32 bytes to
// rows that often share their address bits below 4 KiB; kShort is the walk of cores other than AMD's family 0x19
// and later (ShortTokenStep). It is LoadPair but:
// - for fp16 on AVX2, where LoadPair converts each half straight from memory (two 16-byte loads) and this one
//   loads the 32 bytes once and converts the halves from the register. On an AMD EPYC Zen 3 guest the fp16
//   gradients' walks without bias gained 3-10 points of copy on Qwen3-30B-A3B and DeepSeek-V3, while the sum
//   walks (LoadPairLanes, no such stores before their loads) lost up to 12 with it and keep LoadPair
//   (docs/performance.md, "fp16 rows loaded whole").
// - for bf16 on AVX-512 on AMD's cores (not kShort): each half of the line loaded and widened by a zero
//   extension and a shift rather than the whole line by two word permutations. On an AMD EPYC Zen 4 guest the
//   bf16 gradients' token walks gained 2-17 points of copy (docs/performance.md, "bf16 rows widened by halves
//   on Zen 4"); the word permutations stay where they were measured faster (an Intel core, "bf16 rows with
//   AVX-512BW" above).
// Every form gives the same values.
template <bool kShort, typename T>
HWY_INLINE void LoadPairWhole(const T* p, VF* v0, VF* v1) {
  LoadPair(p, v0, v1);
}
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2 && MOEGRAD_ROW_OPS_F16C
template <bool kShort>
HWY_INLINE void LoadPairWhole(const hwy::float16_t* p, VF* v0, VF* v1) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
#if defined(__GNUC__) || defined(__clang__)
  // Keeps the load whole: clang would fold the two halves back into two 16-byte vcvtph2ps loads.
  __asm__("" : "+x"(raw));
#endif
  v0->raw = _mm256_cvtph_ps(_mm256_castsi256_si128(raw));
  v1->raw = _mm256_cvtph_ps(_mm256_extracti128_si256(raw, 1));
}
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
template <bool kShort>
HWY_INLINE void LoadPairWhole(const hwy::bfloat16_t* p, VF* v0, VF* v1) {
  if constexpr (kShort) {
    LoadPair(p, v0, v1);
  } else {
    const __m256i* half = reinterpret_cast<const __m256i*>(p);
    v0->raw = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(half)), 16));
    v1->raw = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(half + 1)), 16));
  }
}
#endif
// Whether LoadPairWhole<true, T> and LoadPairWhole<false, T> differ on this target.
template <typename T>
constexpr bool LoadPairWholeForms() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return std::is_same_v<T, hwy::bfloat16_t>;
#else
  return false;
#endif
}

#undef MOEGRAD_ROW_OPS_BF16_GRID  // per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define MOEGRAD_ROW_OPS_BF16_GRID 1
// bf16 rounding of a product below fp32's normal range by one float add. ScaleBelowNormalN's y = fma(g, |s|, cg)
// is sign(g) * (2^-126 + |p|), p = rne(g * |s|) to fp32: |p| = m * 2^-149, m < 2^23. BF16GridAddend(g) is
// sign(g) * A with A = 1.5 * 2^-110 + (0x8000 if g's sign is set, else 0) * 2^-133 - 128 * 2^-133, an even
// multiple of 2^-133 in the binade [2^-110, 2^-109), where floats are 2^-133 apart, the bf16 spacing below
// 2^-125. So z = y + BF16GridAddend(g) rounds |y| / 2^-133 = 128 + m / 2^16 to an integer, ties to even, once:
// 128 + rne(m / 2^16), and rne(m / 2^16) is the magnitude of p's bf16 bits, as BF16BitsRNE rounds them (the
// largest, 128, is 2^-126's). z's mantissa field is 0x400000 + (0x8000 if g < 0) + those bits, so z's lower
// word is p's bf16 bits with g's sign; s's is put in after (PutScaleNoAssistN). A zero g gives a zero of the
// product's sign, as the multiply does.
HWY_INLINE VF BF16GridAddend(VF g) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  return hn::IfNegativeThenElse(g, hn::BitCast(d, hn::Set(du, 0x88C07F80u)), hn::BitCast(d, hn::Set(du, 0x08BFFF80u)));
}
#else
#define MOEGRAD_ROW_OPS_BF16_GRID 0
#endif

// PutPair of ScaleNoAssistN's products, kN vectors (a whole number of pairs) to p: out = rne(g * s) with no
// subnormal in or out of any float operation. bf16 on AVX-512 (kg[i] = BF16GridAddend(g[i]), read by it
// alone): when every product is below fp32's normal range, each vector rounds to bf16 by one float add, the
// lower words of two are packed into one line and s's sign goes into their sign bits (BF16GridAddend).
template <bool kStream, size_t kN, typename T>
HWY_INLINE void PutScaleNoAssistN(const VF* g, const VF* cg, const VF* kg, float s, T* p) {
  constexpr size_t kL = hn::MaxLanes(DF());
#if MOEGRAD_ROW_OPS_BF16_GRID
  if constexpr (hwy::IsSame<T, hwy::bfloat16_t>()) {
    VU32 y[kN];
    VU32 fix;
    if (ScaleBelowNormalN<kN>(g, cg, s, y, &fix)) {
      const __m512i sign = _mm512_set1_epi16(std::signbit(s) ? static_cast<int16_t>(0x8000) : 0);
      for (size_t i = 0; i < kN; i += 2) {
        const __m512 z0 = _mm512_add_ps(_mm512_castsi512_ps(y[i].raw), kg[i].raw);
        const __m512 z1 = _mm512_add_ps(_mm512_castsi512_ps(y[i + 1].raw), kg[i + 1].raw);
        PutLine<kStream>(_mm512_xor_si512(PackWords<0>(_mm512_castps_si512(z0), _mm512_castps_si512(z1)), sign),
                         p + i * kL);
      }
      return;
    }
    for (size_t i = 0; i < kN; i += 2) {
      PutPair<kStream>(ScaleFromBelowNormal(y[i], fix, g[i], s), ScaleFromBelowNormal(y[i + 1], fix, g[i + 1], s),
                       p + i * kL);
    }
    return;
  }
#endif
  (void)kg;
  VF prod[kN];
  ScaleNoAssistN<kN>(g, cg, s, prod);
  for (size_t i = 0; i < kN; i += 2) PutPair<kStream>(prod[i], prod[i + 1], p + i * kL);
}

// LoadPair and PutPair for element-wise work only (sums of rows, products with a scalar): the 2 * MaxLanes
// elements may sit in the two vectors in any order, as long as PutPairLanes undoes LoadPairLanes. For bf16 on
// AVX-512 that is even elements in one vector and odd in the other: a shift and a mask instead of two
// cross-lane permutes in, an OR of two shifted halves instead of one out (the results are bit for bit those of
// LoadPair / PutPair: each element sees the same arithmetic). Elsewhere they are LoadPair and PutPair.
template <typename T>
HWY_INLINE void LoadPairLanes(const T* p, VF* v0, VF* v1) {
  LoadPair(p, v0, v1);
}
template <bool kStream, typename T>
HWY_INLINE void PutPairLanes(VF v0, VF v1, T* p) {
  PutPair<kStream>(v0, v1, p);
}
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_INLINE void LoadPairLanes(const hwy::bfloat16_t* p, VF* even, VF* odd) {
  const __m512i raw = _mm512_loadu_si512(p);
  even->raw = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  odd->raw = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
template <bool kStream>
HWY_INLINE void PutPairLanes(VF even, VF odd, hwy::bfloat16_t* p) {
  // (odd & 0xFFFF0000) | (even >> 16): ternary-logic 0xEA is (A & B) | C with A = odd, B = the mask, C = even.
  const __m512i packed = _mm512_ternarylogic_epi32(RoundToBF16High(odd.raw),
                                                   _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)),
                                                   _mm512_srli_epi32(RoundToBF16High(even.raw), 16), 0xEA);
  if (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(p), packed);
  else _mm512_storeu_si512(reinterpret_cast<void*>(p), packed);
}
#endif

// Vector pairs per step of a walk that reads every row two vectors at a time, so that a step takes a whole cache
// line of every row: two pairs for 16-bit rows on AVX2 (two or four on SSE4), one on AVX-512 and for f32 on AVX2.
template <typename T>
constexpr int PairsPerLine() {
  constexpr size_t kPair = 2 * hn::MaxLanes(DF()) * sizeof(T);
  return kPair < 64 ? static_cast<int>(64 / kPair) : 1;
}

// Stores the kP vector pairs a[0..2 kP) of consecutive columns, each pair in LoadPairLanes' element order: as
// they are to the fp32 row acc with kAccOut (a walk's running sums, which only the walk reads back), else as T
// to dst (PutPairLanes, streamed with kStream).
template <bool kStream, bool kAccOut, int kP, typename T>
HWY_INLINE void StorePairsLanes(const VF* a, T* dst, float* acc) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  for (int q = 0; q < kP; ++q) {
    if (kAccOut) {
      hn::StoreU(a[2 * q], d, acc + 2 * kL * q);
      hn::StoreU(a[2 * q + 1], d, acc + 2 * kL * q + kL);
    } else {
      PutPairLanes<kStream>(a[2 * q], a[2 * q + 1], dst + 2 * kL * q);
    }
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_PAIR_INL_H_
