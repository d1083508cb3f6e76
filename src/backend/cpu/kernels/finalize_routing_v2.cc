// MoeFinalizeRoutingV2 kernels, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/kernels/finalize_routing_v2.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/backend/cpu/parallel.h"
#include "src/backend/cpu/kernels/finalize_routing_v2.h"
#include "src/backend/cpu/kernels/row_ops-inl.h"
#include "src/backend/cpu/kernels/row_ops_pair-inl.h"
#include "src/backend/cpu/kernels/row_ops_stream-inl.h"

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

template <typename T>
HWY_INLINE VF TermVec(DF d, const Term<T>& t, int64_t j) {
  VF v = (t.x && t.b) ? hn::Add(LoadF32(d, t.x + j), LoadF32(d, t.b + j)) : LoadF32(d, t.x ? t.x + j : t.b + j);
  return t.scaled ? hn::Mul(v, hn::Set(d, t.s)) : v;
}

template <typename T>
HWY_INLINE float TermAt(const Term<T>& t, int64_t j) {
  float v = (t.x && t.b) ? ToF32(t.x[j * t.xs]) + ToF32(t.b[j * t.bs]) : ToF32(t.x ? t.x[j * t.xs] : t.b[j * t.bs]);
  return t.scaled ? v * t.s : v;
}

// Columns [0, n) of one tile: acc-or-nothing (first) plus terms[0..count), stored to dst (last) or to acc.
template <typename T>
HWY_INLINE void AddGroup(const Term<T>* terms, int count, bool first, bool last, float* HWY_RESTRICT acc,
                         T* dst, int64_t dst_stride, int64_t n, bool unit) {
  int64_t j = 0;
  if (unit) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    for (; j + lanes <= n; j += lanes) {
      VF v;
      int m = 0;
      if (first) {
        v = count > 0 ? TermVec(d, terms[m++], j) : hn::Zero(d);
      } else {
        v = hn::LoadU(d, acc + j);
      }
      for (; m < count; ++m) v = hn::Add(v, TermVec(d, terms[m], j));
      if (last) StoreF32(d, v, dst + j);
      else hn::StoreU(v, d, acc + j);
    }
  }
  for (; j < n; ++j) {
    float v;
    int m = 0;
    if (first) {
      v = count > 0 ? TermAt(terms[m++], j) : 0.0f;
    } else {
      v = acc[j];
    }
    for (; m < count; ++m) v = v + TermAt(terms[m], j);
    if (last) dst[j * dst_stride] = FromF32<T>(v);
    else acc[j] = v;
  }
}

// Two vectors of term t from column j (a cache line of 16-bit rows: converted as LoadPair does).
template <typename T>
HWY_INLINE void TermPair(const Term<T>& t, int64_t j, VF* v0, VF* v1) {
  LoadPair(t.x ? t.x + j : t.b + j, v0, v1);
  if (t.x && t.b) {
    VF b0, b1;
    LoadPair(t.b + j, &b0, &b1);
    *v0 = hn::Add(*v0, b0);
    *v1 = hn::Add(*v1, b1);
  }
  if (t.scaled) {
    const VF s = hn::Set(DF(), t.s);
    *v0 = hn::Mul(*v0, s);
    *v1 = hn::Mul(*v1, s);
  }
}

// A whole unit-stride row of n columns from at most kGroup terms (pointers at column 0), all terms read side
// by side, two vectors per step, and stored once (streaming with kStream): the same additions per element,
// in the same order, as AddGroup over the tiles.
// Each term's row x (the rows from memory: expandedX, x1, x2; bias rows are left to the caches) is prefetched
// kTermPrefetchBytes ahead of the loads, and near its end the same term's row of the next output row
// (next[m].x, m < next_count).
constexpr int64_t kTermPrefetchBytes = 1024;

template <typename T, bool kStream>
HWY_NOINLINE void SumTermsUnit(const Term<T>* terms, int count, const Term<T>* next, int next_count,
                               T* HWY_RESTRICT dst, int64_t n) {
  const DF d;
  constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kAhead = kTermPrefetchBytes / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  int64_t j = 0;
  for (; j + 2 * kL <= n; j += 2 * kL) {
    for (int64_t o = j + kAhead; o < j + kAhead + 2 * kL; o += kLine) {
      for (int m = 0; m < count; ++m) {
        if (terms[m].x != nullptr) PrefetchAhead(terms[m].x, m < next_count ? next[m].x : nullptr, o, n);
      }
    }
    VF a0 = hn::Zero(d), a1 = hn::Zero(d);
    if (count > 0) TermPair(terms[0], j, &a0, &a1);
    for (int m = 1; m < count; ++m) {
      VF v0, v1;
      TermPair(terms[m], j, &v0, &v1);
      a0 = hn::Add(a0, v0);
      a1 = hn::Add(a1, v1);
    }
    PutPair<kStream>(a0, a1, dst + j);
  }
  for (; j + kL <= n; j += kL) {
    VF v = count > 0 ? TermVec(d, terms[0], j) : hn::Zero(d);
    for (int m = 1; m < count; ++m) v = hn::Add(v, TermVec(d, terms[m], j));
    StoreF32(d, v, dst + j);
  }
  for (; j < n; ++j) {
    float v = count > 0 ? TermAt(terms[0], j) : 0.0f;
    for (int m = 1; m < count; ++m) v = v + TermAt(terms[m], j);
    dst[j] = FromF32<T>(v);
  }
}

template <typename T>
void FinalizeRoutingV2Typed(const FinalizeRoutingV2Task& p) {
  const int64_t R = p.tokens;
  const int64_t K = p.topk;
  const int64_t H = p.hidden;
  const bool has_x1 = p.x1.data != nullptr;
  const bool has_x2 = p.x2.data != nullptr;
  const bool has_scales = p.scales.data != nullptr;
  const bool has_bias = p.bias.data != nullptr;
  const bool unit = p.out.col_stride == 1 && p.expanded_x.col_stride == 1 && (!has_x1 || p.x1.col_stride == 1) &&
                    (!has_x2 || p.x2.col_stride == 1) && (!has_bias || p.bias.col_stride == 1);
  // Term c of a row: x1 (if given), x2 (if given), then pair k = c - (number of residuals).
  const int64_t residuals = (has_x1 ? 1 : 0) + (has_x2 ? 1 : 0);
  const int64_t cursor_end = residuals + K;
  // A task should move a few hundred KB: up to K + 2 source rows and one destination row.
  const int64_t row_bytes = std::max<int64_t>(1, (K + 3) * H * static_cast<int64_t>(sizeof(T)));
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / row_bytes);

  const int64_t out_bytes = R * H * static_cast<int64_t>(sizeof(T));
  const bool stream = unit && StreamOutput(out_bytes, (cursor_end + 1) * out_bytes);  // the terms and the output
  // With at most kGroup terms a row's terms always fit in one group: the whole row in one pass.
  const bool whole_rows = unit && cursor_end <= kGroup;
  internal::ParallelFor(0, R, grain, [&](int64_t begin, int64_t end) {
    HWY_ALIGN float acc[kTile];
    Term<T> terms[kGroup];
    Term<T> rows_terms[2][kGroup];  // whole rows: this row's terms and the next row's
    int rows_count[2] = {0, 0};
    int cur = 0;
    for (int64_t r = begin; r < end; ++r) {
      T* dst = p.out.Row<T>(r);
      int64_t j0 = 0;
      int64_t cursor = 0;
      // Collects the next group of non-empty terms of output row `row`, with pointers at column j0.
      auto collect_row = [&](int64_t row, Term<T>* out) {
        int count = 0;
        for (; cursor < cursor_end && count < kGroup; ++cursor) {
          Term<T>& t = out[count];
          if (cursor < residuals) {
            const RowView& src = (cursor == 0 && has_x1) ? p.x1 : p.x2;
            t = {src.Row<const T>(row) + j0 * src.col_stride, src.col_stride, nullptr, 0, 1.0f, false};
            ++count;
            continue;
          }
          const int64_t k = cursor - residuals;
          const int64_t v = p.row_idx.At<const int32_t>(p.expert_major ? k * R + row : row * K + k);
          const T* x = v >= 0 ? p.expanded_x.Row<const T>(v) + j0 * p.expanded_x.col_stride : nullptr;
          const T* b = has_bias ? p.bias.Row<const T>(p.expert_idx.At<const int32_t>(row * K + k)) +
                                      j0 * p.bias.col_stride
                                : nullptr;
          if (x == nullptr && b == nullptr) continue;  // a dropped pair without bias adds nothing
          const float s = has_scales ? LoadWeight(p.scales, row * K + k, p.weight_dtype) : 1.0f;
          t = {x, p.expanded_x.col_stride, b, p.bias.col_stride, s, true};
          ++count;
        }
        return count;
      };
      auto collect = [&]() { return collect_row(r, terms); };
      if (whole_rows) {
        // This row's terms were collected one row ahead (the first at the start), so that the next row's
        // can be prefetched while this one is summed.
        if (r == begin) {
          rows_count[cur] = collect_row(r, rows_terms[cur]);
        }
        rows_count[cur ^ 1] = 0;
        if (r + 1 < end) {
          cursor = 0;
          rows_count[cur ^ 1] = collect_row(r + 1, rows_terms[cur ^ 1]);
        }
        const Term<T>* these = rows_terms[cur];
        const int count = rows_count[cur];
        if (CanStream<T>() && stream && StreamAligned(dst)) {
          SumTermsUnit<T, CanStream<T>()>(these, count, rows_terms[cur ^ 1], rows_count[cur ^ 1], dst, H);
        } else {
          SumTermsUnit<T, false>(these, count, rows_terms[cur ^ 1], rows_count[cur ^ 1], dst, H);
        }
        cur ^= 1;
        continue;
      }
      for (; j0 < H; j0 += kTile) {
        const int64_t n = std::min<int64_t>(kTile, H - j0);
        cursor = 0;
        bool first = true;
        for (;;) {
          const int count = collect();
          const bool last = cursor >= cursor_end;
          AddGroup<T>(terms, count, first, last, acc, dst + j0 * p.out.col_stride, p.out.col_stride, n, unit);
          if (last) break;
          first = false;
        }
      }
    }
    if (stream) hwy::FlushStream();
  });
}

void FinalizeRoutingV2Impl(const FinalizeRoutingV2Task& p) {
  WithFloatType(p.dtype, [&](auto zero) { FinalizeRoutingV2Typed<decltype(zero)>(p); });
}

}  // namespace moegrad::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moegrad::kernels {

MOEGRAD_KERNEL_ENTRY(RunFinalizeRoutingV2, FinalizeRoutingV2Impl, FinalizeRoutingV2Task)

}  // namespace moegrad::kernels
#endif  // HWY_ONCE
