// UnderflowWatch: whether this thread's fp32 arithmetic has underflowed since the watch began, read from the
// sticky flags of the x86 MXCSR register; the scale-and-dot loops of the gradients (row_ops_scale_dot-inl.h)
// and the forward walks of weighted rows (row_ops_terms-inl.h) use it to pick their multiply.
//
// On some x86 cores a vector multiply whose product underflows takes a slow path: about 3x the time of a bf16
// scale-and-dot loop on AMD Zen 3, about 40x a multiply on an Intel Xeon with AVX-512 and AMX. On AMD cores
// (Zen 3 and Zen 5 measured) the fused multiply-add is spared; on the Intel Xeon it takes the slow path too.
// MulNoAssist (row_ops-inl.h) keeps subnormals out of every float multiply and rounds to the same bits, but its
// test in every multiply costs ordinary values. So a loop runs the plain multiply (the forward walks, and bf16
// gradient walks with a large bias table, the fused form: FmaFromTheStart in row_ops_scale_dot-inl.h) until
// the underflow flag says a product has underflowed, and from then on MulNoAssist, except on a core that
// spares the fused form (fused_spared(), FusedSparesUnderflow), where the walks go on in the fused form: the
// same bits either way, only the speed differs. The element-by-element loops (strided rows, row tails) keep
// the plain multiply until then and take the scalar FMA where the core spares it, else the scalar
// MulNoAssistScalar (ScalarFormAfter, WithScalarForm, below).
// Elsewhere (ARM, no MXCSR) seen() is always false.
//
// The caller's flags are kept: the watch clears the underflow and denormal-operand flags when it begins and,
// when it ends, sets again those that were set before, so the thread's flags afterwards are exactly those the
// arithmetic raised, as without the watch. Nothing else of the floating-point environment is touched.
#ifndef MOEGRAD_BACKEND_CPU_KERNELS_UNDERFLOW_WATCH_H_
#define MOEGRAD_BACKEND_CPU_KERNELS_UNDERFLOW_WATCH_H_

#include <string_view>
#include <type_traits>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>
#define MOEGRAD_UNDERFLOW_WATCH_MXCSR 1
#else
#define MOEGRAD_UNDERFLOW_WATCH_MXCSR 0
#endif

#include "src/backend/cpu/kernels/cpu_id.h"

namespace moegrad::kernels {

// The rule by the 12 characters of CPUID leaf 0's vendor: AMD's and Hygon's (Zen) cores spare the fused form;
// any other vendor, or none, takes MulNoAssist after an underflow.
inline bool FusedSparesUnderflowOn(std::string_view vendor) {
  return vendor == "AuthenticAMD" || vendor == "HygonGenuine";
}

// Whether a fused multiply-add whose result is below fp32's normal range takes no slow path on this CPU, read
// once per process from the CPUID vendor (FusedSparesUnderflowOn); false without MXCSR, where nothing is
// watched. On an AMD EPYC Zen 5 guest with AVX-512 (bench/underflow_bench.cc) the plain multiply ran products
// below the normal range 2.8x slower than ordinary ones and the fused form at the same speed; the DeepSeek-V3
// finalize gradient's dropless bf16 rows ran tiny values at 0.85-0.86 of ordinary values' speed with
// MulNoAssist and at 0.97-1.00 with the fused form, and Qwen3-30B-A3B's combine bf16 rows at 0.87-0.91 and
// 0.99-1.00 (docs/performance.md, "The fused form after an underflow on AMD cores").
inline bool FusedSparesUnderflow() {
  static const bool spared = MOEGRAD_UNDERFLOW_WATCH_MXCSR != 0 && FusedSparesUnderflowOn(ThisCpu().vendor);
  return spared;
}

class UnderflowWatch {
 public:
  // A watch that is not `enabled` reads and writes no flags and never reports an underflow (fp16 loops, whose
  // products cannot underflow: WatchesUnderflow in row_ops_scale_dot-inl.h).
  explicit UnderflowWatch(bool enabled = true) : UnderflowWatch(enabled, FusedSparesUnderflow()) {}
  // With fused_spared() given rather than read from the CPU (the tests take both on any core).
  UnderflowWatch(bool enabled, bool fused_spared)
      : enabled_(enabled && kMxcsr), fused_spared_(enabled_ && fused_spared) {
#if MOEGRAD_UNDERFLOW_WATCH_MXCSR
    if (enabled_) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ & ~kFlags);
    }
#endif
  }
  ~UnderflowWatch() {
#if MOEGRAD_UNDERFLOW_WATCH_MXCSR
    if (enabled_) _mm_setcsr(_mm_getcsr() | (saved_ & kFlags));
#endif
  }
  UnderflowWatch(const UnderflowWatch&) = delete;
  UnderflowWatch& operator=(const UnderflowWatch&) = delete;

  // Reads the flags once more, after a unit of work; once an underflow has been seen it stays seen.
  void Poll() {
#if MOEGRAD_UNDERFLOW_WATCH_MXCSR
    if (enabled_ && !seen_) seen_ = (_mm_getcsr() & kFlags) != 0;
#endif
  }
  // Whether an underflow was seen by the last Poll(): the loops then take MulNoAssist, or the fused form
  // where fused_spared().
  bool seen() const { return seen_; }
  // FusedSparesUnderflow() (or the constructor's fused_spared) for an enabled watch, false for one that is not.
  bool fused_spared() const { return fused_spared_; }

 private:
#if MOEGRAD_UNDERFLOW_WATCH_MXCSR
  static constexpr bool kMxcsr = true;
  // MXCSR bit 1: an operand was denormal (DE); bit 4: a result was tiny and inexact (UE).
  static constexpr unsigned kFlags = 0x2u | 0x10u;
  unsigned saved_ = 0;
#else
  static constexpr bool kMxcsr = false;
#endif
  [[maybe_unused]] bool enabled_;  // read only where there are flags to read
  bool fused_spared_;
  bool seen_ = false;
};

// How a loop takes its products, all rounded once to the same bits (row_ops-inl.h): kPlainMul the plain
// multiply, kFused the fused multiply-add a * b + -0 (MulRounded, MulRoundedScalar: spared the slow underflow
// path on AMD cores), kNoAssist MulNoAssist / MulNoAssistScalar (no subnormal in or out of any float multiply,
// for cores whose fused form has the slow path too).
enum ProductForm : int { kPlainMul = 0, kFused = 1, kNoAssist = 2 };

// The form of the element-by-element loops' products after `watch` (ScalarProduct<kForm> in row_ops-inl.h):
// the plain multiply until an underflow is seen, which costs ordinary values less there than the scalar FMA;
// then the scalar FMA on a core that spares it (fused_spared), else MulNoAssistScalar.
inline int ScalarFormAfter(const UnderflowWatch& watch) {
  if (!watch.seen()) return kPlainMul;
  return watch.fused_spared() ? kFused : kNoAssist;
}

// fn(std::integral_constant<int, kForm>()) with kForm = ScalarFormAfter(watch).
template <typename Fn>
inline void WithScalarForm(const UnderflowWatch& watch, const Fn& fn) {
  switch (ScalarFormAfter(watch)) {
    case kFused:
      fn(std::integral_constant<int, kFused>());
      break;
    case kNoAssist:
      fn(std::integral_constant<int, kNoAssist>());
      break;
    default:
      fn(std::integral_constant<int, kPlainMul>());
      break;
  }
}

}  // namespace moegrad::kernels

#endif  // MOEGRAD_BACKEND_CPU_KERNELS_UNDERFLOW_WATCH_H_
