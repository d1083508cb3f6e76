// Google Benchmark suite: each operator/mode/dtype of the shared benchmark rows on each model preset at
// decode-like token counts (1, 16, 128) and the preset's default count, timed as `moegrad bench` times it
// (plan + run with a preallocated workspace), with bytes_per_second from the minimum bytes the operator
// must move. BM_Copy is the yardstick: a parallel copy (ParallelCopy, streaming stores from 4 MiB; bytes read
// + written) with the same threads.
//
//   moegrad_bench --benchmark_filter='finalize-routing-v2-grad/.*/bf16/deepseek-v3'
//
// The bf16 rows at a preset's default tokens also run with tiny inputs (name suffix /values:tiny; compare with
// the same name without it): a kernel whose speed depended on the values would show there.
//
// The cold/... rows take a cold one-token bf16 call apart (RunCold): each iteration evicts the caches with a
// copy of twice the last-level cache, then times the call (/call), the call after a small call of the same row
// (/call:code-warm: the library's code and state warm, the call's data cold), or a copy of the call's bytes
// (/copy); plan_us is phase one of the timed call.
//
//   moegrad_bench --benchmark_filter='^cold/.*/deepseek-v3/' --benchmark_repetitions=3
//
// The bias-table/... rows time the two rows with a bias table cold at 1024 tokens, their bias rows drawn from
// all E rows of the table or from K of them (BiasTableRow): the cost of bias rows read from the last-level
// cache rather than from L2.
//
//   moegrad_bench --benchmark_filter='^bias-table/.*/deepseek-v3/' --benchmark_repetitions=3
//
// Threads: MOEGRAD_NUM_THREADS (default every CPU).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "moegrad/plan.hpp"
#include "tools/moegrad/common/catalog.h"
#include "tools/moegrad/common/measure.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/problems.h"

namespace moegrad::tool {
namespace {

// Google Benchmark calls a benchmark function several times while it settles the iteration count; the
// problem (large for the model presets) is built once and kept only until another benchmark runs.
struct Cached {
  std::string name;
  std::unique_ptr<Problem> problem;
  uint64_t workspace_size = 0;
  std::unique_ptr<AlignedBuffer> workspace;
};

// A row's dtypes: the tokens' and the routing weights'.
struct Precision {
  DType tokens, weights;
};

Cached& CachedProblem(const std::string& name, const BenchRow& row, const Shape& shape, Precision precision,
                      InputValues values, std::string* error) {
  static Cached cache;
  if (cache.name != name) {
    cache = Cached();
    cache.problem = row.make(shape, precision.tokens, precision.weights, 7, values);
    moegrad::Plan plan;
    const Status s = cache.problem->Plan(&plan);
    if (!s.ok()) *error = s.message();
    cache.workspace_size = plan.workspace_size();
    cache.workspace = std::make_unique<AlignedBuffer>(cache.workspace_size);
    cache.name = s.ok() ? name : "";
  }
  return cache;
}

// One call as a training step makes it: phase one, then phase two with the given workspace.
Status PlanAndRun(const Problem& problem, void* workspace, uint64_t workspace_size) {
  moegrad::Plan plan;
  Status s = problem.Plan(&plan);
  if (s.ok()) s = plan.Run(workspace, workspace_size);
  return s;
}

// The row's least bytes per call, as bytes_per_second and as counters with the thread count.
void SetByteCounters(benchmark::State& state, uint64_t min_bytes, int threads) {
  const double bytes = static_cast<double>(min_bytes);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["bytes"] = bytes;
  state.counters["threads"] = threads;
}

// A preset's layer at `tokens` tokens (H the preset's unless `hidden` > 0), drop-and-pad capacity as
// `moegrad bench` sets it.
Shape PresetShape(const ModelPreset& preset, int64_t tokens, int64_t hidden = 0) {
  Shape shape;
  shape.tokens = tokens;
  shape.hidden = hidden > 0 ? hidden : preset.hidden;
  shape.experts = preset.experts;
  shape.topk = preset.topk;
  shape.capacity = DefaultCapacity(tokens, preset.experts, preset.topk);
  return shape;
}

void RunOperator(benchmark::State& state, const std::string& name, const BenchRow& row, Shape shape,
                 Precision precision, InputValues values = InputValues::kNormal) {
  std::string error;
  Cached& c = CachedProblem(name, row, shape, precision, values, &error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  for (auto _ : state) {
    const Status s = PlanAndRun(*c.problem, c.workspace->data, c.workspace_size);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      break;
    }
  }
  SetByteCounters(state, c.problem->MinBytes(), NumThreads());
}

void BM_Copy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  AlignedBuffer src(bytes), dst(bytes);
  const int threads = NumThreads();
  ParallelCopy(dst.data, src.data, bytes, threads);  // first touch
  for (auto _ : state) {
    ParallelCopy(dst.data, src.data, bytes, threads);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * state.iterations());  // read + write
  state.counters["bytes"] = static_cast<double>(2 * bytes);
  state.counters["threads"] = threads;
}

// What a cold call spends its time on. Each iteration first evicts the caches with a parallel copy of twice the
// last-level cache, at least 256 MiB (EvictionCopy; not timed), as `moegrad bench` does before every timed
// call, then times one of:
//   kCall          the call (both phases), everything it touches cold: its rows, its index data, and the
//                  library's own code and state;
//   kCallCodeWarm  the call, after a call of the same row on its 1-token, H = 16 problem (other tensors, no
//                  bytes to speak of) between the eviction and the timed call: the code, the thread team and
//                  the allocator are warm again, the call's own data is still cold;
//   kCopy          a copy of the call's least bytes (half read, half written): the bytes' own time, cold.
// The counter plan_us is phase one (the argument checks and the workspace size) alone, per timed call.
enum class ColdTimed { kCall, kCallCodeWarm, kCopy };
// A fixed count: Google Benchmark's minimum time would count only the timed microseconds, not the evictions.
constexpr int kColdIterations = 25;

void RunCold(benchmark::State& state, const std::string& name, const BenchRow& row, const Shape& shape,
             Precision precision, ColdTimed timed) {
  using Clock = std::chrono::steady_clock;
  static EvictionCopy evict;
  std::string error;
  Cached& c = CachedProblem(name, row, shape, precision, InputValues::kNormal, &error);
  Shape small_shape = shape;
  small_shape.hidden = 16;
  const std::unique_ptr<Problem> small =
      row.make(small_shape, precision.tokens, precision.weights, 8, InputValues::kNormal);
  moegrad::Plan small_plan;
  if (error.empty()) {
    const Status s = small->Plan(&small_plan);
    if (!s.ok()) error = s.message();
  }
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  AlignedBuffer small_workspace(small_plan.workspace_size());
  const size_t half = std::max<size_t>(c.problem->MinBytes() / 2, 64);
  AlignedBuffer copy_src(half), copy_dst(half);
  std::memset(copy_src.data, 1, half);
  std::memset(copy_dst.data, 0, half);
  const int threads = NumThreads();
  double plan_seconds = 0.0;
  for (auto _ : state) {
    ParallelCopy(evict.dst.data, evict.src.data, evict.bytes, threads);
    Status s;
    if (timed == ColdTimed::kCallCodeWarm) s = PlanAndRun(*small, small_workspace.data, small_workspace.size);
    const auto t0 = Clock::now();
    if (timed == ColdTimed::kCopy) {
      ParallelCopy(copy_dst.data, copy_src.data, half, threads);
    } else if (s.ok()) {
      moegrad::Plan plan;
      s = c.problem->Plan(&plan);
      plan_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      if (s.ok()) s = plan.Run(c.workspace->data, c.workspace_size);
    }
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      break;
    }
  }
  SetByteCounters(state, c.problem->MinBytes(), threads);
  if (timed != ColdTimed::kCopy) {
    state.counters["plan_us"] = benchmark::Counter(1e6 * plan_seconds, benchmark::Counter::kAvgIterations);
  }
}

// The two rows that read a bias table (E rows of H, one row per pair), dropless with scales and bias as in
// BenchRows(), on the preset's routing, but with each pair's expert for the bias drawn at random from the first
// `bias_experts` rows of the table (RedrawExperts), apart from the routing: the expandedX rows are read in the
// same order whatever the bias rows are, and only how many distinct bias rows the call reads changes.
BenchRow BiasTableRow(bool forward, int64_t bias_experts) {
  auto make = [=](const Shape& shape, DType dtype, DType weight_dtype, uint64_t seed, InputValues values) {
    auto fill = [&](auto c) {
      c.shape = shape;
      c.dtype = dtype;
      c.weight_dtype = weight_dtype;
      c.seed = seed;
      c.values = values;
      c.scales = c.bias = true;
      c.bias_experts = bias_experts;
      return c;
    };
    if (!forward) {
      FinalizeRoutingV2GradConfig c = fill(FinalizeRoutingV2GradConfig());
      c.mode = 0;
      return MakeProblem(c);
    }
    FinalizeRoutingV2Config c = fill(FinalizeRoutingV2Config());
    c.mode = 2;
    return MakeProblem(c);
  };
  return forward ? BenchRow{"MoeFinalizeRoutingV2", "finalize-routing-v2", "mode2 dropless scales+bias", true, make}
                 : BenchRow{"MoeFinalizeRoutingV2Grad", "finalize-routing-v2-grad", "dropless scales+bias", true,
                            make};
}

std::string Sanitize(std::string s) {
  for (char& ch : s) {
    if (ch == ' ') ch = '_';
  }
  return s;
}

void RegisterAll() {
  benchmark::RegisterBenchmark("BM_Copy", BM_Copy)->Arg(int64_t{256} << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
  // As `moegrad bench --dtype all`: f32, f16, bf16, and bf16 tokens with fp32 routing weights (bf16+f32).
  const Precision precisions[] = {{DType::kFloat32, DType::kFloat32},
                                  {DType::kFloat16, DType::kFloat16},
                                  {DType::kBFloat16, DType::kBFloat16},
                                  {DType::kBFloat16, DType::kFloat32}};
  for (const ModelPreset& preset : ModelPresets()) {
    for (int64_t tokens : {int64_t{1}, int64_t{16}, int64_t{128}, preset.default_tokens}) {
      if (tokens == preset.default_tokens && tokens <= 128) continue;  // registered already
      const Shape shape = PresetShape(preset, tokens);
      for (const BenchRow& row : BenchRows()) {
        for (const Precision& precision : precisions) {
          if (!row.weights && precision.weights != precision.tokens) continue;  // no routing weights: bf16 again
          const std::string name = Sanitize(std::string(row.key) + "/" + row.mode + "/" +
                                            PrecisionName(precision.tokens, precision.weights) + "/" + preset.name +
                                            "/T:" + std::to_string(tokens));
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
            RunOperator(st, name, row, shape, precision);
          })->UseRealTime()->Unit(tokens >= 128 ? benchmark::kMillisecond : benchmark::kMicrosecond);
        }
      }
    }
    // Value-independent speed: bf16 at the preset's default tokens with tiny inputs (products underflow fp32,
    // as tiny gradients do; `moegrad bench --values tiny`), next to the rows above with normal values.
    {
      const Shape shape = PresetShape(preset, preset.default_tokens);
      const Precision bf16{DType::kBFloat16, DType::kBFloat16};
      for (const BenchRow& row : BenchRows()) {
        const std::string name = Sanitize(std::string(row.key) + "/" + row.mode + "/bf16/" + preset.name +
                                          "/T:" + std::to_string(shape.tokens) + "/values:tiny");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          RunOperator(st, name, row, shape, bf16, InputValues::kTiny);
        })->UseRealTime()->Unit(benchmark::kMillisecond);
      }
    }
    // A cold one-token call taken apart (RunCold): the call, the call with its code warm, a copy of its bytes.
    {
      const Shape shape = PresetShape(preset, 1);
      const Precision bf16{DType::kBFloat16, DType::kBFloat16};
      for (const BenchRow& row : BenchRows()) {
        const std::string base = Sanitize(std::string("cold/") + row.key + "/" + row.mode + "/bf16/" + preset.name +
                                          "/T:1/");
        const std::pair<const char*, ColdTimed> variants[] = {
            {"call", ColdTimed::kCall}, {"call:code-warm", ColdTimed::kCallCodeWarm}, {"copy", ColdTimed::kCopy}};
        for (const auto& [suffix, timed] : variants) {
          // One cached problem per row: the three variants share it (the name without the variant).
          benchmark::RegisterBenchmark((base + suffix).c_str(), [=, timed = timed](benchmark::State& st) {
            RunCold(st, base, row, shape, bf16, timed);
          })->UseManualTime()->Iterations(kColdIterations)->Unit(benchmark::kMicrosecond);
        }
      }
    }
    // What a bias table in the last-level cache costs (BiasTableRow): cold, at 1024 tokens, the bias rows
    // drawn from all E rows of the table or from its first K, which stay in L2 while the call's other rows
    // stream past.
    for (const bool forward : {false, true}) {
      for (const int64_t bias_experts : {preset.experts, preset.topk}) {
        const BenchRow row = BiasTableRow(forward, bias_experts);
        const std::string name = Sanitize(std::string("bias-table/") + row.key + "/" + row.mode + "/bf16/" +
                                          preset.name + "/T:1024/bias-rows:" + std::to_string(bias_experts));
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          RunCold(st, name, row, PresetShape(preset, 1024), Precision{DType::kBFloat16, DType::kBFloat16},
                  ColdTimed::kCall);
        })->UseManualTime()->Iterations(kColdIterations)->Unit(benchmark::kMillisecond);
      }
    }
    // The fixed cost of a call: the preset's routing (E, K, C) at 16 and at 1024 tokens with H = 16, so that
    // the rows move almost no bytes and what remains is the plan, the index passes and the thread fork/join.
    for (int64_t tokens : {16, 1024}) {
      const Shape tiny = PresetShape(preset, tokens, /*hidden=*/16);
      for (const BenchRow& row : BenchRows()) {
        const std::string name = Sanitize(std::string("overhead/") + row.key + "/" + row.mode + "/f32/" +
                                          preset.name + "/T:" + std::to_string(tokens) + "/H:16");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          RunOperator(st, name, row, tiny, Precision{DType::kFloat32, DType::kFloat32});
        })->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace moegrad::tool

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  moegrad::tool::RegisterAll();
  // The yardstick copy (BM_Copy and the copies of the cold rows) takes the machine's faster walk.
  moegrad::tool::ChooseCopyWalk(moegrad::NumThreads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
