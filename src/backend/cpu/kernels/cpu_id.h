// The CPU's vendor and family from CPUID, read once per process, for the few choices of the kernels that
// depend on the core rather than on the SIMD target (underflow_watch.h, TokenStep in row_ops_scale_dot-inl.h).
// Elsewhere than x86 with GCC or Clang the vendor is empty and the family 0.
#ifndef MOEGRAD_BACKEND_CPU_KERNELS_CPU_ID_H_
#define MOEGRAD_BACKEND_CPU_KERNELS_CPU_ID_H_

#include <string>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define MOEGRAD_CPU_ID_CPUID 1
#else
#define MOEGRAD_CPU_ID_CPUID 0
#endif

namespace moegrad::kernels {

struct CpuId {
  std::string vendor;   // the 12 characters of leaf 0 ("AuthenticAMD", "GenuineIntel", ...)
  unsigned family = 0;  // leaf 1's family, the extended family added where the base family is 0xF
};

inline const CpuId& ThisCpu() {
  static const CpuId id = [] {
    CpuId c;
#if MOEGRAD_CPU_ID_CPUID
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return c;
    const unsigned words[3] = {ebx, edx, ecx};  // leaf 0: the vendor in EBX, EDX, ECX
    for (unsigned w : words) {
      for (int i = 0; i < 4; ++i) c.vendor.push_back(static_cast<char>((w >> (8 * i)) & 0xFF));
    }
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return c;
    const unsigned base = (eax >> 8) & 0xF;
    c.family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
#endif
    return c;
  }();
  return id;
}

// Whether the 16-bit token walks of targets with 8 fp32 lanes (AVX2) take 128-byte steps on a core of this
// CPUID vendor and family: AMD's family 0x19 (Zen 3, Zen 4) and later; elsewhere 64-byte steps (TokenStep in
// row_ops_scale_dot-inl.h, where the measurements are).
inline bool WideTokenStepsOn(const std::string& vendor, unsigned family) {
  return vendor == "AuthenticAMD" && family >= 0x19;
}

}  // namespace moegrad::kernels

#endif  // MOEGRAD_BACKEND_CPU_KERNELS_CPU_ID_H_
