// One-pass row kernels for unit-stride rows, compiled once per SIMD target (include after foreach_target.h):
// the fused scale-and-dot of a weighted row's gradient and the sum of gathered rows, each bit-identical to
// the primitives of row_ops-inl.h it replaces (ScaleRow + DotRow, SumRowsOf), plus what makes them run at
// memory speed on large outputs: streaming (non-temporal) stores, software prefetch of the next rows, and on
// AVX-512 a bf16 path that converts a whole cache line per step.

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_FUSED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_FUSED_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_FUSED_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_FUSED_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// --- streaming (non-temporal) stores ----------------------------------------------------------------------
// For outputs far larger than the caches: the line is written without being read first, which saves a third
// of the memory traffic of a row copy. Only where a stored vector fills at least a 16-byte register (Stream
// widens smaller vectors) and, for f16, the conversion is a vector instruction.
template <typename T>
constexpr bool CanStream() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  return hn::MaxLanes(DF()) * sizeof(T) >= 16 && (!hwy::IsSame<T, hwy::float16_t>() || MOEGRAD_ROW_OPS_F16C);
#else
  return false;
#endif
}

// True when vector stores of T at dst (and at every whole vector, or cache line, after it) may stream: dst
// starts a cache line, which every vector store (at most a line wide) then stays aligned to.
template <typename T>
HWY_INLINE bool StreamAligned(const T* dst) {
  return CanStream<T>() && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
}

// StoreF32 with a non-temporal store; p aligned to the stored vector, CanStream<T>().
HWY_INLINE void StreamF32(DF d, VF v, float* p) { hn::Stream(v, d, p); }
HWY_INLINE void StreamF32(DF /*d*/, VF v, hwy::bfloat16_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  hn::Stream(BF16BitsRNE(v), du16, reinterpret_cast<uint16_t*>(p));
}
HWY_INLINE void StreamF32(DF d, VF v, hwy::float16_t* p) {
#if MOEGRAD_ROW_OPS_F16C
  (void)d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  hn::Stream(hn::DemoteTo(dh, v), dh, p);
#else
  StoreF32(d, v, p);
#endif
}

template <bool kStream, typename T>
HWY_INLINE void PutF32(DF d, VF v, T* p) {
  if (kStream) StreamF32(d, v, p);
  else StoreF32(d, v, p);
}

// --- one-pass row kernels for unit-stride rows (bit-identical to the primitives of row_ops-inl.h) ---------

// ZeroRow for a unit-stride row, with streaming stores when `stream`.
template <typename T>
HWY_INLINE void ZeroRowUnit(T* dst, int64_t n, bool stream) {
  constexpr int64_t kBytes = static_cast<int64_t>(hn::MaxLanes(DF()) * sizeof(float));
  char* p = reinterpret_cast<char*>(dst);
  int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (CanStream<float>() && stream && bytes >= 4 * kBytes) {
    const int64_t head = (kBytes - static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kBytes)) % kBytes;
    std::memset(p, 0, static_cast<size_t>(head));
    p += head;
    bytes -= head;
    const DF d;
    const VF zero = hn::Zero(d);
    for (; bytes >= kBytes; bytes -= kBytes, p += kBytes) hn::Stream(zero, d, reinterpret_cast<float*>(p));
  }
  std::memset(p, 0, static_cast<size_t>(bytes));
}

// The rows of one ScaleRowDot call (the columns of a pair that ScaleDotToken's steps leave over).
template <typename T>
struct ScaleDotRows {
  const T* g = nullptr;
  T* out = nullptr;
  const T* x = nullptr;
  const T* b = nullptr;
};

// Prefetches element a of a row of n elements, or element a - n of `next` (if any) past the end.
template <typename T>
HWY_INLINE void PrefetchAhead(const T* row, const T* next, int64_t a, int64_t n) {
  if (a < n) hwy::Prefetch(row + a);
  else if (next != nullptr && a - n < n) hwy::Prefetch(next + (a - n));
}

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
// instead of six: u + 0x7fff, plus one where the lowest kept bit (bit 16) is set, then vfixupimmps puts back
// a NaN, quieted (its response table answers a quiet NaN with itself, a signalling one with itself quieted,
// and every other class with the rounded bits).
HWY_INLINE __m512i RoundToBF16High(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  __m512i rounded = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  rounded = _mm512_mask_add_epi32(rounded, odd, rounded, _mm512_set1_epi32(1));
  return _mm512_castps_si512(_mm512_fixupimm_ps(_mm512_castsi512_ps(rounded), v, _mm512_set1_epi32(0x21), 0));
}

// Stores rne(lo) and rne(hi) as 32 bf16 at p.
template <bool kStream>
HWY_INLINE void PutBF16x32(__m512 lo, __m512 hi, hwy::bfloat16_t* p) {
  // The upper word of every lane, lo's lanes first.
  const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i packed = _mm512_permutex2var_epi16(RoundToBF16High(lo), idx, RoundToBF16High(hi));
  if (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(p), packed);
  else _mm512_storeu_si512(reinterpret_cast<void*>(p), packed);
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
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
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
#if MOEGRAD_ROW_OPS_F16C
// fp16: both halves converted (vcvtps2ph, to nearest even as StoreF32) and stored as one 32-byte vector
// rather than two 16-byte ones (permute grad f16 +3 to +8 points of copy on AVX2; on AVX-512 the same with
// one 64-byte vector changed nothing, so it keeps the two 32-byte stores).
template <bool kStream>
HWY_INLINE void PutPair(VF v0, VF v1, hwy::float16_t* p) {
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i packed =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(v0.raw, kRne)), _mm256_cvtps_ph(v1.raw, kRne), 1);
  if (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packed);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}
#endif
#endif

// Unit-stride rows of n elements, g read once for both results: when kOut, out[j] = rne(g[j] * s) exactly as
// ScaleRow; returns DotRow(x, 1, b, 1, g, 1, n) when kX or kB (x or b null as there), else 0. With start > 0
// (a multiple of 16, at most n) columns [0, start) are taken as done: out is written from start on and the dot
// continues from the 16 partial sums start_part those columns left.
template <typename T, bool kStream, bool kOut, bool kX, bool kB>
HWY_NOINLINE float ScaleRowDotUnit(const ScaleDotRows<T>& r, float s, int64_t n, int64_t start,
                                   const float* start_part) {
  const T* HWY_RESTRICT g = r.g;
  const T* HWY_RESTRICT x = r.x;
  const T* HWY_RESTRICT b = r.b;
  T* HWY_RESTRICT out = r.out;
  constexpr bool kDot = kX || kB;
  constexpr int kParts = 16;
  constexpr size_t kLanes = hn::MaxLanes(DF());
  constexpr size_t kVecs = kParts / kLanes;
  constexpr int64_t kL = static_cast<int64_t>(kLanes);
  static_assert(kParts % kLanes == 0, "a vector must hold a whole number of partial sums");
  const DF d;
  const VF vs = hn::Set(d, s);
  VF acc[kVecs];
  for (size_t q = 0; q < kVecs; ++q) acc[q] = start_part ? hn::LoadU(d, start_part + q * kLanes) : hn::Zero(d);
  const int64_t blocked = n / kParts * kParts;
  int64_t j = start;
  for (; j < blocked; j += kParts) {
    for (size_t q = 0; q < kVecs; ++q) {
      const int64_t o = j + static_cast<int64_t>(q * kLanes);
      const VF vg = LoadF32(d, g + o);
      // Loads before the store: out and x rows often share their address bits below 4 KiB, and a load
      // behind a store to such an address waits for it (measured: a third slower).
      if (kDot) {
        VF v;
        if (kX && kB) v = hn::Add(LoadF32(d, x + o), LoadF32(d, b + o));
        else v = LoadF32(d, kX ? x + o : b + o);
        acc[q] = hn::Add(acc[q], hn::Mul(v, vg));
      }
      if (kOut) PutF32<kStream>(d, hn::Mul(vg, vs), out + o);
    }
  }
  if (kOut) {
    // ScaleRow stores every whole vector with vector code and only the rest element by element.
    for (; j + kL <= n; j += kL) PutF32<kStream>(d, hn::Mul(LoadF32(d, g + j), vs), out + j);
    for (; j < n; ++j) out[j] = FromF32<T>(ToF32(g[j]) * s);
  }
  if (!kDot) return 0.0f;
  HWY_ALIGN float part[kParts];
  for (size_t q = 0; q < kVecs; ++q) hn::Store(acc[q], d, part + q * kLanes);
  for (j = blocked; j < n; ++j) {
    float v;
    if (kX && kB) v = ToF32(x[j]) + ToF32(b[j]);
    else v = kX ? ToF32(x[j]) : ToF32(b[j]);
    part[j % kParts] += v * ToF32(g[j]);
  }
  for (int w = kParts / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

// ScaleRowDotUnit for any out, x, b (null when absent; x only together with out, as in the gradient of a
// weighted row), from column `start` on with the partial sums start_part (null: from 0); the stores of out
// stream when `stream` and out is aligned for it.
template <typename T>
HWY_INLINE float ScaleRowDot(const ScaleDotRows<T>& r, float s, bool stream, int64_t n, int64_t start = 0,
                             const float* start_part = nullptr) {
  if (r.out == nullptr) {
    if (r.b != nullptr) return ScaleRowDotUnit<T, false, false, false, true>(r, s, n, start, start_part);
    return 0.0f;
  }
  constexpr bool kCan = CanStream<T>();
  if (kCan && stream && StreamAligned(r.out)) {
    if (r.x && r.b) return ScaleRowDotUnit<T, kCan, true, true, true>(r, s, n, start, start_part);
    if (r.x) return ScaleRowDotUnit<T, kCan, true, true, false>(r, s, n, start, start_part);
    return ScaleRowDotUnit<T, kCan, true, false, false>(r, s, n, start, start_part);
  }
  if (r.x && r.b) return ScaleRowDotUnit<T, false, true, true, true>(r, s, n, start, start_part);
  if (r.x) return ScaleRowDotUnit<T, false, true, true, false>(r, s, n, start, start_part);
  return ScaleRowDotUnit<T, false, true, false, false>(r, s, n, start, start_part);
}

// --- all pairs of a token at once --------------------------------------------------------------------------
// One token's pairs (at most kTokenGroup) walk their rows together, kTokenStep columns (256 bytes of every
// row) at a time: about a dozen rows stream from memory at once instead of one, which is what keeps a core's
// memory pipeline full when the rows lie at random addresses (a row at a time leaves the hardware prefetchers
// starting over on every 4 KiB page of every row).
constexpr int64_t kTokenGroup = 8;
template <typename T>
constexpr int64_t TokenStep() {
  return 256 / static_cast<int64_t>(sizeof(T));
}
// How far ahead of the loads the rows of a token are prefetched.
constexpr int64_t kTokenPrefetchBytes = 1024;

// The rows of one pair of a token: out (null when the pair writes no row), x and b (null when absent),
// x_next the row the same slot reads in the next token (prefetched near the end), s the scale.
template <typename T>
struct TokenPairRows {
  T* out = nullptr;
  const T* x = nullptr;
  const T* b = nullptr;
  const T* x_next = nullptr;
  float s = 1.0f;
};

// The gradY columns of one step as fp32 vectors, converted once for all pairs of the token.
template <typename T>
constexpr size_t TokenStepVecs() {
  return static_cast<size_t>(TokenStep<T>()) / hn::MaxLanes(DF());
}

template <typename T>
HWY_INLINE void LoadTokenStep(const T* HWY_RESTRICT g, int64_t j, VF* gv) {
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  static_assert(TokenStepVecs<T>() % 2 == 0, "a step is a whole number of vector pairs");
  for (size_t i = 0; i < TokenStepVecs<T>(); i += 2) LoadPair(g + j + static_cast<int64_t>(i) * kL, &gv[i], &gv[i + 1]);
}

// One 256-byte step of one pair, gv the step's gradY columns: the dot's 16 partial sums acc take (x + b) * g
// column block by column block (x, b as present), then out = rne(g * s); all loads of the step come before
// its stores (rows of different pairs often share their address bits below 4 KiB, and a load behind a store
// to such an address waits for it). Rows move two vectors at a time (LoadPair, PutPair: whole cache lines of
// bf16 on AVX-512).
template <bool kStream, bool kDot, typename T>
HWY_INLINE void TokenPairStep(const VF* gv, const TokenPairRows<T>& p, int64_t j, VF* acc) {
  constexpr size_t kSteps = TokenStepVecs<T>();
  constexpr size_t kVecs = 16 / hn::MaxLanes(DF());
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  const DF d;
  if (kDot && (p.x != nullptr || p.b != nullptr)) {
    VF v[kSteps];
    const T* first = p.x != nullptr ? p.x : p.b;
    for (size_t i = 0; i < kSteps; i += 2) LoadPair(first + j + static_cast<int64_t>(i) * kL, &v[i], &v[i + 1]);
    if (p.x != nullptr && p.b != nullptr) {
      for (size_t i = 0; i < kSteps; i += 2) {
        VF b0, b1;
        LoadPair(p.b + j + static_cast<int64_t>(i) * kL, &b0, &b1);
        v[i] = hn::Add(v[i], b0);
        v[i + 1] = hn::Add(v[i + 1], b1);
      }
    }
    // Vector i holds columns [i * kL, (i + 1) * kL) of the step: partial sums i % kVecs.
    for (size_t i = 0; i < kSteps; ++i) acc[i % kVecs] = hn::Add(acc[i % kVecs], hn::Mul(v[i], gv[i]));
  }
  if (p.out != nullptr) {
    const VF vs = hn::Set(d, p.s);
    for (size_t i = 0; i < kSteps; i += 2) {
      PutPair<kStream>(hn::Mul(gv[i], vs), hn::Mul(gv[i + 1], vs), p.out + j + static_cast<int64_t>(i) * kL);
    }
  }
}

// For the `count` (<= kTokenGroup) pairs of one token with gradY row g (unit-stride rows of n elements),
// columns [0, end) with end a multiple of TokenStep<T>(): out = rne(g * s) for each pair with out, and with
// kDot the 16 partial sums part[m] of pair m take (x + b) * g exactly as ScaleRowDotUnit's do (start from
// zero), ready for ScaleRowDot to finish from `end`. g_next is the next token's gradY row (or null); both it and
// the x_next rows are prefetched as the walk nears the end. With kStream every out is StreamAligned.
template <typename T, bool kStream, bool kDot>
HWY_NOINLINE void ScaleDotToken(const T* HWY_RESTRICT g, const T* g_next, const TokenPairRows<T>* pairs,
                                int64_t count, int64_t end, int64_t n, float (*part)[16]) {
  constexpr int64_t kStep = TokenStep<T>();
  constexpr int64_t kAhead = kTokenPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  constexpr size_t kLanes = hn::MaxLanes(DF());
  constexpr size_t kVecs = 16 / kLanes;
  const DF d;
  VF acc[kTokenGroup][kVecs];
  for (int64_t m = 0; m < count; ++m) {
    for (size_t q = 0; q < kVecs; ++q) acc[m][q] = hn::Zero(d);
  }
  for (int64_t j = 0; j < end; j += kStep) {
    for (int64_t o = j + kAhead; o < j + kAhead + kStep; o += kLine) {
      PrefetchAhead(g, g_next, o, n);
      for (int64_t m = 0; m < count; ++m) {
        if (pairs[m].x != nullptr) PrefetchAhead(pairs[m].x, pairs[m].x_next, o, n);
      }
    }
    VF gv[TokenStepVecs<T>()];
    LoadTokenStep(g, j, gv);
    for (int64_t m = 0; m < count; ++m) TokenPairStep<kStream, kDot>(gv, pairs[m], j, acc[m]);
  }
  if (!kDot) return;
  for (int64_t m = 0; m < count; ++m) PairPartials<T>(acc[m], part[m]);
}

// How far ahead of the loads SumRowPtrsUnit prefetches each of its rows.
constexpr int64_t kGatherPrefetchBytes = 1024;

// dst = rne(rows[0] + rows[1] + ... + rows[count - 1]) for unit-stride rows, count >= 1, summed left to right:
// SumRowsOf with every scale 1 (a multiplication by 1 is exact, and the compiler drops it there too). Two
// vectors per step, so that each step reads whole cache lines of 16-bit rows. Each row is prefetched ahead of
// the loads, and near its end so is the same row of the next call's next_rows[0..next_count).
template <typename T, bool kStream>
HWY_NOINLINE void SumRowPtrsUnit(int64_t count, const T* const* rows, int64_t next_count, const T* const* next_rows,
                                 T* HWY_RESTRICT dst, int64_t n) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kAhead = kGatherPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  const T* r0 = rows[0];
  int64_t j = 0;
  for (; j + 2 * kL <= n; j += 2 * kL) {
    for (int64_t m = 0; m < count; ++m) {
      const T* next = m < next_count ? next_rows[m] : nullptr;
      for (int64_t o = 0; o < 2 * kL; o += kLine) PrefetchAhead(rows[m], next, j + kAhead + o, n);
    }
    VF a0, a1;
    LoadPair(r0 + j, &a0, &a1);
    for (int64_t m = 1; m < count; ++m) {
      VF v0, v1;
      LoadPair(rows[m] + j, &v0, &v1);
      a0 = hn::Add(a0, v0);
      a1 = hn::Add(a1, v1);
    }
    PutPair<kStream>(a0, a1, dst + j);
  }
  for (; j + kL <= n; j += kL) {
    VF acc = LoadF32(d, r0 + j);
    for (int64_t m = 1; m < count; ++m) acc = hn::Add(acc, LoadF32(d, rows[m] + j));
    PutF32<kStream>(d, acc, dst + j);
  }
  for (; j < n; ++j) {
    float acc = ToF32(r0[j]);
    for (int64_t m = 1; m < count; ++m) acc += ToF32(rows[m][j]);
    dst[j] = FromF32<T>(acc);
  }
}

// SumRowPtrsUnit for any number of rows, `row_at(m)` giving row m: a block of columns at a time is summed in
// an fp32 buffer, eight rows per pass over it (the next eight prefetched meanwhile), so that no row pointer is
// looked up per vector and several rows stream at once.
template <typename T, bool kStream, typename RowAt>
HWY_NOINLINE void SumManyRowsUnit(int64_t count, const RowAt& row_at, T* HWY_RESTRICT dst, int64_t n) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kBlock = 2048;  // a multiple of every vector length: 8 KiB of fp32 sums
  constexpr int64_t kGroup = 8;
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  HWY_ALIGN float acc[kBlock];
  const int64_t vec_end = n / kL * kL;  // vector code below this column, element by element above, as in SumRowsOf
  const T* group[2][kGroup];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t j1 = std::min(n, j0 + kBlock);
    const int64_t v1 = std::min(j1, vec_end);
    int cur = 0;
    for (int64_t m = 0; m < std::min(count, kGroup); ++m) group[cur][m] = row_at(m);
    for (int64_t m0 = 0; m0 < count; m0 += kGroup) {
      const int64_t rows = std::min(kGroup, count - m0);
      const int64_t next_rows = std::max<int64_t>(0, std::min(kGroup, count - m0 - kGroup));
      for (int64_t m = 0; m < next_rows; ++m) group[cur ^ 1][m] = row_at(m0 + kGroup + m);
      const T* const* r = group[cur];
      int64_t j = j0;
      for (; j < v1; j += kL) {
        if ((j - j0) % kLine == 0) {
          for (int64_t m = 0; m < next_rows; ++m) hwy::Prefetch(group[cur ^ 1][m] + j);
        }
        VF v = m0 == 0 ? LoadF32(d, r[0] + j) : hn::Add(hn::Load(d, acc + (j - j0)), LoadF32(d, r[0] + j));
        for (int64_t m = 1; m < rows; ++m) v = hn::Add(v, LoadF32(d, r[m] + j));
        hn::Store(v, d, acc + (j - j0));
      }
      for (; j < j1; ++j) {
        float v = m0 == 0 ? ToF32(r[0][j]) : acc[j - j0] + ToF32(r[0][j]);
        for (int64_t m = 1; m < rows; ++m) v += ToF32(r[m][j]);
        acc[j - j0] = v;
      }
      cur ^= 1;
    }
    int64_t j = j0;
    for (; j < v1; j += kL) PutF32<kStream>(d, hn::Load(d, acc + (j - j0)), dst + j);
    for (; j < j1; ++j) dst[j] = FromF32<T>(acc[j - j0]);
  }
}

// SumRowsOf with every scale 1 for unit-stride rows given as pointers; streams the stores when `stream` and
// dst is aligned for it.
template <typename T>
HWY_INLINE void SumRowPtrs(int64_t count, const T* const* rows, int64_t next_count, const T* const* next_rows,
                           T* dst, bool stream, int64_t n) {
  if (count == 0) return ZeroRowUnit(dst, n, stream);
  if (CanStream<T>() && stream && StreamAligned(dst)) {
    SumRowPtrsUnit<T, CanStream<T>()>(count, rows, next_count, next_rows, dst, n);
  } else {
    SumRowPtrsUnit<T, false>(count, rows, next_count, next_rows, dst, n);
  }
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_FUSED_INL_H_
