// The HTML report (see include/kharness/report.hpp): tables and inline SVG charts, no scripts and
// no network. Written in XHTML syntax (every tag closed, only the five XML entities) so that it is
// also well-formed XML.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kharness/report.hpp"

namespace kharness::report {
namespace {

std::string esc(const std::string& s) { return xml_escape(s, true); }

std::string num(double v) { return fmt::format("{:.1f}", v); }

std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

constexpr const char* kPassColor = "#2e7d32";
constexpr const char* kFailColor = "#c62828";
constexpr const char* kLineColor = "#1565c0";

// A chart's frame: the plot area inside margins, in SVG user units.
struct Frame {
  double width = 640, height = 300;
  double left = 60, right = 20, top = 20, bottom = 45;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return height - bottom; }  // bottom of the plot area
  double y1() const { return top; }
};

std::string svg_open(const Frame& f, const std::string& label) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      f.width, f.height, f.width, f.height, esc(label));
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle",
                 const char* cls = "") {
  return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\" class=\"{}\">{}</text>\n", num(x),
                     num(y), anchor, cls, esc(s));
}

std::string line(double x1, double y1, double x2, double y2, const char* cls) {
  return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"{}\"/>\n", num(x1),
                     num(y1), num(x2), num(y2), cls);
}

std::string axes(const Frame& f, const std::string& xlabel, const std::string& ylabel) {
  std::string out;
  out += line(f.x0(), f.y0(), f.x1(), f.y0(), "axis");
  out += line(f.x0(), f.y0(), f.x0(), f.y1(), "axis");
  out += text((f.x0() + f.x1()) / 2, f.height - 8, xlabel, "middle", "label");
  out += fmt::format(
      "<text x=\"14\" y=\"{}\" text-anchor=\"middle\" class=\"label\" "
      "transform=\"rotate(-90 14 {})\">{}</text>\n",
      num((f.y0() + f.y1()) / 2), num((f.y0() + f.y1()) / 2), esc(ylabel));
  return out;
}

// A "nice" upper bound for a linear axis and its tick step.
std::pair<double, double> nice_range(double max) {
  if (!(max > 0)) max = 1;
  double raw = max / 5;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  return {std::ceil(max / step) * step, step};
}

// Speedup over the candidate index of one run.
std::string trajectory_chart(const HtmlRun& run) {
  Frame f;
  double max_speedup = 1.0;
  for (const auto& c : run.candidates) max_speedup = std::max(max_speedup, c.speedup);
  // Not a structured binding: the lambdas below capture it, which C++17 does not allow (GCC
  // accepts it, clang, and so clang-tidy, does not).
  double ymax = 0, ystep = 0;
  std::tie(ymax, ystep) = nice_range(max_speedup * 1.1);
  int n = std::max<int>(1, static_cast<int>(run.candidates.size()));
  auto x = [&](int seq) {
    return n == 1 ? (f.x0() + f.x1()) / 2
                  : f.x0() + 10 + (f.x1() - f.x0() - 20) * (seq - 1) / static_cast<double>(n - 1);
  };
  auto y = [&](double v) { return f.y0() - (f.y0() - f.y1()) * v / ymax; };
  std::string out = svg_open(f, "speedup over candidate index, run " + run.id);
  for (double t = 0; t <= ymax + 1e-9; t += ystep) {
    out += line(f.x0(), y(t), f.x1(), y(t), "grid");
    out += text(f.x0() - 6, y(t) + 4, fmt::format("{:g}x", t), "end", "tick");
  }
  out += line(f.x0(), y(1), f.x1(), y(1), "baseline");
  out += text(f.x1(), y(1) - 4, "baseline", "end", "tick");
  out += axes(f, "candidate (evaluation order)", "mean speedup");
  int tick_every = std::max(1, n / 10);
  for (int i = 0; i < static_cast<int>(run.candidates.size()); ++i) {
    int seq = i + 1;
    if (seq % tick_every == 0 || seq == 1)
      out += text(x(seq), f.y0() + 16, std::to_string(seq), "middle", "tick");
  }
  // The running best: a step line through the best passing speedup so far.
  std::string path;
  double best = 0;
  for (int i = 0; i < static_cast<int>(run.candidates.size()); ++i) {
    const auto& c = run.candidates[static_cast<std::size_t>(i)];
    if (c.status == "PASSED" && c.speedup > best) {
      if (best > 0) path += fmt::format(" L {} {}", num(x(i + 1)), num(y(best)));
      best = c.speedup;
      path += fmt::format(" {} {} {}", path.empty() ? "M" : "L", num(x(i + 1)), num(y(best)));
    }
  }
  if (!path.empty()) {
    path += fmt::format(" L {} {}", num(x(n)), num(y(best)));
    out += fmt::format("<path d=\"{}\" class=\"best\"/>\n", path);
  }
  for (int i = 0; i < static_cast<int>(run.candidates.size()); ++i) {
    const auto& c = run.candidates[static_cast<std::size_t>(i)];
    bool passed = c.status == "PASSED";
    double cy = y(passed ? c.speedup : 0);
    std::string title = fmt::format("#{} {} {}: {} {:.3f}x{}", c.seq, c.id, c.name, c.status,
                                    c.speedup, c.cached ? " (cached)" : "");
    if (passed) {
      out += fmt::format(
          "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"><title>{}</title></circle>\n",
          num(x(i + 1)), num(cy), kPassColor, esc(title));
    } else {
      double cx = x(i + 1);
      out += fmt::format(
          "<path d=\"M {} {} L {} {} M {} {} L {} {}\" stroke=\"{}\" stroke-width=\"2\"><title>{}"
          "</title></path>\n",
          num(cx - 4), num(cy - 4), num(cx + 4), num(cy + 4), num(cx - 4), num(cy + 4), num(cx + 4),
          num(cy - 4), kFailColor, esc(title));
    }
  }
  out += "</svg>\n";
  return out;
}

// A model layer's time by node, before (the baseline layer) and after (the substituted one): two
// horizontal bars on one time axis, each split into its nodes' times in execution order, with a
// legend; a substituted node's name is marked with '*'. The measured span is drawn as a tick
// past each bar, so what the node times leave out (gaps between kernels) shows.
std::string layer_bars(const HtmlLayerTiming& layer) {
  static const char* const kPalette[] = {"#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828",
                                         "#00838f", "#9e9d24", "#4e342e", "#ad1457", "#37474f"};
  constexpr std::size_t kColors = sizeof(kPalette) / sizeof(kPalette[0]);
  Frame f;
  f.left = 90;
  const double bar = 34, legend_row = 16;
  const std::size_t legend_rows = (layer.nodes.size() + 3) / 4;
  f.height = f.top + 2 * bar + 40 + legend_row * static_cast<double>(legend_rows) + 10;
  f.bottom = f.height - f.top - 2 * bar;
  double base_sum = 0, sum = 0;
  for (const auto& n : layer.nodes) {
    base_sum += n.baseline_seconds;
    sum += n.seconds;
  }
  const double longest = std::max({layer.baseline_span, layer.span, base_sum, sum, 1e-12});
  auto x = [&](double seconds) { return f.x0() + (f.x1() - f.x0()) * seconds / longest; };
  std::string out = svg_open(f, "layer time by operator, " + layer.title);
  const struct {
    const char* label;
    bool after;
    double span;
  } rows[] = {{"before", false, layer.baseline_span}, {"after", true, layer.span}};
  for (int r = 0; r < 2; ++r) {
    const double top = f.y1() + bar * r;
    double at = 0;
    for (std::size_t i = 0; i < layer.nodes.size(); ++i) {
      const auto& n = layer.nodes[i];
      const double t = rows[r].after ? n.seconds : n.baseline_seconds;
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {:.3f} ms"
          "</title></rect>\n",
          num(x(at)), num(top + 4), num(std::max(0.0, x(at + t) - x(at))), num(bar - 8),
          kPalette[i % kColors], esc(n.name), t * 1e3);
      at += t;
    }
    out += line(x(rows[r].span), top + 1, x(rows[r].span), top + bar - 1, "axis");
    out += text(f.x0() - 6, top + bar / 2 + 4, rows[r].label, "end", "label");
  }
  const double axis_y = f.y1() + 2 * bar + 2;
  out += line(f.x0(), axis_y, f.x1(), axis_y, "axis");
  out += text(f.x0(), axis_y + 14, "0", "middle", "tick");
  out += text(f.x1(), axis_y + 14, fmt::format("{:.3f} ms", longest * 1e3), "end", "tick");
  for (std::size_t i = 0; i < layer.nodes.size(); ++i) {
    const double lx = f.x0() + static_cast<double>(i % 4) * 130;
    const std::size_t row = i / 4;  // four legend entries a row
    const double ly = axis_y + 30 + legend_row * static_cast<double>(row);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>\n",
                       num(lx), num(ly - 9), kPalette[i % kColors]);
    out += text(lx + 14, ly, layer.nodes[i].name + (layer.nodes[i].substituted ? " *" : ""),
                "start", "tick");
  }
  out += "</svg>\n";
  return out;
}

// Per-workload speedup bars of one candidate (horizontal bars, one per workload).
std::string workload_bars(const HtmlBest& best) {
  Frame f;
  f.left = 230;
  f.bottom = 40;
  double bar = 22;
  f.height =
      f.top + f.bottom + bar * static_cast<double>(std::max<std::size_t>(1, best.workloads.size()));
  double max_speedup = 1.0;
  for (const auto& w : best.workloads) max_speedup = std::max(max_speedup, w.speedup);
  double xmax = 0, xstep = 0;  // captured below: not a structured binding (C++17)
  std::tie(xmax, xstep) = nice_range(max_speedup * 1.1);
  auto x = [&](double v) { return f.x0() + (f.x1() - f.x0()) * v / xmax; };
  std::string out = svg_open(f, "per-workload speedup of " + best.candidate_id);
  for (double t = 0; t <= xmax + 1e-9; t += xstep) {
    out += line(x(t), f.y1(), x(t), f.y0(), "grid");
    out += text(x(t), f.y0() + 16, fmt::format("{:g}x", t), "middle", "tick");
  }
  out += text((f.x0() + f.x1()) / 2, f.height - 6, "speedup over the baseline", "middle", "label");
  for (std::size_t i = 0; i < best.workloads.size(); ++i) {
    const auto& w = best.workloads[i];
    double top = f.y1() + bar * static_cast<double>(i);
    const char* color = w.speedup >= 1 ? kPassColor : "#ef6c00";
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {:.3f}x, "
        "{:.1f}% "
        "SOL</title></rect>\n",
        num(f.x0()), num(top + 3), num(std::max(0.0, x(w.speedup) - f.x0())), num(bar - 6), color,
        esc(w.label), w.speedup, 100 * w.sol_fraction);
    out += text(f.x0() - 6, top + bar / 2 + 4, w.label, "end", "tick");
    out += text(x(w.speedup) + 4, top + bar / 2 + 4, fmt::format("{:.2f}x", w.speedup), "start",
                "tick");
  }
  out += line(x(1), f.y1(), x(1), f.y0(), "baseline");
  out += line(f.x0(), f.y1(), f.x0(), f.y0(), "axis");
  out += "</svg>\n";
  return out;
}

// Achieved FLOP/s against arithmetic intensity, log-log, with each GPU's roofs.
std::string roofline_chart(const HtmlReport& report) {
  Frame f;
  f.height = 360;
  f.left = 105;  // room for "100 TFLOP/s" and the axis label
  struct Point {
    double ai, perf;
    std::string label;
    std::size_t series;
  };
  std::vector<Point> points;
  for (std::size_t b = 0; b < report.best.size(); ++b) {
    for (const auto& w : report.best[b].workloads) {
      if (w.flops > 0 && w.bytes > 0 && w.latency > 0)
        points.push_back({w.flops / w.bytes, w.flops / w.latency,
                          report.best[b].operator_name + " " + w.label, b});
    }
  }
  double ai_min = 0.1, ai_max = 1000, p_min = 1e9, p_max = 1e15;
  if (!points.empty() || !report.roofs.empty()) {
    ai_min = std::numeric_limits<double>::max();
    ai_max = 0;
    p_min = std::numeric_limits<double>::max();
    p_max = 0;
    for (const auto& p : points) {
      ai_min = std::min(ai_min, p.ai);
      ai_max = std::max(ai_max, p.ai);
      p_min = std::min(p_min, p.perf);
      p_max = std::max(p_max, p.perf);
    }
    for (const auto& r : report.roofs) {
      p_max = std::max(p_max, r.peak_flops);
      if (r.bandwidth > 0) {
        double ridge = r.peak_flops / r.bandwidth;
        ai_min = std::min(ai_min, ridge / 100);
        ai_max = std::max(ai_max, ridge * 10);
      }
    }
    if (ai_max <= 0) {
      ai_min = 0.1;
      ai_max = 1000;
    }
    if (p_max <= 0) p_max = 1e15;
    if (p_min > p_max) p_min = p_max / 1e4;
    // Whole decades, with a margin.
    ai_min = std::pow(10, std::floor(std::log10(ai_min)));
    ai_max = std::pow(10, std::ceil(std::log10(ai_max)));
    p_min = std::pow(10, std::floor(std::log10(std::min(p_min, p_max / 1e3))));
    p_max = std::pow(10, std::ceil(std::log10(p_max * 1.5)));
  }
  auto x = [&](double ai) {
    return f.x0() + (f.x1() - f.x0()) * std::log10(ai / ai_min) / std::log10(ai_max / ai_min);
  };
  auto y = [&](double p) {
    return f.y0() - (f.y0() - f.y1()) * std::log10(p / p_min) / std::log10(p_max / p_min);
  };
  std::string out = svg_open(f, "roofline");
  for (double d = ai_min; d <= ai_max * 1.001; d *= 10) {
    out += line(x(d), f.y1(), x(d), f.y0(), "grid");
    out += text(x(d), f.y0() + 16, fmt::format("{:g}", d), "middle", "tick");
  }
  for (double d = p_min; d <= p_max * 1.001; d *= 10) {
    out += line(f.x0(), y(d), f.x1(), y(d), "grid");
    out += text(f.x0() - 6, y(d) + 4, si(d, "FLOP/s"), "end", "tick");
  }
  out += axes(f, "arithmetic intensity (FLOP/byte)", "achieved FLOP/s");
  for (const auto& r : report.roofs) {
    if (r.peak_flops <= 0 || r.bandwidth <= 0) continue;
    double ridge = r.peak_flops / r.bandwidth;
    double a0 = std::max(ai_min, p_min / r.bandwidth);
    out += fmt::format(
        "<path d=\"M {} {} L {} {} L {} {}\" class=\"roof\"><title>{}: {} ({}), "
        "{}</title></path>\n",
        num(x(a0)), num(y(r.bandwidth * a0)), num(x(ridge)), num(y(r.peak_flops)), num(x(ai_max)),
        num(y(r.peak_flops)), esc(r.gpu), si(r.peak_flops, "FLOP/s"), esc(r.peak_dtype),
        si(r.bandwidth, "B/s"));
    out += text(x(ai_max) - 4, y(r.peak_flops) - 6,
                fmt::format("{} {} peak {}", r.gpu, r.peak_dtype, si(r.peak_flops, "FLOP/s")),
                "end", "tick");
    out += text(x(a0) + 4, y(r.bandwidth * a0) - 8, si(r.bandwidth, "B/s"), "start", "tick");
  }
  const char* palette[] = {"#1565c0", "#6a1b9a", "#00838f", "#ef6c00", "#ad1457", "#558b2f"};
  for (const auto& p : points) {
    out += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"><title>{}: {:.3g} FLOP/byte, {}</title>"
        "</circle>\n",
        num(x(p.ai)), num(y(p.perf)), palette[p.series % 6], esc(p.label), p.ai,
        si(p.perf, "FLOP/s"));
  }
  if (points.empty())
    out += text((f.x0() + f.x1()) / 2, (f.y0() + f.y1()) / 2,
                "no timed workloads with FLOP and byte counts", "middle", "label");
  out += "</svg>\n";
  return out;
}

constexpr const char* kStyle = R"css(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.PASSED { color: #2e7d32; font-weight: 600; } .fail { color: #c62828; font-weight: 600; }
.muted { color: #777; }
svg.chart { border: 1px solid #eee; background: #fff; display: block; margin: 8px 0; }
svg .axis { stroke: #444; stroke-width: 1; }
svg .grid { stroke: #eee; stroke-width: 1; }
svg .baseline { stroke: #999; stroke-dasharray: 4 3; }
svg .best { fill: none; stroke: #1565c0; stroke-width: 2; }
svg .roof { fill: none; stroke: #c62828; stroke-width: 2; }
svg text { font-size: 11px; fill: #333; } svg text.label { font-size: 12px; fill: #111; }
)css";

std::string status_cell(const std::string& status) {
  return fmt::format("<td class=\"{}\">{}</td>", status == "PASSED" ? "PASSED" : "fail",
                     esc(status.empty() ? "-" : status));
}

}  // namespace

std::string to_html(const HtmlReport& report) {
  std::string generated = report.generated_at.empty() ? utc_now_iso8601() : report.generated_at;
  std::string out;
  out += "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n";
  out += "<meta charset=\"utf-8\"/>\n<title>" + esc(report.title) + "</title>\n";
  out += std::string("<style>") + kStyle + "</style>\n</head>\n<body>\n";
  out += "<h1>" + esc(report.title) + "</h1>\n";
  if (!report.layers.empty()) {
    out += "<h2>Layer time by operator</h2>\n";
    out +=
        "<p class=\"muted\">Each shape's decoder layer timed end to end (model-check --time): "
        "before is the baseline layer (seeds, else references), after the layer with the "
        "solutions substituted (marked *); medians of the timed passes. The tick past each bar "
        "is the measured layer span.</p>\n";
    for (const auto& layer : report.layers) {
      const double speedup = layer.span > 0 ? layer.baseline_span / layer.span : 0.0;
      out += fmt::format("<h3>{}: {:.3f} ms before, {:.3f} ms after ({:.3f}x)</h3>\n",
                         esc(layer.title), layer.baseline_span * 1e3, layer.span * 1e3, speedup);
      out += layer_bars(layer);
    }
    // A report of model layers alone has no archive to describe.
    if (report.runs.empty() && report.best.empty()) {
      out += "</body>\n</html>\n";
      return out;
    }
  }
  out += fmt::format(
      "<p class=\"muted\">Generated {}; {} run(s), {} operator(s) with a passing "
      "candidate.</p>\n",
      esc(generated), report.runs.size(), report.best.size());

  out += "<h2>Best per operator</h2>\n";
  if (report.best.empty()) {
    out += "<p class=\"muted\">No candidate has passed yet.</p>\n";
  } else {
    out +=
        "<table><tr><th>operator</th><th>candidate</th><th>name</th><th>GPU</th>"
        "<th>mean speedup</th></tr>\n";
    for (const auto& b : report.best) {
      out += fmt::format(
          "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"num\">{}"
          "</td></tr>\n",
          esc(b.operator_name), esc(b.candidate_id), esc(b.name), esc(b.gpu.empty() ? "-" : b.gpu),
          b.speedup > 0 ? fmt::format("{:.3f}x", b.speedup) : "- (not timed)");
    }
    out += "</table>\n";
    for (const auto& b : report.best) {
      out += fmt::format("<h3>{}: per-workload speedup of <code>{}</code> ({})</h3>\n",
                         esc(b.operator_name), esc(b.candidate_id), esc(b.name));
      if (b.workloads.empty()) {
        out += "<p class=\"muted\">Not timed (no per-workload speedup).</p>\n";
      } else {
        out += workload_bars(b);
      }
    }
  }

  out += "<h2>Roofline</h2>\n";
  out +=
      "<p class=\"muted\">Each point is a workload of a best candidate: FLOPs and bytes from the "
      "definition's formulas, time from the measured latency. Roofs: datasheet peak compute "
      "and DRAM bandwidth (configs/gpus).</p>\n";
  out += roofline_chart(report);

  for (const auto& run : report.runs) {
    out += fmt::format("<h2>Run <code>{}</code></h2>\n", esc(run.id));
    out += fmt::format("<p>{} {}, started {}, {}; {} candidate(s).</p>\n", esc(run.command),
                       esc(run.operator_name), esc(run.started_at), esc(run.state),
                       run.candidates.size());
    if (run.candidates.empty()) continue;
    out += trajectory_chart(run);
    out +=
        "<table><tr><th>#</th><th>candidate</th><th>name</th><th>status</th>"
        "<th>mean speedup</th><th>note</th></tr>\n";
    for (const auto& c : run.candidates) {
      out += fmt::format(
          "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td>{}<td "
          "class=\"num\">{}</td><td>{}</td></tr>\n",
          c.seq, esc(c.id), esc(c.name), status_cell(c.status),
          c.speedup > 0 ? fmt::format("{:.3f}x", c.speedup) : "-", c.cached ? "cached" : "");
    }
    out += "</table>\n";
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace kharness::report
