// moegrad: benchmarks (`bench`, the default), a randomized self-test against the reference (`check`) and
// a description of the machine as moegrad sees it (`info`).
#include <strings.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "moegrad/plan.hpp"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/model_presets.h"
#include "tools/moegrad/common/op_names.h"

namespace moegrad::tool {
namespace {

constexpr int kMaxSweepSizes = 32;  // token counts of one --sweep
constexpr int64_t kMaxEvictMib = 65536;  // --evict-mib: 64 GiB per buffer (the memory check refuses what does not fit)

void PrintUsage(FILE* f) {
  std::fprintf(f,
               "usage: moegrad [bench|check|info] [options]\n"
               "\n"
               "One command (bench when none is given), before or after its options; each option below belongs\n"
               "to the command it is listed under and is an error with any other. A bad value, a missing one or\n"
               "a misplaced option exits with status 2 before anything runs.\n"
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
               "    --tokens N            tokens T (batch x sequence, N >= 1) instead of the preset's default;\n"
               "                          a T whose tensors do not fit in the available memory is refused\n"
               "    --dtype f32|f16|bf16|bf16+f32|all\n"
               "                          float dtypes (default all): bf16+f32 = bf16 tokens with fp32 routing\n"
               "                          weights (scales, probabilities and their gradients); an operator\n"
               "                          without routing weights runs f32, f16 and bf16 only\n"
               "    --op NAME|all         one operator, by name or CANN name (case-insensitive):\n");
  for (const OpName& op : OpNames()) std::fprintf(f, "                            %-36s %s\n", op.key, op.name);
  std::fprintf(f, "                          older spellings, still accepted:");
  for (const OpAlias& a : OpAliases()) std::fprintf(f, " %s", a.alias);
  std::fprintf(f,
               "\n"
               "    --json FILE           also write the rows as JSON (FILE is opened before the run)\n"
               "    --values tiny|normal|mixed\n"
               "                          magnitudes of the float inputs (default normal: |v| < 1); tiny: scaled\n"
               "                          by 2^-70 (f16: 2^-14, its subnormals), so that products underflow fp32\n"
               "                          as tiny gradients do; mixed: each element normal or tiny at random\n"
               "    --sweep tokens=N,N,...\n"
               "                          one run per token count (each N >= 1, at most %d, instead of --tokens):\n"
               "                          a table per row of median, GB/s, %% of copy and per-call overhead by size\n"
               "    --plot FILE.svg       with --sweep: draw GB/s against tokens, one line per row and the copy\n"
               "                          rate as a dashed line (an SVG file, opened before the run)\n"
               "    --evict-mib N         MiB in each buffer of the copy made before every timed call, 1..%lld\n"
               "                          (default: twice the last-level cache, at most an eighth of the\n"
               "                          available memory, at least 256, at most 4096)\n"
               "          drop-and-pad rows use capacity C = ceil(T*K/E) (capacity factor 1.0)\n"
               "  check   randomized differential test of every operator, mode, dtype, optional input and\n"
               "          layout against the reference, including invalid-index cases; exit 0 only if all pass\n"
               "    --seconds S           how long to run, 0..1000000 (default 10; 0: one round)\n"
               "    --seed N              replay a run, 0..2^64-1 (default and 0: from the clock)\n"
               "    --op NAME|all         test one operator only (names as for bench)\n"
               "  info    version, SIMD target, threads and measured copy bandwidth\n"
               "\n"
               "  --threads N             worker threads, 1..%d (every command; default: MOEGRAD_NUM_THREADS,\n"
               "                          else every CPU)\n"
               "  --help                  this text\n"
               "  --version               the version\n",
               kMaxSweepSizes, static_cast<long long>(kMaxEvictMib), kMaxThreads);
}

// The subcommands each option belongs to (as --help lists them).
enum Commands : unsigned { kBench = 1, kCheck = 2, kInfo = 4, kEvery = kBench | kCheck | kInfo };

struct OptionSpec {
  const char* name;
  unsigned commands;
};
constexpr OptionSpec kOptions[] = {
    {"--preset", kBench}, {"--tokens", kBench}, {"--dtype", kBench}, {"--json", kBench},
    {"--values", kBench}, {"--sweep", kBench}, {"--plot", kBench}, {"--evict-mib", kBench},
    {"--op", kBench | kCheck}, {"--seconds", kCheck}, {"--seed", kCheck}, {"--threads", kEvery},
};

unsigned CommandBit(const std::string& command) {
  return command == "check" ? kCheck : command == "info" ? kInfo : kBench;
}

// A decimal integer in [lo, hi]: an optional '-' and digits, nothing else, and no overflow (strtoll would
// saturate a value past INT64_MAX).
bool ParseInt(const char* s, int64_t lo, int64_t hi, int64_t* out) {
  const char* digits = *s == '-' ? s + 1 : s;
  if (*digits < '0' || *digits > '9') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (errno == ERANGE || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Digits only, up to UINT64_MAX (strtoull alone would also take "-1" as UINT64_MAX).
bool ParseUint64(const char* s, uint64_t* out) {
  if (*s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  *out = v;
  return true;
}

// A finite decimal number in [lo, hi] (strtod also reads "nan", "inf" and hex floats: all refused).
bool ParseNumber(const char* s, double lo, double hi, double* out) {
  if (!((*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '+') || std::strpbrk(s, "xX")) return false;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) return false;
  *out = v + 0.0;  // -0 is 0
  return true;
}

constexpr double kMaxSeconds = 1e6;  // about 11 days

// "tokens=N,N,...": 1..kMaxSweepSizes distinct token counts, each an integer >= 1, kept in the given order.
bool ParseSweep(const char* s, std::vector<int64_t>* out) {
  static constexpr char kPrefix[] = "tokens=";
  if (std::strncmp(s, kPrefix, sizeof(kPrefix) - 1) != 0) return false;
  std::string rest = s + sizeof(kPrefix) - 1;
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t comma = rest.find(',', start);
    const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t n = 0;
    if (!ParseInt(item.c_str(), 1, INT64_MAX, &n) || item[0] == '-') return false;
    for (int64_t m : sizes) {
      if (m == n) return false;
    }
    sizes.push_back(n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (sizes.empty() || sizes.size() > kMaxSweepSizes) return false;
  *out = sizes;
  return true;
}

bool EndsWith(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() > n && strcasecmp(s.c_str() + s.size() - n, tail) == 0;
}

int Main(int argc, char** argv) {
  std::string command;
  BenchOptions bench;
  bench.preset = DefaultPresetName();
  CheckOptions check;
  InfoOptions info;
  int64_t threads = 0;
  std::vector<const OptionSpec*> given;  // every option on the command line, for the check of its command
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      PrintUsage(stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("moegrad %s\n", Version());
      return 0;
    }
    if (arg == "bench" || arg == "check" || arg == "info") {
      if (!command.empty()) {
        std::fprintf(stderr, "moegrad: more than one command (%s, %s)\n", command.c_str(), arg.c_str());
        return 2;
      }
      command = arg;
      continue;
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& o : kOptions) {
      if (arg == o.name) spec = &o;
    }
    if (spec == nullptr) {
      std::fprintf(stderr, "moegrad: unknown argument '%s' (see moegrad --help)\n", arg.c_str());
      return 2;
    }
    // Every option takes a value; another option in its place means the value is missing.
    if (i + 1 >= argc || std::strncmp(argv[i + 1], "--", 2) == 0) {
      std::fprintf(stderr, "moegrad: %s needs a value (see moegrad --help)\n", arg.c_str());
      return 2;
    }
    given.push_back(spec);
    const char* v = argv[++i];
    std::string rule;  // what v must be, when it is not
    if (arg == "--threads") {
      if (!ParseInt(v, 1, kMaxThreads, &threads)) rule = "an integer in 1.." + std::to_string(kMaxThreads);
    } else if (arg == "--tokens") {
      if (!ParseInt(v, 1, INT64_MAX, &bench.tokens)) rule = "an integer in 1.." + std::to_string(INT64_MAX);
    } else if (arg == "--evict-mib") {
      if (!ParseInt(v, 1, kMaxEvictMib, &bench.evict_mib)) rule = "an integer in 1.." + std::to_string(kMaxEvictMib);
    } else if (arg == "--seconds") {
      if (!ParseNumber(v, 0.0, kMaxSeconds, &check.seconds)) rule = "a number in 0..1000000";
    } else if (arg == "--seed") {
      if (!ParseUint64(v, &check.seed)) rule = "an integer in 0.." + std::to_string(UINT64_MAX);
    } else if (*v == '\0') {
      rule = "non-empty";
    } else if (arg == "--preset") {
      bench.preset = v;
    } else if (arg == "--dtype") {
      bench.dtype = v;
    } else if (arg == "--op") {
      bench.op = check.op = v;
    } else if (arg == "--json") {
      bench.json = v;
    } else if (arg == "--values") {
      bench.values = v;
      if (strcasecmp(v, "tiny") != 0 && strcasecmp(v, "normal") != 0 && strcasecmp(v, "mixed") != 0) {
        rule = "tiny, normal or mixed";
      }
    } else if (arg == "--sweep") {
      if (!ParseSweep(v, &bench.sweep)) {
        rule = "tokens=N,N,... (1 to " + std::to_string(kMaxSweepSizes) + " different integers in 1.." +
               std::to_string(INT64_MAX) + ")";
      }
    } else if (arg == "--plot") {
      bench.plot = v;
      if (!EndsWith(bench.plot, ".svg")) rule = "a file name ending in .svg";
    }
    if (!rule.empty()) {
      std::fprintf(stderr, "moegrad: %s must be %s, not '%s'\n", arg.c_str(), rule.c_str(), v);
      return 2;
    }
  }
  // The options may come before or after the command: it is known only now. With none it is bench.
  if (command.empty()) command = "bench";
  for (const OptionSpec* spec : given) {
    if (!(spec->commands & CommandBit(command))) {
      std::fprintf(stderr, "moegrad: %s does not take %s (see moegrad --help)\n", command.c_str(), spec->name);
      return 2;
    }
  }
  bool has_tokens = false, has_sweep = false, has_plot = false;
  for (const OptionSpec* spec : given) {
    has_tokens = has_tokens || std::strcmp(spec->name, "--tokens") == 0;
    has_sweep = has_sweep || std::strcmp(spec->name, "--sweep") == 0;
    has_plot = has_plot || std::strcmp(spec->name, "--plot") == 0;
  }
  if (has_tokens && has_sweep) {
    std::fprintf(stderr, "moegrad: --sweep and --tokens do not go together (the sweep names the token counts)\n");
    return 2;
  }
  if (has_plot && !has_sweep) {
    std::fprintf(stderr, "moegrad: --plot needs --sweep (it draws GB/s against the sweep's token counts)\n");
    return 2;
  }
  if (threads > 0) {
    SetNumThreads(static_cast<int>(threads));
    info.threads = static_cast<int>(threads);
  }

  if (command == "check") return RunCheck(check);
  if (command == "info") return RunInfo(info);
  return RunBench(bench);
}

}  // namespace
}  // namespace moegrad::tool

// Nothing escapes as an uncaught exception (std::terminate, a core dump): one line and status 1.
int main(int argc, char** argv) {
  try {
    return moegrad::tool::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "moegrad: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moegrad: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "moegrad: unknown error\n");
  }
  return 1;
}
