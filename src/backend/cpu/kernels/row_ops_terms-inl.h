// Sums of weighted terms (x + b) * s, compiled once per SIMD target (include after foreach_target.h): an output
// row as the sum, left to right from the first term, of up to kGroup terms read side by side (AddGroup over
// tiles, or SumTermsUnit over a whole unit-stride row with the next row's terms prefetched and streaming
// stores). MoeFinalizeRoutingV2's terms (expandedX rows plus bias, scaled) and MoeTokenUnpermuteWithRoutingMap's
// (permuted rows times their probabilities).

// Per-target include guard (Highway's toggle idiom).
#if defined(MOEGRAD_KERNELS_ROW_OPS_TERMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEGRAD_KERNELS_ROW_OPS_TERMS_INL_H_
#undef MOEGRAD_KERNELS_ROW_OPS_TERMS_INL_H_
#else
#define MOEGRAD_KERNELS_ROW_OPS_TERMS_INL_H_
#endif

#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"
#include "src/backend/cpu/kernels/underflow_watch.h"

HWY_BEFORE_NAMESPACE();
namespace moegrad::kernels::HWY_NAMESPACE {

// An output row is produced in tiles of kTile columns. Within a tile, up to kGroup terms are read side by side
// (one vector of each per step, a handful of sequential streams the prefetcher follows); a row with more
// terms carries its fp32 partial sums in `acc` from one group to the next. Neither size changes the order in
// which an element's terms are added.
constexpr int64_t kTile = 512;
constexpr int kGroup = 16;

// (x + b) * s with an absent x or b left out (not added as zero); x1 and x2 are unscaled terms.
template <typename T>
struct Term {
  const T* x;
  int64_t xs;
  const T* b;
  int64_t bs;
  float s;
  bool scaled;
};

// The products of a term's row by its scale take Product<kForm>: the fused form (MulRounded), or from the first
// underflow on kNoAssist (the callers' UnderflowWatch, TermsNoAssist) with the scale's BelowNormalAddend. The
// same bits. (The unit-stride walks' last columns take the same form one element at a time, TermAt<kForm>.)
template <int kForm, typename T>
HWY_INLINE VF TermVec(DF d, const Term<T>& t, int64_t j) {
  VF v = (t.x && t.b) ? hn::Add(LoadF32(d, t.x + j), LoadF32(d, t.b + j)) : LoadF32(d, t.x ? t.x + j : t.b + j);
  if (!t.scaled) return v;
  const VF s = hn::Set(d, t.s);
  return Product<kForm>(v, s, BelowNormalAddend(s));
}

// One element of a term, its product in ScalarProduct<kForm>.
template <int kForm, typename T>
HWY_INLINE float TermAt(const Term<T>& t, int64_t j) {
  float v = (t.x && t.b) ? ToF32(t.x[j * t.xs]) + ToF32(t.b[j * t.bs]) : ToF32(t.x ? t.x[j * t.xs] : t.b[j * t.bs]);
  return t.scaled ? ScalarProduct<kForm>(v, t.s) : v;
}

// Whether a walk's products take kNoAssist: once its UnderflowWatch has seen an underflow, except on a core
// whose fused form has no slow path (UnderflowWatch::fused_spared), where they stay fused.
HWY_INLINE bool TermsNoAssist(const UnderflowWatch& watch) { return watch.seen() && !watch.fused_spared(); }

// fn(std::integral_constant<int, kForm>()) with kForm the form of a walk's products: kNoAssist when
// `no_assist` (TermsNoAssist), else kFused.
template <typename Fn>
HWY_INLINE void WithTermForm(bool no_assist, const Fn& fn) {
  if (no_assist) {
    fn(std::integral_constant<int, kNoAssist>());
  } else {
    fn(std::integral_constant<int, kFused>());
  }
}

// Columns [0, n) of one tile: acc-or-nothing (first) plus terms[0..count), stored to dst (last) or to acc.
// kForm is the element loop's form after the caller's watch (ScalarFormAfter: the plain multiply until an
// underflow, which costs ordinary strided rows less than the scalar FMA); the vectors take the fused form,
// or kNoAssist with kNoAssist (TermsNoAssist). The same bits in every form.
template <int kForm, typename T>
HWY_INLINE void AddGroup(const Term<T>* terms, int count, bool first, bool last, float* HWY_RESTRICT acc,
                         T* dst, int64_t dst_stride, int64_t n, bool unit) {
  constexpr int kVecForm = kForm == kNoAssist ? kNoAssist : kFused;
  int64_t j = 0;
  if (unit) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    for (; j + lanes <= n; j += lanes) {
      VF v;
      int m = 0;
      if (first) {
        v = count > 0 ? TermVec<kVecForm>(d, terms[m++], j) : hn::Zero(d);
      } else {
        v = hn::LoadU(d, acc + j);
      }
      for (; m < count; ++m) v = hn::Add(v, TermVec<kVecForm>(d, terms[m], j));
      if (last) StoreF32(d, v, dst + j);
      else hn::StoreU(v, d, acc + j);
    }
  }
  for (; j < n; ++j) {
    float v;
    int m = 0;
    if (first) {
      v = count > 0 ? TermAt<kForm>(terms[m++], j) : 0.0f;
    } else {
      v = acc[j];
    }
    for (; m < count; ++m) v = v + TermAt<kForm>(terms[m], j);
    if (last) dst[j * dst_stride] = FromF32<T>(v);
    else acc[j] = v;
  }
}

// Two vectors of term t from column j (a cache line of 16-bit rows on AVX-512), in LoadPairLanes' element order.
// In kNoAssist both products take one lane test (MulNoAssistN): a tiny row's vectors, every lane below the normal
// range, skip each vector's test and masked multiply.
template <int kForm, typename T>
HWY_INLINE void TermPair(const Term<T>& t, int64_t j, VF* v0, VF* v1) {
  LoadPairLanes(t.x ? t.x + j : t.b + j, v0, v1);
  if (t.x && t.b) {
    VF b0, b1;
    LoadPairLanes(t.b + j, &b0, &b1);
    *v0 = hn::Add(*v0, b0);
    *v1 = hn::Add(*v1, b1);
  }
  if (t.scaled) {
    const VF s = hn::Set(DF(), t.s);
    const VF cs = BelowNormalAddend(s);  // from the vector: the scale is read once, broadcast from memory
    if constexpr (kForm == kNoAssist) {
      VF v[2] = {*v0, *v1};
      MulNoAssistN<2>(v, s, cs, v);
      *v0 = v[0];
      *v1 = v[1];
    } else {
      *v0 = Product<kForm>(*v0, s, cs);
      *v1 = Product<kForm>(*v1, s, cs);
    }
  }
}

// A whole unit-stride row of n columns from at most kGroup terms (pointers at column 0), all terms read side by
// side, two vectors per step (four for 16-bit rows on AVX2: a whole cache line), and stored once (streaming with
// kStream): the same additions per element, in the same order, as AddGroup over the tiles. A row of more terms
// goes in groups through an fp32 row `acc` of n floats: the first group with kAccOut (its sums to acc), the
// middle ones with kAccIn and kAccOut, the last with kAccIn (acc plus its terms, to dst); acc holds the sums in
// the walk's own element order, which only these calls read.
// kForm is the form of the products (TermVec): kFused, or kNoAssist once the caller's UnderflowWatch has seen
// an underflow on a core whose fused form has the slow path (TermsNoAssist); the same bits either way.
// Each term's row x (the rows from memory: expandedX, x1, x2; bias rows are left to the caches) is prefetched
// kTermPrefetchBytes ahead of the loads, and near its end the same term's row of the next output row
// (next[m].x, m < next_count).
constexpr int64_t kTermPrefetchBytes = 1024;

template <typename T, bool kStream, bool kAccIn = false, bool kAccOut = false, int kForm = kFused>
HWY_NOINLINE void SumTermsUnit(const Term<T>* terms, int count, const Term<T>* next, int next_count,
                               T* HWY_RESTRICT dst, int64_t n, float* HWY_RESTRICT acc = nullptr) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kAhead = kTermPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  constexpr int kFirst = kAccIn ? 0 : 1;  // the first term added to the running sums
  constexpr int kPairs = PairsPerLine<T>();
  // kP vector pairs of every term from column j, summed and stored.
  auto step = [&](auto pairs, int64_t j) HWY_ATTR {
    constexpr int kP = decltype(pairs)::value;
    VF a[2 * kP];
    for (int q = 0; q < kP; ++q) {
      const int64_t o = j + 2 * kL * q;
      if (kAccIn) {
        a[2 * q] = hn::LoadU(d, acc + o);
        a[2 * q + 1] = hn::LoadU(d, acc + o + kL);
      } else if (count > 0) {
        TermPair<kForm>(terms[0], o, &a[2 * q], &a[2 * q + 1]);
      } else {
        a[2 * q] = a[2 * q + 1] = hn::Zero(d);
      }
    }
    for (int m = kFirst; m < count; ++m) {
      for (int q = 0; q < kP; ++q) {
        VF v0, v1;
        TermPair<kForm>(terms[m], j + 2 * kL * q, &v0, &v1);
        a[2 * q] = hn::Add(a[2 * q], v0);
        a[2 * q + 1] = hn::Add(a[2 * q + 1], v1);
      }
    }
    StorePairsLanes<kStream, kAccOut, kP>(a, dst + j, kAccOut ? acc + j : nullptr);
  };
  int64_t j = 0;
  for (; j + 2 * kL * kPairs <= n; j += 2 * kL * kPairs) {
    for (int64_t o = j + kAhead; o < j + kAhead + 2 * kL * kPairs; o += kLine) {
      for (int m = 0; m < count; ++m) {
        if (terms[m].x != nullptr) PrefetchAhead(terms[m].x, m < next_count ? next[m].x : nullptr, o, n);
      }
    }
    step(std::integral_constant<int, kPairs>(), j);
  }
  for (; kPairs > 1 && j + 2 * kL <= n; j += 2 * kL) step(std::integral_constant<int, 1>(), j);
  for (; j + kL <= n; j += kL) {
    VF v = kAccIn ? hn::LoadU(d, acc + j) : count > 0 ? TermVec<kForm>(d, terms[0], j) : hn::Zero(d);
    for (int m = kFirst; m < count; ++m) v = hn::Add(v, TermVec<kForm>(d, terms[m], j));
    if (kAccOut) hn::StoreU(v, d, acc + j);
    else StoreF32(d, v, dst + j);
  }
  for (; j < n; ++j) {
    float v = kAccIn ? acc[j] : count > 0 ? TermAt<kForm>(terms[0], j) : 0.0f;
    for (int m = kFirst; m < count; ++m) v = v + TermAt<kForm>(terms[m], j);
    if (kAccOut) acc[j] = v;
    else dst[j] = FromF32<T>(v);
  }
}

// SumTermsUnit over a row of terms that SplitsRows longer than kTermSplitBytes: in groups of kSplitTerms terms
// through an fp32 row. DeepSeek-V3's f32 combine (8 terms of 28 KiB, five alternated runs) went from 78-81% of
// copy to 84-87%, its forward finalize in f32 +1..+5; its 16-bit rows (14 KiB, whose fp32 row is twice their
// size) went 2-16 points slower, and slower still (-11..-17) with the groups a block of 2048 columns at a time:
// they stay in one pass.
constexpr int64_t kTermSplitBytes = 16384;

template <typename T, bool kStream, int kForm>
HWY_NOINLINE void SumTermsSplit(const Term<T>* terms, int count, const Term<T>* next, int next_count,
                                T* HWY_RESTRICT dst, int64_t n) {
  HWY_ALIGN float acc[kSplitColumns];
  for (int m0 = 0; m0 < count;) {
    const int size = static_cast<int>(SplitGroupAt(m0, count));
    const int m1 = m0 + size;  // the next group
    const bool last = m1 >= count;
    const Term<T>* ahead = last ? next : terms + m1;
    const int ahead_count = last ? next_count : static_cast<int>(SplitGroupAt(m1, count));
    if (m0 == 0) {
      SumTermsUnit<T, false, false, true, kForm>(terms, size, ahead, ahead_count, dst, n, acc);
    } else if (!last) {
      SumTermsUnit<T, false, true, true, kForm>(terms + m0, size, ahead, ahead_count, dst, n, acc);
    } else {
      SumTermsUnit<T, kStream, true, false, kForm>(terms + m0, size, ahead, ahead_count, dst, n, acc);
    }
    m0 = m1;
  }
}

// A whole unit-stride row of at most kGroup terms (SumTermsUnit, or SumTermsSplit for long rows), its
// stores streamed when `stream` and dst is StreamAligned, in the form after `watch` (WithTermForm), which it
// polls after the row; returns the form of the row's last columns.
// With `probe` (a walk's first row), until the watch has seen an underflow and unless the core spares the
// fused form (then nothing would change), the row's first kTermProbeBytes go first: the watch is polled, and
// the rest of the row goes in kNoAssist if it has seen one, so that a walk of tiny values takes the slow path
// of the multiply for those columns only, not for its whole first row (the sums are element by element: the
// split changes no bit). Only the first row: on the rows after it the second call cost ordinary values 2-4
// points of copy at Qwen3-30B-A3B's 4 KiB rows.
constexpr int64_t kTermProbeBytes = 256;

// out[m] = terms[m] from column j on, m < count.
template <typename T>
HWY_INLINE void TermsFrom(const Term<T>* terms, int count, int64_t j, Term<T>* out) {
  for (int m = 0; m < count; ++m) {
    out[m] = terms[m];
    if (out[m].x != nullptr) out[m].x += j * out[m].xs;
    if (out[m].b != nullptr) out[m].b += j * out[m].bs;
  }
}

// Whether a walk's first row goes in two calls, its first kTermProbeBytes and then the rest in the form the
// watch gives after them (SumTermsRowWatched; the first group of a token of many terms).
template <typename T>
HWY_INLINE bool ProbesRow(const UnderflowWatch& watch, int64_t n) {
  return !watch.seen() && !watch.fused_spared() && n > kTermProbeBytes / static_cast<int64_t>(sizeof(T));
}

template <typename T>
HWY_INLINE int SumTermsRowWatched(UnderflowWatch& watch, bool probe, bool stream, const Term<T>* terms, int count,
                                  const Term<T>* next, int next_count, T* dst, int64_t n) {
  int last = kFused;  // the form of the row's last part
  auto sum = [&](bool no_assist, const Term<T>* ts, const Term<T>* nx, int nc, T* out, int64_t len) {
    last = no_assist ? kNoAssist : kFused;
    WithTermForm(no_assist, [&](auto form) {
      constexpr int kForm = decltype(form)::value;
      const bool streams = CanStream<T>() && stream && StreamAligned(out);
      if (SplitsRows<T>(count, len, kTermSplitBytes)) {
        if (streams) {
          SumTermsSplit<T, CanStream<T>(), kForm>(ts, count, nx, nc, out, len);
        } else {
          SumTermsSplit<T, false, kForm>(ts, count, nx, nc, out, len);
        }
      } else if (streams) {
        SumTermsUnit<T, CanStream<T>(), false, false, kForm>(ts, count, nx, nc, out, len);
      } else {
        SumTermsUnit<T, false, false, false, kForm>(ts, count, nx, nc, out, len);
      }
    });
  };
  constexpr int64_t kProbe = kTermProbeBytes / static_cast<int64_t>(sizeof(T));
  if (probe && ProbesRow<T>(watch, n)) {
    sum(false, terms, nullptr, 0, dst, kProbe);
    watch.Poll();
    Term<T> rest[kGroup];
    TermsFrom(terms, count, kProbe, rest);
    sum(TermsNoAssist(watch), rest, next, next_count, dst + kProbe, n - kProbe);
  } else {
    sum(TermsNoAssist(watch), terms, next, next_count, dst, n);
  }
  watch.Poll();
  return last;
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEGRAD_KERNELS_ROW_OPS_TERMS_INL_H_
