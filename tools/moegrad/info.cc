// `moegrad info`: what moegrad sees of this machine.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "moegrad/plan.hpp"
#include "src/testing/thread_count.h"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/measure.h"

namespace moegrad::tool {

int RunInfo(const InfoOptions& o) {
  std::printf("moegrad %s\n", Version());
  std::printf("SIMD target:    %s\n", SimdTarget());
  // Where the count comes from; a MOEGRAD_NUM_THREADS the library ignored (it said so on stderr) is named.
  const char* env = std::getenv("MOEGRAD_NUM_THREADS");
  int env_threads = 0;
  std::string source;
  if (o.threads > 0) {
    source = "--threads";
  } else if (env != nullptr && core::ParseThreadCount(env, &env_threads)) {
    source = std::string("MOEGRAD_NUM_THREADS=") + env;
  } else if (env != nullptr) {
    source = std::string("every CPU; MOEGRAD_NUM_THREADS=") + env + " ignored";
  } else {
    source = "every CPU";
  }
  std::printf("threads:        %d (%s)\n", NumThreads(), source.c_str());
  std::fflush(stdout);
  const uint64_t llc = LastLevelCacheBytes();
  const uint64_t eviction = EvictionBytes(llc, AvailableMemory());
  std::printf("cache:          %llu MiB last level, as reported (bench copies %llu MiB before each timed call)\n",
              static_cast<unsigned long long>(llc >> 20), static_cast<unsigned long long>(eviction >> 20));
  std::fflush(stdout);
  const CopyWalkChoice walk = ChooseCopyWalk(NumThreads(), eviction);
  std::printf("copy walk:      %s (four pages in step %.1f GB/s, page after page %.1f GB/s, the faster)\n",
              CopyWalkName(walk.walk), walk.in_step_bytes_per_second * 1e-9, walk.in_order_bytes_per_second * 1e-9);
  std::fflush(stdout);
  const CopyReadWrite bw = CopyReadWriteBandwidth(NumThreads(), eviction);
  std::printf("copy bandwidth: %.1f GB/s (copy of %llu MiB, streaming stores, %s, bytes read + written, median)\n",
              bw.copy_bytes_per_second * 1e-9, static_cast<unsigned long long>(eviction >> 20),
              CopyWalkName(walk.walk));
  std::printf("read bandwidth: %.1f GB/s (read of the copy's %llu MiB alone, %s, the faster walk, bytes read, "
              "median), %.0f%% of the copy's\n",
              bw.read_bytes_per_second * 1e-9, static_cast<unsigned long long>(eviction >> 20),
              CopyWalkName(bw.read_walk), 100.0 * bw.read_over_copy);
  std::printf("write bandwidth: %.1f GB/s (streaming stores alone over the copy's %llu MiB, in order, bytes "
              "written, median), %.0f%% of the copy's\n",
              bw.write_bytes_per_second * 1e-9, static_cast<unsigned long long>(eviction >> 20),
              100.0 * bw.write_over_copy);
  return 0;
}

}  // namespace moegrad::tool
