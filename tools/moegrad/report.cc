#include "tools/moegrad/report.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "moegrad/plan.hpp"
#include "tools/moegrad/common/model_presets.h"

namespace moegrad::tool {

std::string FormatSeconds(double s) {
  if (s < 1e-3) return Format("%.1f us", s * 1e6);
  if (s < 1.0) return Format("%.3f ms", s * 1e3);
  return Format("%.3f s", s);
}

// "960 MiB", the size of a copy's buffer.
std::string MiB(uint64_t bytes) { return Format("%llu MiB", static_cast<unsigned long long>(bytes >> 20)); }

double SameSizeCopyPercent(const BenchResult& b) {
  if (b.seconds <= 0 || b.copy_seconds <= 0 || b.copy_bytes == 0) return 0.0;
  return 100.0 * (static_cast<double>(b.bytes) / b.seconds) / (static_cast<double>(b.copy_bytes) / b.copy_seconds);
}

void PrintBenchTable(const BenchReport& r, FILE* out) {
  const Shape& s = r.shape;
  std::fprintf(out, "moegrad %s bench: %s, %s (drop-pad C=%lld), %s values, %d threads, %s\n", Version(),
               r.preset.c_str(), ShapeString(s.tokens, s.hidden, s.experts, s.topk, 0).c_str(),
               static_cast<long long>(s.capacity), r.values.c_str(), r.threads, SimdTarget());
  std::fprintf(out, "copy bandwidth (%s copy, streaming stores, %s, read + write): %.1f GB/s\n\n",
               MiB(r.eviction_bytes).c_str(), r.copy_walk.c_str(), r.copy_bytes_per_second * 1e-9);
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
               "%% copy = median, over the timed calls, of the call's GB/s over that of a %s copy made just\n"
               "before it (so the caches are cold, as in a training step); %% copy@size = GB/s over a warm copy\n"
               "moving the same bytes (the yardstick where the caches hold much of a problem).\n"
               "verified = every output element compared with the scalar reference (gradScales within the\n"
               "bound of a different fp32 summation order, the rest bit for bit). Formulas: bench/README.md.\n",
               MiB(r.eviction_bytes).c_str());
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

namespace {

// One report as a JSON object (no newline after its closing brace).
void WriteReportObject(const BenchReport& r, FILE* f) {
  const Shape& s = r.shape;
  std::fprintf(f,
               "{\n  \"version\": %s,\n  \"simd_target\": %s,\n  \"threads\": %d,\n  \"preset\": %s,\n"
               "  \"values\": %s,\n  \"tokens\": %lld,\n  \"hidden\": %lld,\n  \"experts\": %lld,\n  \"topk\": %lld,\n"
               "  \"capacity\": %lld,\n  \"copy_gbps\": %.4f,\n  \"copy_walk\": %s,\n  \"eviction_bytes\": %llu,\n"
               "  \"rows\": [",
               JsonString(Version()).c_str(), JsonString(SimdTarget()).c_str(), r.threads,
               JsonString(r.preset).c_str(), JsonString(r.values).c_str(), static_cast<long long>(s.tokens), static_cast<long long>(s.hidden),
               static_cast<long long>(s.experts), static_cast<long long>(s.topk), static_cast<long long>(s.capacity),
               r.copy_bytes_per_second * 1e-9, JsonString(r.copy_walk).c_str(),
               static_cast<unsigned long long>(r.eviction_bytes));
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const BenchResult& b = r.rows[i];
    const double gbps = b.seconds > 0 ? static_cast<double>(b.bytes) / b.seconds * 1e-9 : 0.0;
    std::fprintf(f,
                 "%s\n    {\"op\": %s, \"key\": %s, \"mode\": %s, \"dtype\": %s, \"shape\": %s, "
                 "\"median_s\": %.9g, \"bytes\": %llu, \"workspace_bytes\": %llu, \"gbps\": %.4f, "
                 "\"pct_copy\": %.2f, \"paired_copy_gbps\": %.4f, \"copy_same_size_gbps\": %.4f, \"pct_copy_same_size\": %.2f, "
                 "%s%s\"verified\": %s%s}",
                 i ? "," : "", JsonString(b.op).c_str(), JsonString(b.key).c_str(), JsonString(b.mode).c_str(),
                 JsonString(b.dtype).c_str(), JsonString(b.shape).c_str(), b.seconds,
                 static_cast<unsigned long long>(b.bytes), static_cast<unsigned long long>(b.workspace_bytes), gbps,
                 b.pct_copy, b.paired_copy_bytes_per_second * 1e-9,
                 b.copy_seconds > 0 ? static_cast<double>(b.copy_bytes) / b.copy_seconds * 1e-9 : 0.0,
                 SameSizeCopyPercent(b),
                 b.cold_copy_seconds > 0 ? Format("\"cold_copy_same_size_s\": %.9g, ", b.cold_copy_seconds).c_str() : "",
                 b.warm_seconds > 0 ? Format("\"warm_median_s\": %.9g, ", b.warm_seconds).c_str() : "",
                 b.verified ? "true" : "false",
                 b.error.empty() ? "" : (", \"error\": " + JsonString(b.error)).c_str());
  }
  std::fprintf(f, "\n  ]\n}");
}

}  // namespace

bool WriteBenchJson(const BenchReport& r, FILE* f) {
  WriteReportObject(r, f);
  std::fprintf(f, "\n");
  return std::fflush(f) == 0 && !std::ferror(f);
}

bool WriteSweepJson(const std::vector<BenchReport>& reports, FILE* f) {
  std::fprintf(f, "{\"sweep\": [\n");
  for (size_t k = 0; k < reports.size(); ++k) {
    if (k) std::fprintf(f, ",\n");
    WriteReportObject(reports[k], f);
  }
  std::fprintf(f, "\n]}\n");
  return std::fflush(f) == 0 && !std::ferror(f);
}

namespace {

double Gbps(const BenchResult& b) { return b.seconds > 0 ? static_cast<double>(b.bytes) / b.seconds * 1e-9 : 0.0; }

// The least bytes of the call at the paired copy rate: what the call would take if it only moved its bytes.
double BytesSeconds(const BenchResult& b) {
  return b.paired_copy_bytes_per_second > 0 ? static_cast<double>(b.bytes) / b.paired_copy_bytes_per_second : 0.0;
}

// The warm copy's time scaled to the call's least bytes: what a call repeated back to back would take if it only
// moved its bytes (they stay in the caches when they fit).
double WarmBytesSeconds(const BenchResult& b) {
  return b.copy_bytes > 0 ? b.copy_seconds * static_cast<double>(b.bytes) / static_cast<double>(b.copy_bytes) : 0.0;
}

// "-1.5 us" style: a signed duration.
std::string FormatSigned(double seconds) {
  return seconds < 0 ? "-" + FormatSeconds(-seconds) : FormatSeconds(seconds);
}

std::string RowTitle(const BenchResult& b) { return b.op + " " + b.mode + " " + b.dtype; }

// Text for an SVG element: the five characters XML reserves escaped.
std::string XmlText(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// The median of the paired copy rates of a report's rows (GB/s), 0 when none.
double ReportCopyGbps(const BenchReport& r) {
  std::vector<double> v;
  for (const BenchResult& b : r.rows) {
    if (b.paired_copy_bytes_per_second > 0) v.push_back(b.paired_copy_bytes_per_second * 1e-9);
  }
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// A round step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over [0, top].
double NiceStep(double top, int ticks) {
  const double raw = top / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10.0 * p;
}

}  // namespace

void PrintSweepTable(const std::vector<BenchReport>& reports, FILE* out) {
  if (reports.empty()) return;
  const BenchReport& first = reports.front();
  const Shape& s = first.shape;
  std::string sizes;
  for (const BenchReport& r : reports) sizes += (sizes.empty() ? "" : ",") + std::to_string(r.shape.tokens);
  std::fprintf(out, "moegrad %s bench sweep: %s, H=%lld E=%lld K=%lld, tokens %s, %s values, %d threads, %s\n",
               Version(), first.preset.c_str(), static_cast<long long>(s.hidden), static_cast<long long>(s.experts),
               static_cast<long long>(s.topk), sizes.c_str(), first.values.c_str(), first.threads, SimdTarget());
  std::fprintf(out, "copy bandwidth (%s copy, streaming stores, %s, read + write): %.1f GB/s\n",
               MiB(first.eviction_bytes).c_str(), first.copy_walk.c_str(), first.copy_bytes_per_second * 1e-9);
  for (size_t i = 0; i < first.rows.size(); ++i) {
    std::fprintf(out, "\n%s\n", RowTitle(first.rows[i]).c_str());
    std::fprintf(out, "  %8s  %6s  %11s  %8s  %7s  %11s  %11s  %11s  %11s  %11s  %11s  %s\n", "tokens", "C", "median",
                 "GB/s", "% copy", "% copy@size", "bytes' time", "cold copy", "overhead", "warm", "warm over",
                 "verified");
    for (const BenchReport& r : reports) {
      if (i >= r.rows.size()) continue;
      const BenchResult& b = r.rows[i];
      if (!b.error.empty() && b.seconds == 0.0) {
        std::fprintf(out, "  %8lld  %6lld  %11s  %8s  %7s  %11s  %11s  %11s  %11s  %11s  %11s  %s\n",
                     static_cast<long long>(r.shape.tokens), static_cast<long long>(r.shape.capacity), "-", "-", "-",
                     "-", "-", "-", "-", "-", "-", "FAIL (error)");
        continue;
      }
      const double own = BytesSeconds(b);
      std::fprintf(out, "  %8lld  %6lld  %11s  %8.1f  %6.0f%%  %10.0f%%  %11s  %11s  %11s  %11s  %11s  %s\n",
                   static_cast<long long>(r.shape.tokens), static_cast<long long>(r.shape.capacity),
                   FormatSeconds(b.seconds).c_str(), Gbps(b), b.pct_copy, SameSizeCopyPercent(b),
                   FormatSeconds(own).c_str(), FormatSeconds(b.cold_copy_seconds).c_str(),
                   FormatSigned(b.seconds - own).c_str(), FormatSeconds(b.warm_seconds).c_str(),
                   FormatSigned(b.warm_seconds - WarmBytesSeconds(b)).c_str(), b.verified ? "ok" : "FAIL");
    }
  }
  std::fprintf(out,
               "\nColumns as in the table of one size (bench/README.md); C = drop-and-pad capacity ceil(T*K/E).\n"
               "bytes' time = the operator's least bytes at the paired copy rate; overhead = median - bytes' time\n"
               "(the per-call cost beyond moving the bytes: planning, thread start-up, index work, and the latency\n"
               "of rows fetched cold); cold copy = a copy of the same bytes timed right after the %s copy,\n"
               "the bytes' own time latencies included, which small calls cannot beat either; warm = plan + run\n"
               "called back to back with no copy between (what a decode loop sees when its small tensors stay in the\n"
               "caches), warm over = warm - the warm copy of the same bytes (the fixed cost of a call).\n",
               MiB(first.eviction_bytes).c_str());
}

bool WriteSweepSvg(const std::vector<BenchReport>& reports, FILE* f) {
  constexpr double kWidth = 1060;
  constexpr double kLeft = 70, kTop = 40, kPlotW = 520, kPlotH = 380, kGap = 70;
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                        "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  constexpr int kDashes = 3;  // line styles, cycled after the colours
  static const char* const kDash[kDashes] = {"", " stroke-dasharray=\"6 3\"", " stroke-dasharray=\"2 2\""};
  static const char* const kReferenceDash = " stroke-dasharray=\"8 4\"";
  // Row i's colour and line style, the same in both panels and the legend.
  auto color = [](size_t i) { return kColors[i % std::size(kColors)]; };
  auto dash = [](size_t i) { return kDash[(i / std::size(kColors)) % kDashes]; };
  if (reports.empty()) return false;
  const BenchReport& first = reports.front();
  // Two panels over the same token axis, GB/s above and % of the paired copy below; tall enough for the
  // legend too (a line per row and one per reference line).
  const double height =
      std::max(kTop + 2 * kPlotH + kGap + 50, kTop + 18.0 * static_cast<double>(first.rows.size() + 2) + 20);
  double lo = static_cast<double>(reports.front().shape.tokens), hi = lo;
  for (const BenchReport& r : reports) {
    lo = std::min(lo, static_cast<double>(r.shape.tokens));
    hi = std::max(hi, static_cast<double>(r.shape.tokens));
  }
  const double llo = std::log10(lo), lhi = hi > lo ? std::log10(hi) : llo + 1.0;
  auto px = [&](double tokens) { return kLeft + (std::log10(tokens) - llo) / (lhi - llo) * kPlotW; };

  std::fprintf(f,
               "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
               kWidth, height, kWidth, height);
  const Shape& s = first.shape;
  const std::string title = Format("moegrad %s: %s (H=%lld E=%lld K=%lld), %s values, %d threads, %s", Version(),
                                   first.preset.c_str(), static_cast<long long>(s.hidden),
                                   static_cast<long long>(s.experts), static_cast<long long>(s.topk),
                                   first.values.c_str(), first.threads, SimdTarget());
  std::fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n", kLeft, XmlText(title).c_str());

  // One panel: grid, tick labels, a polyline per row (by index: every report holds the same rows) of
  // value(row), and the reference line reference(report) dashed in black.
  auto panel = [&](double top_y, const char* y_label, auto value, auto reference) {
    double top = 0.0;
    for (const BenchReport& r : reports) {
      top = std::max(top, reference(r));
      for (const BenchResult& b : r.rows) {
        if (b.seconds > 0) top = std::max(top, value(b));
      }
    }
    if (top <= 0) top = 1.0;
    const double step = NiceStep(top * 1.05, 6);
    const double ymax = std::ceil(top * 1.05 / step) * step;
    auto py = [&](double v) { return top_y + kPlotH - v / ymax * kPlotH; };
    for (double y = 0; y <= ymax + step / 2; y += step) {
      std::fprintf(f,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                   kLeft, py(y), kLeft + kPlotW, py(y), kLeft - 6, py(y) + 4, y);
    }
    for (const BenchReport& r : reports) {
      const double x = px(static_cast<double>(r.shape.tokens));
      std::fprintf(f,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld</text>\n",
                   x, top_y, x, top_y + kPlotH, x, top_y + kPlotH + 16, static_cast<long long>(r.shape.tokens));
    }
    std::fprintf(f,
                 "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n"
                 "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">tokens T (log scale)</text>\n"
                 "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
                 kLeft, top_y, kPlotW, kPlotH, kLeft + kPlotW / 2, top_y + kPlotH + 34, top_y + kPlotH / 2,
                 XmlText(y_label).c_str());
    for (size_t i = 0; i < first.rows.size(); ++i) {
      std::string points;
      for (const BenchReport& r : reports) {
        if (i >= r.rows.size() || r.rows[i].seconds <= 0) continue;
        points += Format("%s%.1f,%.1f", points.empty() ? "" : " ", px(static_cast<double>(r.shape.tokens)),
                         py(value(r.rows[i])));
      }
      if (!points.empty()) {
        std::fprintf(f, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s/>\n",
                     points.c_str(), color(i), dash(i));
      }
    }
    std::string reference_points;
    for (const BenchReport& r : reports) {
      const double c = reference(r);
      if (c > 0) {
        reference_points += Format("%s%.1f,%.1f", reference_points.empty() ? "" : " ",
                                   px(static_cast<double>(r.shape.tokens)), py(c));
      }
    }
    if (!reference_points.empty()) {
      std::fprintf(f, "<polyline points=\"%s\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"%s/>\n",
                   reference_points.c_str(), kReferenceDash);
    }
  };
  panel(kTop, "GB/s (least bytes / median time)", [](const BenchResult& b) { return Gbps(b); },
        [](const BenchReport& r) { return ReportCopyGbps(r); });
  panel(kTop + kPlotH + kGap, "% of the paired copy rate (median over calls)",
        [](const BenchResult& b) { return b.pct_copy; }, [](const BenchReport&) { return 100.0; });

  // The legend, beside the upper panel.
  double legend_y = kTop + 6;
  auto legend = [&](const std::string& label, const char* color, const char* dash, double width) {
    std::fprintf(f,
                 "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s/>\n"
                 "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                 kLeft + kPlotW + 16, legend_y, kLeft + kPlotW + 40, legend_y, color, width, dash,
                 kLeft + kPlotW + 46, legend_y + 4, XmlText(label).c_str());
    legend_y += 18;
  };
  for (size_t i = 0; i < first.rows.size(); ++i) {
    legend(RowTitle(first.rows[i]), color(i), dash(i), 1.5);
  }
  legend("copy rate (" + MiB(first.eviction_bytes) + " copy paired with each call, median)", "black", kReferenceDash,
         2.0);
  legend("lower panel: 100% of the paired copy rate", "black", kReferenceDash, 2.0);
  std::fprintf(f, "</svg>\n");
  return std::fflush(f) == 0 && !std::ferror(f);
}

}  // namespace moegrad::tool
