// The subcommands of the `moegrad` command-line tool; main.cc parses the arguments into these options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moegrad::tool {

struct BenchOptions {
  std::string preset;       // a ModelPresets() name
  int64_t tokens = 0;       // 0: the preset's default
  std::string dtype = "all";
  std::string op = "all";
  std::string json;         // write the rows here when not empty
  std::string values = "normal";  // tiny, normal or mixed: the magnitudes of the float inputs
  std::vector<int64_t> sweep;     // --sweep tokens=...: one run per size (empty: one run at `tokens`)
  std::string plot;               // --plot FILE.svg: the sweep's GB/s against tokens (needs a sweep)
  int64_t evict_mib = 0;          // --evict-mib: each buffer of the paired copy (0: twice the last-level cache)
};
int RunBench(const BenchOptions& options);

struct CheckOptions {
  double seconds = 10.0;    // 0: one round of cases
  uint64_t seed = 0;        // 0: from the clock (printed, so that a failure can be replayed)
  std::string op = "all";
};
int RunCheck(const CheckOptions& options);

struct InfoOptions {
  int threads = 0;          // --threads, 0 when not given
};
int RunInfo(const InfoOptions& options);

}  // namespace moegrad::tool
