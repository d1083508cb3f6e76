#include "tools/moegrad/report.h"

#include <algorithm>

#include "moegrad/plan.hpp"
#include "tools/moegrad/common/model_presets.h"

namespace moegrad::tool {

std::string FormatSeconds(double s) {
  if (s < 1e-3) return Format("%.1f us", s * 1e6);
  if (s < 1.0) return Format("%.3f ms", s * 1e3);
  return Format("%.3f s", s);
}

double SameSizeCopyPercent(const BenchResult& b) {
  if (b.seconds <= 0 || b.copy_seconds <= 0 || b.copy_bytes == 0) return 0.0;
  return 100.0 * (static_cast<double>(b.bytes) / b.seconds) / (static_cast<double>(b.copy_bytes) / b.copy_seconds);
}

void PrintBenchTable(const BenchReport& r, FILE* out) {
  const Shape& s = r.shape;
  std::fprintf(out, "moegrad %s bench: %s, %s (drop-pad C=%lld), %d threads, %s\n", Version(), r.preset.c_str(),
               ShapeString(s.tokens, s.hidden, s.experts, s.topk, 0).c_str(), static_cast<long long>(s.capacity),
               r.threads, SimdTarget());
  std::fprintf(out, "copy bandwidth (memcpy, read + write): %.1f GB/s\n\n", r.copy_bytes_per_second * 1e-9);
  size_t w_op = 8, w_mode = 4, w_dtype = 5, w_shape = 5;
  for (const BenchResult& b : r.rows) {
    w_op = std::max(w_op, b.op.size());
    w_mode = std::max(w_mode, b.mode.size());
    w_dtype = std::max(w_dtype, b.dtype.size());  // "bf16+f32": bf16 tokens, fp32 weights
    w_shape = std::max(w_shape, b.shape.size());
  }
  const int wo = static_cast<int>(w_op), wm = static_cast<int>(w_mode), wd = static_cast<int>(w_dtype);
  const int ws = static_cast<int>(w_shape);
  std::fprintf(out, "%-*s  %-*s  %-*s  %-*s  %11s  %8s  %7s  %11s  %s\n", wo, "operator", wm, "mode", wd, "dtype",
               ws, "shape", "median", "GB/s", "% copy", "% copy@size", "verified");
  for (const BenchResult& b : r.rows) {
    if (!b.error.empty() && b.seconds == 0.0) {
      std::fprintf(out, "%-*s  %-*s  %-*s  %-*s  %11s  %8s  %7s  %11s  %s\n", wo, b.op.c_str(), wm, b.mode.c_str(),
                   wd, b.dtype.c_str(), ws, b.shape.c_str(), "-", "-", "-", "-", "FAIL (error)");
      continue;
    }
    const double gbps = b.seconds > 0 ? static_cast<double>(b.bytes) / b.seconds * 1e-9 : 0.0;
    const double pct = b.pct_copy;
    std::fprintf(out, "%-*s  %-*s  %-*s  %-*s  %11s  %8.1f  %6.0f%%  %10.0f%%  %s\n", wo, b.op.c_str(), wm,
                 b.mode.c_str(), wd, b.dtype.c_str(), ws, b.shape.c_str(), FormatSeconds(b.seconds).c_str(), gbps,
                 pct, SameSizeCopyPercent(b), b.verified ? "ok" : "FAIL");
  }
  std::fprintf(out,
               "\nGB/s = the least bytes the operator must read and write / median time of plan + run.\n"
               "%% copy = median, over the timed calls, of the call's GB/s over that of a 256 MiB copy made just\n"
               "before it (so the caches are cold, as in a training step); %% copy@size = GB/s over a warm copy\n"
               "moving the same bytes (the yardstick where the caches hold much of a problem).\n"
               "verified = every output element compared with the scalar reference (gradScales within the\n"
               "bound of a different fp32 summation order, the rest bit for bit). Formulas: bench/README.md.\n");
}

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += Format("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

bool WriteBenchJson(const BenchReport& r, FILE* f) {
  const Shape& s = r.shape;
  std::fprintf(f,
               "{\n  \"version\": %s,\n  \"simd_target\": %s,\n  \"threads\": %d,\n  \"preset\": %s,\n"
               "  \"tokens\": %lld,\n  \"hidden\": %lld,\n  \"experts\": %lld,\n  \"topk\": %lld,\n"
               "  \"capacity\": %lld,\n  \"copy_gbps\": %.4f,\n  \"rows\": [",
               JsonString(Version()).c_str(), JsonString(SimdTarget()).c_str(), r.threads,
               JsonString(r.preset).c_str(), static_cast<long long>(s.tokens), static_cast<long long>(s.hidden),
               static_cast<long long>(s.experts), static_cast<long long>(s.topk), static_cast<long long>(s.capacity),
               r.copy_bytes_per_second * 1e-9);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const BenchResult& b = r.rows[i];
    const double gbps = b.seconds > 0 ? static_cast<double>(b.bytes) / b.seconds * 1e-9 : 0.0;
    std::fprintf(f,
                 "%s\n    {\"op\": %s, \"key\": %s, \"mode\": %s, \"dtype\": %s, \"shape\": %s, "
                 "\"median_s\": %.9g, \"bytes\": %llu, \"workspace_bytes\": %llu, \"gbps\": %.4f, "
                 "\"pct_copy\": %.2f, \"paired_copy_gbps\": %.4f, \"copy_same_size_gbps\": %.4f, \"pct_copy_same_size\": %.2f, "
                 "\"verified\": %s%s}",
                 i ? "," : "", JsonString(b.op).c_str(), JsonString(b.key).c_str(), JsonString(b.mode).c_str(),
                 JsonString(b.dtype).c_str(), JsonString(b.shape).c_str(), b.seconds,
                 static_cast<unsigned long long>(b.bytes), static_cast<unsigned long long>(b.workspace_bytes), gbps,
                 b.pct_copy, b.paired_copy_bytes_per_second * 1e-9,
                 b.copy_seconds > 0 ? static_cast<double>(b.copy_bytes) / b.copy_seconds * 1e-9 : 0.0,
                 SameSizeCopyPercent(b), b.verified ? "true" : "false",
                 b.error.empty() ? "" : (", \"error\": " + JsonString(b.error)).c_str());
  }
  std::fprintf(f, "\n  ]\n}\n");
  return std::fflush(f) == 0 && !std::ferror(f);
}

}  // namespace moegrad::tool
