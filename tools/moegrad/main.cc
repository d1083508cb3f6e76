// moegrad: benchmarks (`bench`, the default), a randomized self-test against the reference (`check`) and
// a description of the machine as moegrad sees it (`info`).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "moegrad/plan.hpp"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/op_names.h"

namespace moegrad::tool {
namespace {

void PrintUsage(FILE* f) {
  std::fprintf(f,
               "usage: moegrad [bench|check|info] [options]\n"
               "\n"
               "  bench   time every operator on a model's MoE layer shape, verify each result against the\n"
               "          scalar reference and compare with the machine's copy bandwidth (the default)\n"
               "    --preset NAME         model shape (default %s); one of:\n",
               DefaultPresetName());
  for (const ModelPreset& p : ModelPresets()) {
    std::fprintf(f, "                            %-16s H %-5lld E %-4lld K %-2lld default tokens %lld\n", p.name,
                 static_cast<long long>(p.hidden), static_cast<long long>(p.experts),
                 static_cast<long long>(p.topk), static_cast<long long>(p.default_tokens));
  }
  std::fprintf(f,
               "    --tokens N            tokens T (batch x sequence) instead of the preset's default\n"
               "    --dtype f32|f16|bf16|all   float dtype (default all)\n"
               "    --op NAME|all         one operator, by name or CANN name (case-insensitive):\n");
  for (const OpName& op : OpNames()) std::fprintf(f, "                            %-36s %s\n", op.key, op.name);
  std::fprintf(f, "                          older spellings, still accepted:");
  for (const OpAlias& a : OpAliases()) std::fprintf(f, " %s", a.alias);
  std::fprintf(f,
               "\n"
               "    --json FILE           also write the rows as JSON\n"
               "          drop-and-pad rows use capacity C = ceil(T*K/E) (capacity factor 1.0)\n"
               "  check   randomized differential test of every operator, mode, dtype, optional input and\n"
               "          layout against the reference, including invalid-index cases; exit 0 only if all pass\n"
               "    --seconds S           how long to run (default 10)\n"
               "    --seed N              replay a run (default: from the clock)\n"
               "    --op NAME|all         test one operator only (names as for bench)\n"
               "  info    version, SIMD target, threads and measured copy bandwidth\n"
               "\n"
               "  --threads N             worker threads (default: MOEGRAD_NUM_THREADS, else every CPU)\n"
               "  --help                  this text\n");
}

bool ParseInt(const char* s, int64_t lo, int64_t* out) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < lo) return false;
  *out = v;
  return true;
}

int Main(int argc, char** argv) {
  std::string command;
  BenchOptions bench;
  bench.preset = DefaultPresetName();
  CheckOptions check;
  int64_t threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char** out) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "moegrad: %s needs a value\n", arg.c_str());
        return false;
      }
      *out = argv[++i];
      return true;
    };
    const char* v = nullptr;
    bool ok = true;
    if (arg == "--help" || arg == "-h" || arg == "help") {
      PrintUsage(stdout);
      return 0;
    } else if (arg == "--version") {
      std::printf("moegrad %s\n", Version());
      return 0;
    } else if (arg == "bench" || arg == "check" || arg == "info") {
      if (!command.empty()) {
        std::fprintf(stderr, "moegrad: more than one command (%s, %s)\n", command.c_str(), arg.c_str());
        return 2;
      }
      command = arg;
    } else if (arg == "--threads") {
      ok = value(&v) && ParseInt(v, 1, &threads);
    } else if (arg == "--preset") {
      ok = value(&v);
      if (ok) bench.preset = v;
    } else if (arg == "--tokens") {
      ok = value(&v) && ParseInt(v, 0, &bench.tokens);
    } else if (arg == "--dtype") {
      ok = value(&v);
      if (ok) bench.dtype = v;
    } else if (arg == "--op") {
      ok = value(&v);
      if (ok) bench.op = check.op = v;
    } else if (arg == "--json") {
      ok = value(&v);
      if (ok) bench.json = v;
    } else if (arg == "--seconds") {
      ok = value(&v);
      if (ok) {
        char* end = nullptr;
        check.seconds = std::strtod(v, &end);
        ok = end != v && *end == '\0' && check.seconds >= 0;
      }
    } else if (arg == "--seed") {
      int64_t seed = 0;
      ok = value(&v) && ParseInt(v, 0, &seed);
      check.seed = static_cast<uint64_t>(seed);
    } else {
      std::fprintf(stderr, "moegrad: unknown argument '%s' (see moegrad --help)\n", arg.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "moegrad: bad value for %s%s%s\n", arg.c_str(), v ? ": " : "", v ? v : "");
      return 2;
    }
  }
  if (threads > 0) SetNumThreads(static_cast<int>(threads));

  if (command == "check") return RunCheck(check);
  if (command == "info") return RunInfo();
  return RunBench(bench);
}

}  // namespace
}  // namespace moegrad::tool

int main(int argc, char** argv) { return moegrad::tool::Main(argc, argv); }
