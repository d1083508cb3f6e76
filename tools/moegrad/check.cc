// `moegrad check`: a time-boxed randomized differential test of every operator against the scalar
// reference. Each case also checks that no byte outside an output's view changed, that a second run with
// another thread count gives the same bytes, and (one case in five) that a corrupted index value fails
// phase two with ACLNN_ERR_PARAM_INVALID before any output byte is written.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "moegrad/plan.hpp"
#include "tools/moegrad/common/check_cases.h"
#include "tools/moegrad/cli.h"
#include "tools/moegrad/common/op_names.h"

namespace moegrad::tool {
namespace {

struct OpStats {
  int64_t cases = 0;
  int64_t invalid_cases = 0;
  int64_t failures = 0;
};

// Phase one and two as a user calls them: either the one-call form or plan + run with own workspace.
Status RunOnce(const Problem& p, bool one_call) {
  if (one_call) return p.Call();
  moegrad::Plan plan;
  Status s = p.Plan(&plan);
  if (!s.ok()) return s;
  const uint64_t bytes = plan.workspace_size();
  void* ws = bytes ? ::operator new(bytes, std::align_val_t(64)) : nullptr;
  s = plan.Run(ws, bytes);
  if (ws) ::operator delete(ws, std::align_val_t(64));
  return s;
}

// Returns an empty string when the case passed, else what went wrong.
// `invalid` asks for a corrupted index; it is cleared when the problem has no index value to corrupt.
std::string RunCase(CheckCase& k, std::mt19937_64& rng, int max_threads, bool* invalid) {
  Problem& p = *k.problem;
  const std::vector<std::vector<uint8_t>> before = SnapshotOutputs(p);
  const int threads = static_cast<int>(rng() % static_cast<uint64_t>(max_threads)) + 1;
  SetNumThreads(threads);
  const bool one_call = rng() % 2 == 0;

  std::string what;
  if (*invalid) *invalid = p.CorruptIndex(rng, &what);
  if (*invalid) {
    const Status s = RunOnce(p, one_call);
    if (s.code() != StatusCode::kInvalid) {
      return Format("with %s: status %d (%s), expected ACLNN_ERR_PARAM_INVALID", what.c_str(),
                    static_cast<int>(s.code()), s.message().c_str());
    }
    if (s.message().find(p.op_name()) != 0) {
      return Format("with %s: message '%s' does not start with the operator name", what.c_str(),
                    s.message().c_str());
    }
    for (size_t i = 0; i < before.size(); ++i) {
      if (!p.outputs()[i].actual->SameBytes(before[i])) {
        return Format("with %s: %s was written although the call failed", what.c_str(),
                      p.outputs()[i].name.c_str());
      }
    }
    return "";
  }

  const std::string failure = VerifyRun(p, RunOnce(p, one_call), before);
  if (!failure.empty()) return failure;
  const std::vector<std::vector<uint8_t>> after = SnapshotOutputs(p);
  // Bit-identical for every thread count, NaNs included (every NaN of an arithmetic result has the same bits).
  SetNumThreads(threads == max_threads ? 1 : max_threads);
  const Status again = RunOnce(p, !one_call);
  if (!again.ok()) return Format("second run: status %d: %s", static_cast<int>(again.code()), again.message().c_str());
  for (size_t i = 0; i < after.size(); ++i) {
    if (!p.outputs()[i].actual->SameBytes(after[i])) {
      return Format("%s differs between %d and %d threads", p.outputs()[i].name.c_str(), threads,
                    threads == max_threads ? 1 : max_threads);
    }
  }
  return "";
}

}  // namespace

int RunCheck(const CheckOptions& o) {
  std::vector<const CheckOp*> ops;
  for (const CheckOp& op : CheckOps()) {
    if (OpSelected(o.op, OpName{op.op, op.key})) ops.push_back(&op);
  }
  if (ops.empty()) {
    std::fprintf(stderr, "moegrad check: unknown --op '%s'; one of: %s\n", o.op.c_str(), OpChoices().c_str());
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const uint64_t seed =
      o.seed ? o.seed : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) % 1000000000u + 1;
  const int user_threads = NumThreads();
  const int max_threads = std::max(user_threads, 2);  // at least two, so that partitions differ
  std::printf("moegrad %s check: seed %llu, %g s, up to %d threads, %s\n", Version(),
              static_cast<unsigned long long>(seed), o.seconds, max_threads, SimdTarget());
  std::fflush(stdout);

  std::mt19937_64 rng(seed);
  std::vector<OpStats> stats(ops.size());
  int reported = 0;
  const auto start = Clock::now();
  double last_progress = 0.0;
  for (int64_t round = 0;; ++round) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (round > 0 && elapsed >= o.seconds) break;
    if (elapsed - last_progress >= 5.0) {
      last_progress = elapsed;
      int64_t cases = 0;
      for (const OpStats& s : stats) cases += s.cases;
      std::fprintf(stderr, "moegrad check: %.0f s, %lld cases\n", elapsed, static_cast<long long>(cases));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      CheckCase k = ops[i]->random_case(rng);
      bool invalid = rng() % 5 == 0;
      const std::string failure = RunCase(k, rng, max_threads, &invalid);
      ++stats[i].cases;
      if (invalid) ++stats[i].invalid_cases;
      if (failure.empty()) continue;
      ++stats[i].failures;
      if (reported++ < 20) {
        std::printf("FAIL %s%s: %s\n", k.description.c_str(), invalid ? " (invalid index)" : "", failure.c_str());
      }
    }
  }
  SetNumThreads(user_threads);

  std::printf("\n%-34s %8s %14s %9s\n", "operator", "cases", "invalid-index", "failures");
  int64_t failures = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    std::printf("%-34s %8lld %14lld %9lld\n", ops[i]->op, static_cast<long long>(stats[i].cases),
                static_cast<long long>(stats[i].invalid_cases), static_cast<long long>(stats[i].failures));
    failures += stats[i].failures;
  }
  std::printf("%s\n", failures == 0 ? "all cases passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace moegrad::tool
