// Run-to-run comparison and the CSV report (see include/kharness/run_compare.hpp).
//
// The noise of a side is the relative standard error of its latency estimate, which the timing
// stage records as timing.candidate.noise (SE of the median / median). The ratio new/old has,
// to first order, the relative standard error sqrt(n_old² + n_new²). nvbench_compare.py calls a
// change real when it exceeds the smaller side's noise; here it must exceed `sigmas` combined
// standard errors, and "same" is only said where that band is narrow enough to mean it: a wide
// band with no visible change is "unclear", never "slower".
#include "kharness/run_compare.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "kharness/sanitize.hpp"
#include "kharness/status.hpp"
#include "kharness/text.hpp"

namespace kharness::report {
namespace {

using json = nlohmann::json;

// A statistic, or `fallback` when it is not finite (written as null: unknown).
double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

TimedSide side_of(const WorkloadVerdict& w) {
  TimedSide s;
  s.status = std::string(status_name(w.status));
  if (!w.timing.candidate) return s;
  const ContenderTiming& c = *w.timing.candidate;
  s.latency = c.latency;
  s.count = c.stats.count;
  s.noise = finite_or(c.stats.noise, -1);
  if (s.noise < 0) {
    double cv = finite_or(c.stats.cv, -1);
    if (cv >= 0 && s.count > 1) s.noise = cv / std::sqrt(static_cast<double>(s.count));
  }
  if (!std::isfinite(s.latency) || s.latency < 0) s.latency = 0;
  if (!std::isfinite(s.noise)) s.noise = -1;
  return s;
}

std::string display_name(const Verdict& v) { return v.solution.empty() ? v.source : v.solution; }

struct Keyed {
  std::string key;
  CompareRow row;  // identity and one side filled
};

std::vector<Keyed> rows_of(const std::vector<Verdict>& verdicts, bool is_new) {
  std::vector<Keyed> out;
  std::set<std::string> seen;
  for (const auto& v : verdicts) {
    std::string name = display_name(v);
    auto add = [&](const std::string& workload, const json& axes, const TimedSide& side) {
      Keyed k;
      k.key = v.definition + "\x1f" + name + "\x1f" + workload;
      // Two solutions of one name in one file: the later one is told apart by its source.
      if (!seen.insert(k.key).second) {
        name = name + " (" + v.source + ")";
        k.key = v.definition + "\x1f" + name + "\x1f" + workload;
        seen.insert(k.key);
      }
      k.row.definition = v.definition;
      k.row.solution = name;
      k.row.workload = workload;
      k.row.axes = axes;
      (is_new ? k.row.new_side : k.row.old_side) = side;
      out.push_back(std::move(k));
    };
    if (v.workloads.empty()) {
      TimedSide s;
      s.status = std::string(status_name(v.status));
      add("", json::object(), s);
    }
    for (const auto& w : v.workloads) add(w.uuid, w.axes, side_of(w));
  }
  return out;
}

std::string format_latency(const std::optional<TimedSide>& s) {
  if (!s) return "-";
  if (!s->timed()) return s->status == "PASSED" ? "not timed" : s->status;
  std::string noise = s->noise >= 0 ? fmt::format(" ±{:.2f}%", 100 * s->noise) : " ±?";
  std::string text = fmt::format("{:.3f} us{}", s->latency * 1e6, noise);
  if (s->status != "PASSED") text += " " + s->status;
  return text;
}

std::string axes_text(const json& axes) {
  std::vector<std::string> parts;
  for (auto it = axes.begin(); it != axes.end(); ++it)
    parts.push_back(fmt::format("{}={}", it.key(), it.value().dump()));
  return join(parts, " ");
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::size_t> CompareResult::counts() const {
  std::map<std::string, std::size_t> out;
  for (const auto& r : rows) ++out[r.call];
  return out;
}

std::string compare_call(const TimedSide& o, const TimedSide& n, const CompareOptions& options,
                         double* ratio, double* noise) {
  *ratio = o.timed() && n.timed() ? n.latency / o.latency : 0;
  *noise = o.noise >= 0 && n.noise >= 0 ? std::sqrt(o.noise * o.noise + n.noise * n.noise) : -1;
  if (*ratio <= 0 || *noise < 0) return "unclear";
  double change = *ratio - 1;
  double band = options.sigmas * *noise;
  if (std::fabs(change) > band) return change > 0 ? "slower" : "faster";
  return band <= options.noise_limit ? "same" : "unclear";
}

CompareResult compare_verdicts(const std::vector<Verdict>& old_verdicts,
                               const std::vector<Verdict>& new_verdicts,
                               const CompareOptions& options) {
  std::vector<Keyed> olds = rows_of(old_verdicts, false);
  std::vector<Keyed> news = rows_of(new_verdicts, true);
  std::map<std::string, const Keyed*> old_by_key;
  for (const auto& k : olds) old_by_key[k.key] = &k;
  std::set<std::string> matched;
  CompareResult result;
  for (auto& k : news) {
    CompareRow row = k.row;
    auto it = old_by_key.find(k.key);
    const TimedSide& n = *row.new_side;
    if (it == old_by_key.end()) {
      row.call = "added";
      if (n.status != "PASSED" && options.fail_percent) row.regression = true;
      if (n.status != "PASSED") row.call = "failed";
    } else {
      matched.insert(k.key);
      row.old_side = it->second->row.old_side;
      const TimedSide& o = *row.old_side;
      if (n.status != "PASSED") {
        row.call = "failed";
        row.regression = options.fail_percent.has_value() && o.status == "PASSED";
        double r = 0, z = 0;
        compare_call(o, n, options, &r, &z);
        row.ratio = r;
        row.noise = z;
      } else {
        row.call = compare_call(o, n, options, &row.ratio, &row.noise);
        if (o.status != "PASSED" && row.call == "unclear" && !o.timed()) row.call = "fixed";
        row.regression = options.fail_percent && row.call == "slower" &&
                         (row.ratio - 1) * 100 > *options.fail_percent;
      }
    }
    result.regression = result.regression || row.regression;
    result.rows.push_back(std::move(row));
  }
  for (const auto& k : olds) {
    if (matched.count(k.key)) continue;
    CompareRow row = k.row;
    row.call = "removed";
    result.rows.push_back(std::move(row));
  }
  return result;
}

std::string to_markdown(const CompareResult& result, const std::string& old_name,
                        const std::string& new_name) {
  std::string out =
      fmt::format("## kharness compare: `{}` → `{}`\n\n", md_cell(old_name), md_cell(new_name));
  std::vector<std::string> summary;
  for (const auto& [call, n] : result.counts()) summary.push_back(fmt::format("{} {}", n, call));
  out += (summary.empty() ? std::string("no rows") : join(summary, ", ")) +
         (result.regression ? " — **regression**" : "") + "\n\n";
  out += "| solution | definition | workload | old | new | ratio | noise | call |\n";
  out += "|---|---|---|---:|---:|---:|---:|---|\n";
  for (const auto& r : result.rows) {
    std::string workload = r.workload.empty() ? "-" : r.workload.substr(0, 8);
    std::string axes = axes_text(r.axes);
    if (!axes.empty()) workload += " " + axes;
    std::string call = r.call;
    if (r.regression) call = "**" + call + " (regression)**";
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(r.solution), md_cell(r.definition),
        md_cell(workload), format_latency(r.old_side), format_latency(r.new_side),
        r.ratio > 0 ? fmt::format("{:.3f}x", r.ratio) : std::string("-"),
        r.noise >= 0 && r.ratio > 0 ? fmt::format("±{:.2f}%", 100 * r.noise) : std::string("-"),
        call);
  }
  return out;
}

json to_json(const CompareResult& result, const std::string& old_name, const std::string& new_name,
             const CompareOptions& options) {
  auto side = [](const std::optional<TimedSide>& s) -> json {
    if (!s) return nullptr;
    json j = {{"status", s->status}, {"count", s->count}};
    j["latency"] = s->timed() ? json(s->latency) : json(nullptr);
    j["noise"] = s->noise >= 0 ? json(s->noise) : json(nullptr);
    return j;
  };
  json rows = json::array();
  for (const auto& r : result.rows) {
    rows.push_back({{"solution", r.solution},
                    {"definition", r.definition},
                    {"workload", r.workload},
                    {"axes", r.axes},
                    {"old", side(r.old_side)},
                    {"new", side(r.new_side)},
                    {"ratio", r.ratio > 0 ? json(r.ratio) : json(nullptr)},
                    {"noise", r.noise >= 0 && r.ratio > 0 ? json(r.noise) : json(nullptr)},
                    {"call", r.call},
                    {"regression", r.regression}});
  }
  json summary = json::object();
  for (const auto& [call, n] : result.counts()) summary[call] = n;
  json opts = {{"sigmas", options.sigmas}, {"noise_limit", options.noise_limit}};
  opts["fail_on_regression"] = options.fail_percent ? json(*options.fail_percent) : json(nullptr);
  return {{"schema", "kharness.compare/1"},
          {"old", old_name},
          {"new", new_name},
          {"options", opts},
          {"summary", summary},
          {"regression", result.regression},
          {"rows", rows}};
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string to_csv(const std::vector<Verdict>& verdicts) {
  const std::vector<std::string> header = {"solution",     "source",
                                           "definition",   "status",
                                           "suspect",      "workload",
                                           "axes",         "workload_status",
                                           "failure_kind", "failure_message",
                                           "latency_s",    "noise",
                                           "samples",      "baseline_latency_s",
                                           "speedup",      "sol_fraction"};
  std::string out;
  auto line = [&](const std::vector<std::string>& fields) {
    std::vector<std::string> quoted;
    // Names and messages are the submissions': no cell is a formula or carries a control code.
    for (const auto& f : fields) quoted.push_back(csv_field(spreadsheet_safe(f)));
    out += join(quoted, ",") + "\r\n";
  };
  // A figure, or "" where there is none (or it is not finite: unknown).
  auto num = [](bool known, double v) -> std::string {
    return known && std::isfinite(v) ? fmt::format("{:.9g}", v) : "";
  };
  line(header);
  for (const auto& v : verdicts) {
    std::string status(status_name(v.status));
    auto base = [&]() -> std::vector<std::string> {
      return {display_name(v), v.source, v.definition, status, v.suspect};
    };
    if (v.workloads.empty()) {
      auto f = base();
      f.insert(f.end(), {"", "", "", v.failure ? v.failure->kind : "",
                         v.failure ? v.failure->message : "", "", "", "", "", "", ""});
      line(f);
      continue;
    }
    for (const auto& w : v.workloads) {
      auto f = base();
      const Failure* failure = w.failure ? &*w.failure : (w.suspect ? &*w.suspect : nullptr);
      const TimingResult& t = w.timing;
      const bool c = t.candidate.has_value();
      f.insert(f.end(),
               {w.uuid, axes_text(w.axes), std::string(status_name(w.status)),
                failure ? failure->kind : "", failure ? failure->message : "",
                num(c, c ? t.candidate->latency : 0), num(c, c ? t.candidate->stats.noise : 0),
                num(c, c ? static_cast<double>(t.candidate->stats.count) : 0),
                num(t.baseline.has_value(), t.baseline ? t.baseline->latency : 0),
                num(t.speedup.has_value(), t.speedup.value_or(0)),
                num(t.sol.has_value(), t.sol ? t.sol->fraction : 0)});
      line(f);
    }
  }
  return out;
}

}  // namespace kharness::report
