// One-pass scale-and-dot row kernels for unit-stride rows, compiled once per SIMD target (include after
// foreach_target.h): the gradient of a weighted row, out = rne(g * s) together with the dot (x + b) . g, each
// gradY row read once for both (ScaleRowDot), and for all the pairs of a token at once (ScaleDotToken). They
// are bit-identical to ScaleRow + DotRow of row_ops-inl.h, which they replace on unit-stride rows: the same
// products, the same 16 partial sums in the same order, the same fold.
//
// Their products go through Product<kForm> (ProductForm): hn::Mul, MulRounded (the fused form) or MulNoAssist
// (row_ops-inl.h), the same bits. On AMD cores the fused form is spared the slow path a multiply whose product
// underflows takes (Zen 3: DeepSeek-V3 bf16 finalize grad, --values tiny, 38% -> 54% and 50% -> 69% of copy),
// but cost the walks without bias 10-20 points of copy on ordinary values there (16 AVX2 registers, which the
// token walk's partial sums already fill); on an Intel Xeon with AVX-512 and AMX the fused form takes the slow
// path too, and only MulNoAssist, which keeps subnormals out of every float multiply, avoids it. So the callers
// run the plain multiply until their UnderflowWatch (underflow_watch.h) reports an underflow, then the fused
// form where the core spares it and MulNoAssist elsewhere (FormAfter; ScaleDotTokenAny's and ScaleRowDot's
// `form`; a token walk reads the watch after its first step too and goes on in that form from there:
// ScaleDotTokenWatched). MulNoAssist's addend of the gradY factor is computed once for both products of a
// column (and for all the pairs of a token). A bf16 walk with a large bias table, which the fused form made
// faster on ordinary values too, runs the fused form until then (FmaFromTheStart).

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_SCALE_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_SCALE_DOT_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_SCALE_DOT_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_SCALE_DOT_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "src/backend/cpu/kernels/cpu_id.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/underflow_watch.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// The form after `watch`: once it has seen an underflow kFused where the core spares the fused form
// (UnderflowWatch::fused_spared, AMD) and kNoAssist elsewhere; until then kFused when `fused` (a bf16 walk with
// a large bias table: FmaFromTheStart), else kPlainMul.
HWY_INLINE int FormAfter(const UnderflowWatch& watch, bool fused) {
  return fused && !watch.seen() ? kFused : ScalarFormAfter(watch);
}

// Whether a token walk whose dots add rows of a bias table of `table_bytes` takes the FMA form from its first
// token on rather than from its first underflow: bf16 with a table of 256 KiB or more. Measured on ordinary
// values (MoeFinalizeRoutingV2Grad dropless, docs/performance.md, "Speed whatever the values"), the FMA form
// was 5-26 points of copy faster with Qwen3's 512 KiB and DeepSeek-V3's 3.5 MiB tables, 1-18 slower with
// Mixtral's 64 KiB one; f32, and the walks without bias, were not faster (the latter lost 10-20 points).
constexpr int64_t kFmaFromTheStartTableBytes = int64_t{256} << 10;
template <typename T>
constexpr bool FmaFromTheStart(int64_t table_bytes) {
  return hwy::IsSame<T, hwy::bfloat16_t>() && table_bytes >= kFmaFromTheStartTableBytes;
}

// The rows of one ScaleRowDot call (the columns of a pair that ScaleDotToken's steps leave over).
template <typename T>
struct ScaleDotRows {
  const T* g = nullptr;
  T* out = nullptr;
  const T* x = nullptr;
  const T* b = nullptr;
};

// Unit-stride rows of n elements, g read once for both results: when kOut, out[j] = rne(g[j] * s) exactly as
// ScaleRow; returns DotRow(x, 1, b, 1, g, 1, n) when kX or kB (x or b null as there), else 0. With start > 0
// (a multiple of 16, at most n) columns [0, start) are taken as done: out is written from start on and the dot
// continues from the 16 partial sums start_part those columns left.
template <typename T, bool kStream, bool kOut, bool kX, bool kB, int kForm>
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
      const VF cg = BelowNormalAddend(vg);  // read only by kNoAssist
      // Loads before the store: out and x rows often share their address bits below 4 KiB, and a load
      // behind a store to such an address waits for it (measured: a third slower).
      if (kDot) {
        VF v;
        if (kX && kB) v = hn::Add(LoadF32(d, x + o), LoadF32(d, b + o));
        else v = LoadF32(d, kX ? x + o : b + o);
        acc[q] = hn::Add(acc[q], Product<kForm>(v, vg, cg));
      }
      if (kOut) PutF32<kStream>(d, Product<kForm>(vs, vg, cg), out + o);
    }
  }
  if (kOut) {
    // ScaleRow stores every whole vector with vector code and only the rest element by element.
    for (; j + kL <= n; j += kL) PutF32<kStream>(d, Product<kForm>(LoadF32(d, g + j), vs), out + j);
    for (; j < n; ++j) out[j] = FromF32<T>(ScalarProduct<kForm>(ToF32(g[j]), s));
  }
  if (!kDot) return 0.0f;
  HWY_ALIGN float part[kParts];
  for (size_t q = 0; q < kVecs; ++q) hn::Store(acc[q], d, part + q * kLanes);
  for (j = blocked; j < n; ++j) {
    float v;
    if (kX && kB) v = ToF32(x[j]) + ToF32(b[j]);
    else v = kX ? ToF32(x[j]) : ToF32(b[j]);
    part[j % kParts] += ScalarProduct<kForm>(v, ToF32(g[j]));
  }
  for (int w = kParts / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

// ScaleRowDotUnit for any out, x, b (null when absent; x only together with out, as in the gradient of a
// weighted row), from column `start` on with the partial sums start_part (null: from 0); the stores of out
// stream when `stream` and out is aligned for it; kForm is the products' ProductForm (same bits).
template <typename T, int kForm>
HWY_INLINE float ScaleRowDotAs(const ScaleDotRows<T>& r, float s, bool stream, int64_t n, int64_t start,
                               const float* start_part) {
  if (r.out == nullptr) {
    if (r.b != nullptr) return ScaleRowDotUnit<T, false, false, false, true, kForm>(r, s, n, start, start_part);
    return 0.0f;
  }
  constexpr bool kCan = CanStream<T>();
  if (kCan && stream && StreamAligned(r.out)) {
    if (r.x && r.b) return ScaleRowDotUnit<T, kCan, true, true, true, kForm>(r, s, n, start, start_part);
    if (r.x) return ScaleRowDotUnit<T, kCan, true, true, false, kForm>(r, s, n, start, start_part);
    return ScaleRowDotUnit<T, kCan, true, false, false, kForm>(r, s, n, start, start_part);
  }
  if (r.x && r.b) return ScaleRowDotUnit<T, false, true, true, true, kForm>(r, s, n, start, start_part);
  if (r.x) return ScaleRowDotUnit<T, false, true, true, false, kForm>(r, s, n, start, start_part);
  return ScaleRowDotUnit<T, false, true, false, false, kForm>(r, s, n, start, start_part);
}
template <typename T>
HWY_INLINE float ScaleRowDot(const ScaleDotRows<T>& r, float s, bool stream, int64_t n, int64_t start = 0,
                             const float* start_part = nullptr, int form = kPlainMul) {
  if constexpr (WatchesUnderflow<T>()) {
    if (form == kNoAssist) return ScaleRowDotAs<T, kNoAssist>(r, s, stream, n, start, start_part);
    if (form == kFused) return ScaleRowDotAs<T, kFused>(r, s, stream, n, start, start_part);
  }
  return ScaleRowDotAs<T, kPlainMul>(r, s, stream, n, start, start_part);
}

// --- all pairs of a token at once --------------------------------------------------------------------------
// One token's pairs (at most kTokenGroup) walk their rows together, TokenStep() columns at a time (256 bytes of
// every row, or 64: below): about a dozen rows stream from memory at once instead of one, which is what keeps a
// core's memory pipeline full when the rows lie at random addresses (a row at a time leaves the hardware
// prefetchers starting over on every 4 KiB page of every row). Groups of 4 pairs rather than 8 (a DeepSeek-V3
// token's 8 pairs as two walks, its gradient row read again from the caches by the second): the finalize
// gradient's dropless rows with bias went from 80-94% of copy to 92-98% on an AMD Zen 5 guest (four alternated
// runs), the combine gradient +0..+4; on Qwen3-30B-A3B's shorter rows both gradients +1..+10 in every row (three
// runs). Each pair's products and dot are its own, so the grouping changes no bit.
// A step is 256 bytes of every row, but 128 for 16-bit rows on targets of fewer than 16 fp32 lanes (AVX2: 8
// vectors of fp32 lanes, as f32's 256 bytes are), or 64 there (the short step) where the caller asks for it
// (ShortTokenStep) or the target has fewer than 8 lanes: a 256-byte step of 16-bit rows is 16 vectors of gradY
// and 16 of a pair's row on AVX2, plus the bias row's, against 16 vector registers. On an AMD EPYC Zen 1 guest
// (three alternated runs) the short step for every 16-bit walk on AVX2 took DeepSeek-V3's bf16 finalize gradient
// from 39% of copy to 46-47% dropless and 54% to 62% drop-and-pad, and on AVX2 code on an Intel Xeon ten of
// twelve 16-bit gradient rows gained 2-16 points. On an AMD EPYC Zen 3 guest it held the walks at 16-43% (the
// load of each step's first row waits; Qwen3-30B-A3B's 4 KiB rows the most): 256-byte steps gave the walks
// without bias +17..+38 points but cost the finalize gradient's dropless rows with bias 9-26 (their registers
// spill), and 128-byte steps, three alternated runs each, gave those rows with bias +20..+38 in fp16 and
// bf16+f32 (DeepSeek-V3, Qwen3, Mixtral-8x7B), bf16 +1..+8, and the walks without bias the same as 256 bytes
// (-6..+12). So a 16-bit walk on AVX2 takes 128-byte steps on AMD's Zen 3 and later, 64-byte steps on other
// cores (WideTokenStepsOn in cpu_id.h). f32 rows (8 vectors a step) lost 5-11 points with 64-byte steps and keep
// 256. The step changes no bit: each partial sum still takes its columns in ascending order.
constexpr int64_t kTokenGroup = 4;
template <typename T>
constexpr int64_t TokenStep(bool short_step = false) {
  constexpr size_t kLanes = hn::MaxLanes(DF());
  if (sizeof(T) == 2 && kLanes < 16) return (short_step || kLanes < 8 ? 64 : 128) / 2;
  return 256 / static_cast<int64_t>(sizeof(T));
}
// Whether the 16-bit walks take the short step on this CPU (TokenStep's short_step); on AVX-512, where both steps
// are the same, whether the token walks widen bf16 rows by word permutations (LoadPairWhole's kShort form).
HWY_INLINE bool ShortTokenStep() {
  static const bool wide = WideTokenStepsOn(ThisCpu().vendor, ThisCpu().family);
  return !wide;
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
  // With prefetch_b, b is prefetched as x is, and b_next (the row the same slot adds in the next token).
  const T* b_next = nullptr;
  bool prefetch_b = false;
  float s = 1.0f;
};

// The gradY columns of one step as fp32 vectors, converted once for all pairs of the token.
template <typename T, bool kShort>
constexpr size_t TokenStepVecs() {
  return static_cast<size_t>(TokenStep<T>(kShort)) / hn::MaxLanes(DF());
}

template <typename T, bool kShort>
HWY_INLINE void LoadTokenStep(const T* HWY_RESTRICT g, int64_t j, VF* gv) {
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr size_t kVecs = TokenStepVecs<T, kShort>();
  static_assert(kVecs % 2 == 0, "a step is a whole number of vector pairs");
  for (size_t i = 0; i < kVecs; i += 2) LoadPairWhole<kShort>(g + j + static_cast<int64_t>(i) * kL, &gv[i], &gv[i + 1]);
}

// Whether the token walk takes the pair order measured on AMD's Zen 3 (AVX2 code on family 0x19 and later,
// WideTokenStepsOn in cpu_id.h): the f32 pairs of a token a step apart (ScaleDotToken), each pair's step in
// turn (TokenPairStepInTurn). Elsewhere the order of the first pass, whose loads before stores were a third
// faster on an Intel core (docs/performance.md, "Loads before stores"); neither order is measured there.
HWY_INLINE bool ZenPairOrder() {
#if HWY_TARGET == HWY_AVX2
  static const bool zen = WideTokenStepsOn(ThisCpu().vendor, ThisCpu().family);
  return zen;
#else
  return false;
#endif
}

// TokenPairStep for an f32 pair with x and out and no bias, in its plain or fused form: each vector pair's
// load, its two dot terms and its two products' store in turn, rather than the step's loads, then its dot
// terms, then its stores. The same operations on every element and the same order of each partial sum, so the
// same bits. On an AMD EPYC Zen 3 guest the f32 combine gradient and the finalize gradient's drop-and-pad rows
// gained 4-16 points of copy on three model shapes (docs/performance.md, "A pair's step in turn"); rows with
// bias gained nothing (they wait on the bias table), 16-bit rows, which widen and round in between, showed no
// gain, and both keep the grouped order.
template <bool kStream, int kForm, bool kShort, typename T>
HWY_INLINE void TokenPairStepInTurn(const VF* gv, const TokenPairRows<T>& p, int64_t j, VF* acc) {
  constexpr size_t kSteps = TokenStepVecs<T, kShort>();
  constexpr size_t kVecs = 16 / hn::MaxLanes(DF());
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  const VF vs = hn::Set(DF(), p.s);
  for (size_t i = 0; i < kSteps; i += 2) {
    const int64_t o = j + static_cast<int64_t>(i) * kL;
    VF v0, v1;
    LoadPair(p.x + o, &v0, &v1);
    acc[i % kVecs] = hn::Add(acc[i % kVecs], Product<kForm>(v0, gv[i]));
    acc[(i + 1) % kVecs] = hn::Add(acc[(i + 1) % kVecs], Product<kForm>(v1, gv[i + 1]));
    PutPair<kStream>(Product<kForm>(gv[i], vs), Product<kForm>(gv[i + 1], vs), p.out + o);
  }
}

// One step (TokenStep) of one pair, gv the step's gradY columns (cgv their BelowNormalAddend and kgv their
// BF16GridAddend, read only by kNoAssist, whose products take one test per step: MulNoAssistN,
// PutScaleNoAssistN): the dot's 16 partial sums acc take (x + b) * g column block by column block (x, b as
// present), then out = rne(g * s); all loads of the step come before its stores (rows of different pairs often
// share their address bits below 4 KiB, and a load behind a store to such an address waits for it; with
// ZenPairOrder f32 pairs are a step apart instead, ScaleDotToken). Rows move two vectors at a time (LoadPair,
// PutPair: whole cache lines of bf16 on AVX-512).
template <bool kStream, bool kDot, int kForm, bool kShort, typename T>
HWY_INLINE void TokenPairStep(const VF* gv, const VF* cgv, const VF* kgv, const TokenPairRows<T>& p, int64_t j,
                              VF* acc, bool in_turn = false) {
  constexpr size_t kSteps = TokenStepVecs<T, kShort>();
  constexpr size_t kVecs = 16 / hn::MaxLanes(DF());
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  const DF d;
  if constexpr (kDot && kForm != kNoAssist && sizeof(T) == 4) {
    if (in_turn && p.x != nullptr && p.b == nullptr && p.out != nullptr) {
      TokenPairStepInTurn<kStream, kForm, kShort>(gv, p, j, acc);
      return;
    }
  }
  if (kDot && (p.x != nullptr || p.b != nullptr)) {
    VF v[kSteps];
    const T* first = p.x != nullptr ? p.x : p.b;
    for (size_t i = 0; i < kSteps; i += 2) {
      LoadPairWhole<kShort>(first + j + static_cast<int64_t>(i) * kL, &v[i], &v[i + 1]);
    }
    if (p.x != nullptr && p.b != nullptr) {
      for (size_t i = 0; i < kSteps; i += 2) {
        VF b0, b1;
        LoadPair(p.b + j + static_cast<int64_t>(i) * kL, &b0, &b1);
        v[i] = hn::Add(v[i], b0);
        v[i + 1] = hn::Add(v[i + 1], b1);
      }
    }
    // Vector i holds columns [i * kL, (i + 1) * kL) of the step: partial sums i % kVecs.
    if constexpr (kForm == kNoAssist) {
      VF prod[kSteps];
      MulNoAssistN<kSteps>(v, gv, cgv, prod);
      for (size_t i = 0; i < kSteps; ++i) acc[i % kVecs] = hn::Add(acc[i % kVecs], prod[i]);
    } else {
      for (size_t i = 0; i < kSteps; ++i) acc[i % kVecs] = hn::Add(acc[i % kVecs], Product<kForm>(v[i], gv[i]));
    }
  }
  if (p.out != nullptr) {
    if constexpr (kForm == kNoAssist) {
      PutScaleNoAssistN<kStream, kSteps>(gv, cgv, kgv, p.s, p.out + j);
    } else {
      const VF vs = hn::Set(d, p.s);
      for (size_t i = 0; i < kSteps; i += 2) {
        PutPair<kStream>(Product<kForm>(gv[i], vs), Product<kForm>(gv[i + 1], vs),
                         p.out + j + static_cast<int64_t>(i) * kL);
      }
    }
  }
}

// For the `count` (<= kTokenGroup) pairs of one token with gradY row g (unit-stride rows of n elements),
// columns [begin, end) with begin and end multiples of TokenStep<T>(kShort) (kShort: the short step where
// TokenStep has one): out = rne(g * s) for each pair with out,
// and with kDot the 16 partial sums part[m] of pair m take (x + b) * g exactly as ScaleRowDotUnit's do (from
// zero at begin = 0, else from part[m] as a walk that stopped at begin left them: the same sums in the same
// order), ready for ScaleRowDot to finish from `end`. g_next is the next token's gradY row (or null); both it
// and the x_next rows are prefetched as the walk nears the end. With kStream every out is StreamAligned.
// With a `probe` (a walk whose products an underflow would change) the walk polls it after its first step and
// stops there if it has seen an underflow, so that the caller goes on in FormAfter's form: a token's products that
// underflow take the slow path of the multiply for one step, not for the whole walk. Returns the column the
// walk reached (end, unless it stopped).
template <typename T, bool kStream, bool kDot, int kForm, bool kShort>
HWY_NOINLINE int64_t ScaleDotToken(const T* HWY_RESTRICT g, const T* g_next, const TokenPairRows<T>* pairs,
                                   int64_t count, int64_t begin, int64_t end, int64_t n, float (*part)[16],
                                   UnderflowWatch* probe) {
  constexpr int64_t kStep = TokenStep<T>(kShort);
  constexpr size_t kStepVecs = TokenStepVecs<T, kShort>();
  constexpr int64_t kAhead = kTokenPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  constexpr size_t kLanes = hn::MaxLanes(DF());
  constexpr size_t kVecs = 16 / kLanes;
  const DF d;
  const bool in_turn = sizeof(T) == 4 && ZenPairOrder();
  VF acc[kTokenGroup][kVecs];
  for (int64_t m = 0; m < count; ++m) {
    if (kDot && begin > 0) {
      LoadPairPartials<T>(part[m], acc[m]);
    } else {
      for (size_t q = 0; q < kVecs; ++q) acc[m][q] = hn::Zero(d);
    }
  }
  // The step's gradY columns from column c, and their addends (kNoAssist).
  auto load_step = [&](int64_t c, VF* gv, VF* cgv, VF* kgv) HWY_ATTR {
    LoadTokenStep<T, kShort>(g, c, gv);
    for (size_t i = 0; i < kStepVecs; ++i) {
      cgv[i] = kForm == kNoAssist ? BelowNormalAddend(gv[i]) : gv[i];
#if MOEGRAD_ROW_OPS_BF16_GRID
      kgv[i] = kForm == kNoAssist && hwy::IsSame<T, hwy::bfloat16_t>() ? BF16GridAddend(gv[i]) : gv[i];
#else
      kgv[i] = gv[i];
#endif
    }
  };
  auto prefetch_step = [&](int64_t c) HWY_ATTR {
    for (int64_t o = c + kAhead; o < c + kAhead + kStep; o += kLine) {
      PrefetchAhead(g, g_next, o, n);
      for (int64_t m = 0; m < count; ++m) {
        if (pairs[m].x != nullptr) PrefetchAhead(pairs[m].x, pairs[m].x_next, o, n);
        if (pairs[m].prefetch_b) PrefetchAhead(pairs[m].b, pairs[m].b_next, o, n);
      }
    }
  };
  // With ZenPairOrder f32 pairs walk a step apart: pair m takes step st - m of the row while pair 0 takes step
  // st, each from its own load of gradY's columns. Rows of 28 KiB (H = 7168), 16 KiB or 8 KiB share their
  // address bits below 4 KiB at the same column, so that in step with each other every load of pair m + 1
  // follows a store of pair m to an address with the same low 12 bits, and waits for it (4K aliasing); a step
  // apart they never meet. Each pair's columns keep their order: the same sums, the same bits. On an AMD EPYC
  // Zen 3 guest DeepSeek-V3's f32 finalize gradient went from 57% of copy to 85% with bias and from 85% to 100%
  // without, its combine gradient from 80-85% to 96-97%; 16-bit rows (whose gradY columns are widened again
  // for each pair) gained in one series and not in the next (docs/performance.md, "The pairs a step apart") and
  // stay in step. The first step of a probed walk stays in step too (the probe may stop the walk after it).
  const bool skew = sizeof(T) == 4 && count > 1 && ZenPairOrder();
  bool stopped = false;
  int64_t j = begin;
  while (j < end) {
    if (skew && (probe == nullptr || j > begin)) break;
    prefetch_step(j);
    VF gv[kStepVecs];
    VF cgv[kStepVecs];
    VF kgv[kStepVecs];
    load_step(j, gv, cgv, kgv);
    for (int64_t m = 0; m < count; ++m) {
      TokenPairStep<kStream, kDot, kForm, kShort>(gv, cgv, kgv, pairs[m], j, acc[m], in_turn);
    }
    j += kStep;
    if (kForm != kNoAssist && probe != nullptr && j == begin + kStep) {
      probe->Poll();
      if (probe->seen()) {
        stopped = true;
        break;
      }
    }
  }
  if (skew && !stopped && j < end) {
    const int64_t steps = (end - j) / kStep;
    for (int64_t st = 0; st < steps + count - 1; ++st) {
      if (st < steps) prefetch_step(j + st * kStep);
      for (int64_t m = 0; m < count; ++m) {
        const int64_t sm = st - m;
        if (sm < 0 || sm >= steps) continue;
        const int64_t c = j + sm * kStep;
        VF gv[kStepVecs];
        VF cgv[kStepVecs];
        VF kgv[kStepVecs];
        load_step(c, gv, cgv, kgv);
        TokenPairStep<kStream, kDot, kForm, kShort>(gv, cgv, kgv, pairs[m], c, acc[m], in_turn);
      }
    }
    j = end;
  }
  if (kDot) {
    for (int64_t m = 0; m < count; ++m) PairPartials<T>(acc[m], part[m]);
  }
  return j;
}

// ScaleDotToken with its stores streamed when `stream` (every out StreamAligned), its products in `form`
// (ProductForm; fp16 loops always take the plain multiply) and its step TokenStep<T>(short_step).
template <typename T, bool kDot, bool kShort>
HWY_INLINE int64_t ScaleDotTokenStep(bool stream, int form, const T* HWY_RESTRICT g, const T* g_next,
                                     const TokenPairRows<T>* pairs, int64_t count, int64_t begin, int64_t end,
                                     int64_t n, float (*part)[16], UnderflowWatch* probe) {
  constexpr bool kCan = CanStream<T>();
  if (!WatchesUnderflow<T>()) form = kPlainMul;
  if (kCan && stream) {
    if (form == kNoAssist) {
      return ScaleDotToken<T, kCan, kDot, kNoAssist, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
    }
    if (form == kFused) {
      return ScaleDotToken<T, kCan, kDot, kFused, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
    }
    return ScaleDotToken<T, kCan, kDot, kPlainMul, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
  }
  if (form == kNoAssist) {
    return ScaleDotToken<T, false, kDot, kNoAssist, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
  }
  if (form == kFused) {
    return ScaleDotToken<T, false, kDot, kFused, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
  }
  return ScaleDotToken<T, false, kDot, kPlainMul, kShort>(g, g_next, pairs, count, begin, end, n, part, probe);
}
template <typename T, bool kDot>
HWY_INLINE int64_t ScaleDotTokenAny(bool stream, int form, const T* HWY_RESTRICT g, const T* g_next,
                                    const TokenPairRows<T>* pairs, int64_t count, int64_t begin, int64_t end,
                                    int64_t n, float (*part)[16], UnderflowWatch* probe, bool short_step = false) {
  if (short_step && (TokenStep<T>(true) != TokenStep<T>(false) || LoadPairWholeForms<T>())) {
    return ScaleDotTokenStep<T, kDot, true>(stream, form, g, g_next, pairs, count, begin, end, n, part, probe);
  }
  return ScaleDotTokenStep<T, kDot, false>(stream, form, g, g_next, pairs, count, begin, end, n, part, probe);
}

// The token walk of ScaleDotTokenAny over columns [0, end) as the callers take it, with the form of its products
// after `watch` (FormAfter; `fused` as there): until the watch has seen an underflow the walk probes it after
// its first step and goes on in kNoAssist if it has. Returns the form the walk ended in, for the columns after
// `end` (ScaleRowDot).
template <typename T, bool kDot>
HWY_INLINE int ScaleDotTokenWatched(bool stream, UnderflowWatch& watch, bool fused, const T* HWY_RESTRICT g,
                                    const T* g_next, const TokenPairRows<T>* pairs, int64_t count, int64_t end,
                                    int64_t n, float (*part)[16], bool short_step = false) {
  const int form = FormAfter(watch, fused);
  // Probed only while an underflow would change the form.
  const bool changes = !watch.seen() && !(fused && watch.fused_spared());
  UnderflowWatch* probe = changes ? &watch : nullptr;
  const int64_t reached =
      ScaleDotTokenAny<T, kDot>(stream, form, g, g_next, pairs, count, 0, end, n, part, probe, short_step);
  if (reached == end) return form;
  const int after = FormAfter(watch, fused);
  ScaleDotTokenAny<T, kDot>(stream, after, g, g_next, pairs, count, reached, end, n, part, nullptr, short_step);
  return after;
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_SCALE_DOT_INL_H_
