// `moegrad bench` results: the table on stdout and the --json file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/moegrad/common/problem.h"

namespace moegrad::tool {

struct BenchResult {
  std::string op, key, mode, dtype, shape;  // dtype: PrecisionName, e.g. "bf16" or "bf16+f32"
  uint64_t bytes = 0;            // minimum bytes read + written (Problem::MinBytes)
  uint64_t workspace_bytes = 0;
  double seconds = 0.0;          // median of plan + run
  uint64_t copy_bytes = 0;       // a parallel copy moving about `bytes` (read + write) ...
  double copy_seconds = 0.0;     // ... and its median time
  // --sweep only: that copy timed right after each paired copy (cold, as the call is timed), median: what
  // moving the row's bytes costs from memory at its size, latencies included.
  double cold_copy_seconds = 0.0;
  // --sweep only: plan + run called back to back with no copy between (the caches hold what the previous call
  // touched, as in a decode loop whose layers hand over small activations), median; its overhead is measured
  // against the warm copy above.
  double warm_seconds = 0.0;
  // Each timed call follows a parallel copy of BenchReport::eviction_bytes: the median over those pairs of (the call's GB/s / the
  // copy's GB/s), in percent, and the median copy bandwidth of the pairs. Noise on a shared machine that
  // lasts a while then slows both sides of a pair alike instead of skewing the ratio.
  double pct_copy = 0.0;
  double paired_copy_bytes_per_second = 0.0;
  bool verified = false;
  std::string error;             // why the call failed, when it did
};

struct BenchReport {
  std::string preset;
  std::string values = "normal";  // InputValuesName of the float inputs' magnitudes
  Shape shape;
  int threads = 0;
  double copy_bytes_per_second = 0.0;
  std::string copy_walk = "four pages in step";  // CopyWalkName of the copy's walk (ChooseCopyWalk)
  uint64_t eviction_bytes = 0;  // each buffer of the copy paired with every timed call
  std::vector<BenchResult> rows;
};

void PrintBenchTable(const BenchReport& report, FILE* out);
// Writes the report to `f` (opened by the caller before the run, so that a bad path fails fast); false on a
// write error.
bool WriteBenchJson(const BenchReport& report, FILE* f);

// A --sweep: one report per token count, the same rows in the same order in each.
// Per row a table over the sizes: median, GB/s, % of copy (paired and same-size), the bytes' own time (the
// operator's least bytes at the paired copy rate) and the per-call overhead beyond it.
void PrintSweepTable(const std::vector<BenchReport>& reports, FILE* out);
bool WriteSweepJson(const std::vector<BenchReport>& reports, FILE* f);
// GB/s against tokens (log axis), one line per row, the paired copy rate as a dashed line: a standalone SVG.
bool WriteSweepSvg(const std::vector<BenchReport>& reports, FILE* f);

// "12.3 us", "4.56 ms", "1.23 s".
std::string FormatSeconds(double s);

}  // namespace moegrad::tool
