// `moegrad info`: what moegrad sees of this machine.
#include <cstdio>
#include <cstdlib>

#include "moegrad/plan.hpp"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/measure.h"

namespace moegrad::tool {

int RunInfo() {
  std::printf("moegrad %s\n", Version());
  std::printf("SIMD target:    %s\n", SimdTarget());
  const char* env = std::getenv("MOEGRAD_NUM_THREADS");
  std::printf("threads:        %d%s%s%s\n", NumThreads(), env ? " (MOEGRAD_NUM_THREADS=" : "", env ? env : "",
              env ? ")" : "");
  std::fflush(stdout);
  const double bw = CopyBandwidth(NumThreads());
  std::printf("copy bandwidth: %.1f GB/s (memcpy of 256 MiB, bytes read + written, median)\n", bw * 1e-9);
  return 0;
}

}  // namespace moegrad::tool
