// `moegrad bench`: every operator on one model's MoE layer shape, timed as a user calls it (plan, then run
// with a preallocated workspace), verified against the scalar reference, and set against the copy
// bandwidth measured in the same run.
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "moegrad/plan.hpp"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/catalog.h"
#include "tools/moegrad/common/measure.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/op_names.h"
#include "tools/moegrad/report.h"

namespace moegrad::tool {
namespace {

// The dtypes of one row: the tokens' (every float tensor but the routing weights) and the weights' (scales,
// probs and their gradients).
struct Precision {
  DType tokens, weights;
};

// --dtype: one precision by its PrecisionName, or "all" (each, in this order).
bool ParsePrecisions(const std::string& s, std::vector<Precision>* out) {
  const Precision all[] = {{DType::kFloat32, DType::kFloat32},
                           {DType::kFloat16, DType::kFloat16},
                           {DType::kBFloat16, DType::kBFloat16},
                           {DType::kBFloat16, DType::kFloat32}};  // bf16 tokens, fp32 router probabilities
  for (const Precision& p : all) {
    if (strcasecmp(s.c_str(), "all") == 0 || strcasecmp(s.c_str(), PrecisionName(p.tokens, p.weights).c_str()) == 0) {
      out->push_back(p);
    }
  }
  return !out->empty();
}

// An upper bound of the bytes the benchmark holds at once on `s` with token elements (every float tensor of
// H columns) of `elem` bytes: the largest row's tensors and reference outputs (at most T + 3N rows of H,
// N = T*K + E pairs or drop-and-pad slots), the plain copy of its minimum bytes (at most T + 2N rows), the bias
// (E rows), the reference's fp32 accumulators (N rows), routing maps, probabilities and their gradients'
// accumulators (40 bytes per map entry), indices, workspace and routing temporaries (64 bytes per pair), the
// two buffers of `eviction` bytes of the paired copy and 64 MiB for the program itself. The routing weights
// (probabilities, scales and their gradients) are in the per-entry and per-pair terms at 4 bytes, whatever the
// tokens' dtype.
// False when that passes 2^64 (the factors are at most 2^63 and a preset's H, E and K, so 128 bits hold every
// product).
bool BenchBytes(const Shape& s, uint64_t elem, uint64_t eviction, uint64_t* bytes) {
  using U = unsigned __int128;
  const U T = static_cast<U>(s.tokens), H = static_cast<U>(s.hidden), E = static_cast<U>(s.experts);
  const U N = T * static_cast<U>(s.topk) + E;
  const U total = H * (elem * (2 * T + 5 * N + E) + 4 * N) + T * E * 40 + N * 64 + 2 * U{eviction} + (U{64} << 20);
  if (total > UINT64_MAX) return false;
  *bytes = static_cast<uint64_t>(total);
  return true;
}

// Plans, times and verifies one row; false (with `error`) when the library refuses the call.
bool MeasureRow(const BenchRow& row, const Shape& shape, const Precision& precision, InputValues values,
                uint64_t seed, const EvictionCopy& copy, bool sweep, BenchResult* r, std::string* error) {
  std::unique_ptr<Problem> p = row.make(shape, precision.tokens, precision.weights, seed, values);
  r->op = row.op;
  r->key = row.key;
  r->mode = row.mode;
  r->dtype = p->precision_name();
  r->shape = p->shape_name();
  r->bytes = p->MinBytes();

  Plan plan;
  Status status = p->Plan(&plan);
  if (!status.ok()) {
    *error = status.message();
    return false;
  }
  AlignedBuffer workspace(plan.workspace_size());
  r->workspace_bytes = workspace.size;
  double ratio = 0.0;
  // Both phases each time, as a training step calls the operator: the plan is part of the cost.
  const auto call = [&] {
    Plan timed;
    Status s = p->Plan(&timed);
    if (s.ok()) s = timed.Run(workspace.data, workspace.size);
    if (!s.ok() && status.ok()) status = s;
  };
  r->seconds = PairedWithCopy(
      call,
      static_cast<double>(r->bytes), copy.dst.data, copy.src.data, copy.bytes, NumThreads(), &ratio,
      &r->paired_copy_bytes_per_second);
  r->pct_copy = 100.0 * ratio;
  if (!status.ok()) {
    *error = status.message();
    return false;
  }

  // The same bytes moved by a plain parallel copy, timed the same way (warm, median): on machines whose
  // caches hold much of a problem this is the fairer yardstick than the large copy of the header.
  const uint64_t half = std::max<uint64_t>(r->bytes / 2, 64);
  AlignedBuffer src(half), dst(half);
  std::memset(src.data, 1, half);
  std::memset(dst.data, 0, half);
  r->copy_seconds = MedianSeconds([&] { ParallelCopy(dst.data, src.data, half, NumThreads()); }, 2, 5, 1000, 0.2);
  r->copy_bytes = 2 * half;
  if (sweep) {
    double ratio_unused = 0.0, bandwidth_unused = 0.0;
    r->cold_copy_seconds =
        PairedWithCopy([&] { ParallelCopy(dst.data, src.data, half, NumThreads()); }, 2.0 * static_cast<double>(half),
                       copy.dst.data, copy.src.data, copy.bytes, NumThreads(), &ratio_unused, &bandwidth_unused);
    r->warm_seconds = MedianSeconds(call, 2, 5, 1000, 0.2);
    if (!status.ok()) {
      *error = status.message();
      return false;
    }
  }

  p->RunReference();
  std::string mismatch;
  r->verified = CompareOutputs(*p, 0, &mismatch);
  if (!r->verified) *error = mismatch;
  return true;
}

}  // namespace

int RunBench(const BenchOptions& o) {
  const ModelPreset* preset = FindPreset(o.preset);
  if (preset == nullptr) {
    std::fprintf(stderr, "moegrad bench: unknown preset '%s' (see moegrad --help)\n", o.preset.c_str());
    return 2;
  }
  std::vector<Precision> precisions;
  if (!ParsePrecisions(o.dtype, &precisions)) {
    std::fprintf(stderr, "moegrad bench: --dtype must be f32, f16, bf16, bf16+f32 or all, not '%s'\n",
                 o.dtype.c_str());
    return 2;
  }
  std::vector<const BenchRow*> rows;
  for (const BenchRow& r : BenchRows()) {
    if (RowMatches(r, o.op)) rows.push_back(&r);
  }
  if (rows.empty()) {
    std::fprintf(stderr, "moegrad bench: unknown --op '%s'; one of: %s\n", o.op.c_str(), OpChoices().c_str());
    return 2;
  }
  // An operator without routing weights runs the token dtypes only (bf16+f32 would repeat its bf16 row).
  auto runs = [](const BenchRow& row, const Precision& p) { return row.weights || p.weights == p.tokens; };
  int total = 0;
  for (const BenchRow* row : rows) {
    for (const Precision& precision : precisions) total += runs(*row, precision) ? 1 : 0;
  }
  if (total == 0) {
    std::fprintf(stderr,
                 "moegrad bench: --op %s has no routing weights: run it with --dtype f32, f16, bf16 or all\n",
                 o.op.c_str());
    return 2;
  }

  InputValues values = InputValues::kNormal;
  if (!ParseInputValues(o.values.c_str(), &values)) {
    std::fprintf(stderr, "moegrad bench: --values must be tiny, normal or mixed, not '%s'\n", o.values.c_str());
    return 2;
  }
  const bool sweep = !o.sweep.empty();
  const std::vector<int64_t> sizes = sweep ? o.sweep : std::vector<int64_t>{o.tokens > 0 ? o.tokens : preset->default_tokens};

  // A size that cannot be allocated is refused before anything runs (not a std::bad_alloc, or the OOM killer,
  // after minutes of benchmark).
  uint64_t elem = 2;
  for (const Precision& p : precisions) elem = std::max<uint64_t>(elem, ElementSize(p.tokens));
  const uint64_t have = AvailableMemory();
  // The paired copy's buffers: by default twice the last-level cache, so that no call finds its data there, and
  // at most an eighth of the available memory each (EvictionBytes); --evict-mib as asked, when it fits.
  constexpr uint64_t kProgramBytes = uint64_t{64} << 20;
  uint64_t eviction = EvictionBytes(LastLevelCacheBytes(), have);
  if (o.evict_mib > 0) {
    eviction = static_cast<uint64_t>(o.evict_mib) << 20;
    if (2 * eviction + kProgramBytes > have) {
      std::fprintf(stderr, "moegrad: --evict-mib %lld needs %.1f GiB, have %.1f GiB\n",
                   static_cast<long long>(o.evict_mib), static_cast<double>(2 * eviction + kProgramBytes) / (1 << 30),
                   static_cast<double>(have) / (1 << 30));
      return 2;
    }
  }
  std::vector<BenchReport> reports(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    BenchReport& report = reports[k];
    report.preset = preset->name;
    report.values = InputValuesName(values);
    report.eviction_bytes = eviction;
    Shape& shape = report.shape;
    shape.tokens = sizes[k];
    shape.hidden = preset->hidden;
    shape.experts = preset->experts;
    shape.topk = preset->topk;
    uint64_t need = 0;
    const bool representable = BenchBytes(shape, elem, eviction, &need);
    if (!representable || need > have) {
      const std::string needed =
          representable ? Format("%.1f", static_cast<double>(need) / (1 << 30)) : "more than 17179869184";
      if (sweep || o.tokens > 0) {
        std::fprintf(stderr, "moegrad: %s %lld needs %s GiB, have %.1f GiB\n", sweep ? "--sweep tokens" : "--tokens",
                     static_cast<long long>(shape.tokens), needed.c_str(), static_cast<double>(have) / (1 << 30));
        return 2;
      }
      std::fprintf(stderr, "moegrad: bench --preset %s needs %s GiB, have %.1f GiB\n", preset->name,
                   needed.c_str(), static_cast<double>(have) / (1 << 30));
      return 1;
    }
    shape.capacity = DefaultCapacity(shape.tokens, shape.experts, shape.topk);
  }

  // Opened (and truncated) now, so that a path that cannot be written fails before the run, not after it.
  std::unique_ptr<FILE, int (*)(FILE*)> json(nullptr, std::fclose);
  if (!o.json.empty()) {
    json.reset(std::fopen(o.json.c_str(), "w"));
    if (json == nullptr) {
      std::fprintf(stderr, "moegrad: --json %s: %s\n", o.json.c_str(), std::strerror(errno));
      return 2;
    }
  }
  std::unique_ptr<FILE, int (*)(FILE*)> plot(nullptr, std::fclose);
  if (!o.plot.empty()) {
    plot.reset(std::fopen(o.plot.c_str(), "w"));
    if (plot == nullptr) {
      std::fprintf(stderr, "moegrad: --plot %s: %s\n", o.plot.c_str(), std::strerror(errno));
      return 2;
    }
  }

  const int threads = NumThreads();
  std::fprintf(stderr, "moegrad bench: measuring copy bandwidth with %d threads\n", threads);
  const CopyWalkChoice walk = ChooseCopyWalk(threads, eviction);
  const double copy_bytes_per_second = walk.chosen_bytes_per_second();

  const EvictionCopy copy(eviction);
  int index = 0;
  bool all_ok = true;
  for (BenchReport& report : reports) {
    report.threads = threads;
    report.copy_bytes_per_second = copy_bytes_per_second;
    report.copy_walk = CopyWalkName(walk.walk);
    int row_index = 0;
    for (const BenchRow* row : rows) {
      for (const Precision& precision : precisions) {
        if (!runs(*row, precision)) continue;
        ++index;
        ++row_index;
        const std::string name = PrecisionName(precision.tokens, precision.weights);
        std::fprintf(stderr, "moegrad bench: [%d/%d] %s %s %s%s\n", index, total * static_cast<int>(reports.size()),
                     row->op, row->mode, name.c_str(),
                     sweep ? Format(" T=%lld", static_cast<long long>(report.shape.tokens)).c_str() : "");
        BenchResult r;
        std::string error;
        // The seed of a row is the same at every size (and the same as without --sweep).
        const bool ran = MeasureRow(*row, report.shape, precision, values, 1000 + static_cast<uint64_t>(row_index),
                                    copy, sweep, &r, &error);
        if (!ran) {
          std::fprintf(stderr, "moegrad bench: %s %s %s failed: %s\n", row->op, row->mode, name.c_str(),
                       error.c_str());
          r.verified = false;
          r.error = error;
        } else if (!r.verified) {
          std::fprintf(stderr, "moegrad bench: %s %s %s does not match the reference: %s\n", row->op, row->mode,
                       name.c_str(), error.c_str());
        }
        all_ok = all_ok && r.verified;
        report.rows.push_back(r);
      }
    }
  }

  if (sweep) {
    PrintSweepTable(reports, stdout);
  } else {
    PrintBenchTable(reports[0], stdout);
  }
  if (plot != nullptr) {
    const bool written = WriteSweepSvg(reports, plot.get());
    if (std::fclose(plot.release()) != 0 || !written) {
      std::fprintf(stderr, "moegrad bench: cannot write %s: %s\n", o.plot.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (json != nullptr) {
    const bool written = sweep ? WriteSweepJson(reports, json.get()) : WriteBenchJson(reports[0], json.get());
    if (std::fclose(json.release()) != 0 || !written) {
      std::fprintf(stderr, "moegrad bench: cannot write %s: %s\n", o.json.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (!all_ok) std::fprintf(stderr, "moegrad bench: some results do not match the reference\n");
  return all_ok ? 0 : 1;
}

}  // namespace moegrad::tool
