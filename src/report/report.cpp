// Report writers (see include/kharness/report.hpp). Everything here reads verdicts and returns
// text; nothing prints or writes files.
#include "kharness/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>

#include "kharness/sanitize.hpp"
#include "kharness/status.hpp"
#include "kharness/text.hpp"

namespace kharness::report {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Reading verdicts

std::string display_name(const Verdict& v) { return v.solution.empty() ? v.source : v.solution; }

std::string axes_text(const json& axes) {
  if (!axes.is_object() || axes.empty()) return "";
  std::string out;
  for (auto it = axes.begin(); it != axes.end(); ++it) {
    if (!out.empty()) out += ' ';
    out += it.key() + "=" +
           (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  return out;
}

// A finite-or-not number at j[k0][k1]...; nullopt when any step is missing or not a number.
std::optional<double> number_at(const json& j, std::initializer_list<const char*> path) {
  const json* node = &j;
  for (const char* key : path) {
    if (!node->is_object()) return std::nullopt;
    auto it = node->find(key);
    if (it == node->end()) return std::nullopt;
    node = &*it;
  }
  if (!node->is_number()) return std::nullopt;
  return node->get<double>();
}

// A figure of a verdict when it is known: a non-finite one is written as null, which reads as
// none.
std::optional<double> known(std::optional<double> v) {
  return v && std::isfinite(*v) ? v : std::nullopt;
}

bool workload_failed(const WorkloadVerdict& w) { return w.status != Status::kPassed; }

double workload_seconds(const WorkloadVerdict& w) {
  double s = 0.0;
  for (const auto& t : w.trials) s += t.seconds;
  return s + known(w.timing.seconds).value_or(0.0);
}

std::optional<double> speedup_of(const WorkloadVerdict& w) { return known(w.timing.speedup); }
std::optional<double> latency_of(const WorkloadVerdict& w) {
  return w.timing.candidate ? known(w.timing.candidate->latency) : std::nullopt;
}
std::optional<double> sol_fraction_of(const WorkloadVerdict& w) {
  return w.timing.sol ? known(w.timing.sol->fraction) : std::nullopt;
}

// A failure to show for a workload or solution that failed without naming why.
Failure failure_or_status(const std::optional<Failure>& failure, Status status) {
  if (failure) return *failure;
  Failure f;
  f.kind = std::string(status_name(status));
  std::transform(f.kind.begin(), f.kind.end(), f.kind.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  f.message = std::string(status_name(status));
  return f;
}

// Mean and geometric-mean speedup and mean SOL fraction of a solution: the verdict's own score
// when the timing stage wrote one, else computed from its passing, timed workloads.
struct Score {
  std::optional<double> mean_speedup, geomean_speedup, mean_sol;
  int passed = 0;
  int total = 0;
};

Score score_of(const Verdict& v) {
  Score s;
  s.total = static_cast<int>(v.workloads.size());
  double sum = 0, log_sum = 0, sol_sum = 0;
  int n = 0, n_sol = 0;
  for (const auto& w : v.workloads) {
    if (workload_failed(w)) continue;
    ++s.passed;
    if (auto sp = speedup_of(w); sp && *sp > 0) {
      sum += *sp;
      log_sum += std::log(*sp);
      ++n;
    }
    if (auto f = sol_fraction_of(w)) {
      sol_sum += *f;
      ++n_sol;
    }
  }
  if (n > 0) {
    s.mean_speedup = sum / n;
    s.geomean_speedup = std::exp(log_sum / n);
  }
  if (n_sol > 0) s.mean_sol = sol_sum / n_sol;
  if (auto m = known(v.score.mean_speedup)) s.mean_speedup = m;
  if (auto g = known(v.score.geomean_speedup)) s.geomean_speedup = g;
  if (auto f = known(v.score.mean_sol_fraction)) s.mean_sol = f;
  return s;
}

// The kind of the first failure: the solution's, else its first failed workload's; for a
// suspect PASSED verdict, "suspect: KIND".
std::string failure_kind(const Verdict& v) {
  if (v.passed()) return v.suspect.empty() ? "" : "suspect: " + v.suspect;
  if (v.failure) return v.failure->kind;
  for (const auto& w : v.workloads)
    if (workload_failed(w)) return failure_or_status(w.failure, w.status).kind;
  return failure_or_status(std::nullopt, v.status).kind;
}

// JSON text that never throws on bad UTF-8 (worker output, kernel names): bad bytes become U+FFFD.
std::string dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// ---------------------------------------------------------------------------------------------
// Text escaping

// Replaces bytes that are not well-formed UTF-8 with U+FFFD (an XML parser rejects them).
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (std::size_t len = utf8_sequence_length(s, i)) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string xml_attr(const std::string& s) { return xml_escape(s, true); }
std::string xml_text(const std::string& s) { return xml_escape(s, false); }

// One line: newlines and tabs become spaces.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

// A Markdown table cell: one line, control characters visible, '|' escaped, HTML specials as
// entities.
std::string md_cell(const std::string& raw) {
  std::string out;
  for (char c : printable_line(one_line(valid_utf8(raw)))) {
    switch (c) {
      case '|':
        out += "\\|";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// JUnit

struct Testcase {
  std::string classname, name;
  double seconds = 0.0;
  std::optional<Failure> failure;
  std::string failure_status;
  std::string system_err;
};

std::string render_testcase(const Testcase& tc) {
  std::string out = fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"",
                                xml_attr(tc.classname), xml_attr(tc.name), tc.seconds);
  if (!tc.failure && tc.system_err.empty()) return out + "/>\n";
  out += ">\n";
  if (tc.failure) {
    const Failure& f = *tc.failure;
    out += fmt::format("      <failure type=\"{}\" message=\"{}\">{}: {}\n{}</failure>\n",
                       xml_attr(f.kind), xml_attr(one_line(f.message)), xml_text(tc.failure_status),
                       xml_text(f.message), xml_text(dump(f.evidence, 2)));
  }
  if (!tc.system_err.empty())
    out += fmt::format("      <system-err>{}</system-err>\n", xml_text(tc.system_err));
  return out + "    </testcase>\n";
}

// ---------------------------------------------------------------------------------------------
// Traces

// Pydantic writes non-finite floats as "NaN" / "Infinity" (Correctness uses
// ser_json_inf_nan="strings").
json fib_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

std::string status_for_trace(Status s) {
  return s == Status::kRejected ? "COMPILE_ERROR" : std::string(status_name(s));
}

json fib_environment(const json& env) {
  std::string hardware;
  if (env.is_object()) {
    auto gpus = env.find("gpus");
    if (gpus != env.end() && gpus->is_array() && !gpus->empty() && (*gpus)[0].is_object())
      hardware = (*gpus)[0].value("name", "");
  }
  json libs = json::object();
  auto put = [&](const char* name, std::initializer_list<const char*> path) {
    const json* node = &env;
    for (const char* key : path) {
      if (!node->is_object() || !node->contains(key)) return;
      node = &(*node)[key];
    }
    if (node->is_null()) return;
    std::string value = node->is_string() ? node->get<std::string>() : node->dump();
    if (!value.empty()) libs[name] = value;
  };
  put("kharness", {"kharness_version"});
  put("cuda_runtime", {"runtime_version"});
  put("cuda_driver", {"driver", "cuda_version"});
  put("nvidia_driver", {"driver", "nvidia_version"});
  put("nvrtc", {"nvrtc_version"});
  put("cupti", {"cupti_api_version"});
  return {{"hardware", hardware.empty() ? "unknown" : hardware}, {"libs", libs}};
}

// Largest errors over every trial's comparisons; a failure's evidence when nothing was compared.
json fib_correctness(const WorkloadVerdict* w, const std::optional<Failure>& failure) {
  double abs_err = 0.0, rel_err = 0.0;
  bool compared = false;
  auto take = [](double& into, double v) {
    into = (std::isnan(into) || std::isnan(v)) ? NAN : std::max(into, v);
  };
  if (w) {
    for (const auto& t : w->trials)
      for (const auto& c : t.comparisons) {
        take(abs_err, c.max_abs_error);
        take(rel_err, c.max_rel_error);
        compared = true;
      }
  }
  if (!compared && failure) {
    abs_err = number_at(failure->evidence, {"max_abs_error"}).value_or(0.0);
    rel_err = number_at(failure->evidence, {"max_rel_error"}).value_or(0.0);
  }
  return {{"max_relative_error", fib_number(rel_err)}, {"max_absolute_error", fib_number(abs_err)}};
}

json fib_performance(const WorkloadVerdict* w) {
  double latency = 0, reference = 0, speedup = 0;
  if (w) {
    latency = latency_of(*w).value_or(0.0);
    reference = w->timing.baseline ? known(w->timing.baseline->latency).value_or(0.0) : 0.0;
    speedup = speedup_of(*w).value_or(0.0);
  }
  return {{"latency_ms", latency * 1e3},
          {"reference_latency_ms", reference * 1e3},
          {"speedup_factor", speedup}};
}

// `w` is null for a known workload the solution never reached; the solution's status stands.
json trace_line(const Verdict& v, const WorkloadVerdict* w, const json& workload,
                const std::string& timestamp) {
  Status status = w ? w->status : v.status;
  std::optional<Failure> failure =
      w ? (w->failure ? w->failure : (workload_failed(*w) ? v.failure : std::nullopt)) : v.failure;
  std::string log;
  if (status == Status::kRejected) log = "REJECTED";
  // FlashInfer-Bench has no suspect status, and ranks every PASSED trace: a workload timed faster
  // than light is written RUNTIME_ERROR, "SUSPECT" first in its log (like REJECTED above).
  if (w && w->suspect && status == Status::kPassed) {
    status = Status::kRuntimeError;
    failure = w->suspect;
    log = "SUSPECT";
  }
  if (status != Status::kPassed) {
    Failure f = failure_or_status(failure, status);
    log += (log.empty() ? "" : ": ") + f.kind + ": " + f.message;
    if (!v.worker_stderr.empty()) {
      std::string tail = v.worker_stderr.size() > 4000
                             ? v.worker_stderr.substr(v.worker_stderr.size() - 4000)
                             : v.worker_stderr;
      log += "\n" + tail;
    }
  } else if (!w || !latency_of(*w)) {
    log = "not timed: performance is zero";
  }
  // FlashInfer-Bench's evaluation has no field for it: the plan variant that ran goes in the log.
  if (w && !w->variant.empty()) {
    log += std::string(log.empty() ? "" : "\n") + "kharness variant: " + w->variant;
  }
  if (!v.suspect.empty() && !(w && w->suspect)) {
    const WorkloadVerdict* s = v.first_suspect();
    log += std::string(log.empty() ? "" : "\n") + "SUSPECT solution: " + v.suspect +
           (s ? " on workload " + s->uuid : std::string());
  }
  // FlashInfer-Bench's Evaluation validator: correctness for PASSED and INCORRECT_NUMERICAL
  // only, performance for PASSED only.
  json correctness = nullptr, performance = nullptr;
  if (status == Status::kPassed || status == Status::kIncorrectNumerical)
    correctness = fib_correctness(w, failure);
  if (status == Status::kPassed) performance = fib_performance(w);
  return {{"definition", v.definition},
          {"solution", display_name(v)},
          {"workload", workload},
          {"evaluation",
           {{"status", status_for_trace(status)},
            {"environment", fib_environment(v.environment)},
            {"timestamp", timestamp},
            {"log", log},
            {"correctness", correctness},
            {"performance", performance}}}};
}

struct KnownWorkload {
  std::string definition;  // empty: any
  json workload;           // {uuid, axes, inputs}
};

std::vector<KnownWorkload> known_workloads(const std::vector<json>& given) {
  std::vector<KnownWorkload> out;
  for (const auto& j : given) {
    if (!j.is_object()) continue;
    KnownWorkload k;
    if (j.contains("workload") && j["workload"].is_object()) {
      k.workload = j["workload"];
      if (j.contains("definition") && j["definition"].is_string())
        k.definition = j["definition"].get<std::string>();
    } else {
      k.workload = j;
    }
    if (!k.workload.contains("uuid") || !k.workload["uuid"].is_string()) continue;
    if (!k.workload.contains("axes")) k.workload["axes"] = json::object();
    if (!k.workload.contains("inputs")) k.workload["inputs"] = json::object();
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

std::string xml_escape(const std::string& raw, bool attribute) {
  std::string s = valid_utf8(raw);
  std::string out;
  out.reserve(s.size() + 16);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += attribute ? "&#10;" : "\n";
        break;
      case '\r':
        out += "&#13;";
        break;
      case '\t':
        out += attribute ? "&#9;" : "\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F)
          out += fmt::format("\\x{:02X}", c);
        else
          out += ch;
    }
  }
  return out;
}

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string to_junit(const std::vector<Verdict>& verdicts, const std::string& suite_name) {
  std::vector<Testcase> cases;
  for (const auto& v : verdicts) {
    bool any_failed_workload = false;
    bool stderr_shown = false;
    for (const auto& w : v.workloads) {
      Testcase tc;
      tc.classname = display_name(v);
      std::string axes = axes_text(w.axes);
      tc.name = axes.empty() ? w.uuid : w.uuid + " [" + axes + "]";
      tc.seconds = workload_seconds(w);
      if (workload_failed(w)) {
        any_failed_workload = true;
        tc.failure = failure_or_status(w.failure, w.status);
        tc.failure_status = std::string(status_name(w.status));
        if (!stderr_shown) tc.system_err = v.worker_stderr;
        stderr_shown = true;
      } else if (w.suspect) {
        // A failure, not a property: the CI gate (exit 1) and the report must agree.
        tc.failure = w.suspect;
        tc.failure_status = std::string(status_name(w.status)) + " but SUSPECT";
      }
      cases.push_back(std::move(tc));
    }
    if (!v.passed() && !any_failed_workload) {
      Testcase tc;
      tc.classname = display_name(v);
      tc.name = v.status == Status::kCompileError ? "compile" : "solution";
      double workloads = 0;
      for (const auto& w : v.workloads) workloads += workload_seconds(w);
      tc.seconds = std::max(0.0, v.seconds - workloads);
      tc.failure = failure_or_status(v.failure, v.status);
      tc.failure_status = std::string(status_name(v.status));
      tc.system_err = v.worker_stderr;
      cases.push_back(std::move(tc));
    }
    if (v.passed() && v.workloads.empty()) {
      // Passed without running a workload (--compile-only): one passing testcase, so that the
      // solution still shows in the CI report.
      Testcase tc;
      tc.classname = display_name(v);
      tc.name = "compile";
      tc.seconds = v.seconds;
      cases.push_back(std::move(tc));
    }
  }
  int failures = 0;
  double seconds = 0;
  for (const auto& tc : cases) {
    failures += tc.failure ? 1 : 0;
    seconds += tc.seconds;
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{:.6f}\">\n",
      xml_attr(suite_name), cases.size(), failures, seconds);
  out += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" "
      "time=\"{:.6f}\">\n",
      xml_attr(suite_name), cases.size(), failures, seconds);
  for (const auto& tc : cases) out += render_testcase(tc);
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string to_markdown(const std::vector<Verdict>& verdicts) {
  struct Row {
    const Verdict* v;
    Score s;
  };
  std::vector<Row> rows;
  for (const auto& v : verdicts) rows.push_back({&v, score_of(v)});
  // Clean passes, then suspect passes (timed faster than light), then failures.
  auto tier = [](const Verdict& v) { return v.clean_pass() ? 0 : v.passed() ? 1 : 2; };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (tier(*a.v) != tier(*b.v)) return tier(*a.v) < tier(*b.v);
    double sa = a.s.mean_speedup.value_or(-1.0), sb = b.s.mean_speedup.value_or(-1.0);
    if (sa != sb) return sa > sb;
    return display_name(*a.v) < display_name(*b.v);
  });
  auto speed = [](const std::optional<double>& x) {
    return x ? fmt::format("{:.3f}x", *x) : std::string("-");
  };
  auto percent = [](const std::optional<double>& x) {
    return x ? fmt::format("{:.1f}%", 100 * *x) : std::string("-");
  };

  int passed = 0, suspect = 0;
  for (const auto& v : verdicts) {
    passed += v.clean_pass() ? 1 : 0;
    suspect += v.passed() && !v.clean_pass() ? 1 : 0;
  }
  std::string out = "## kharness leaderboard\n\n";
  out += fmt::format("{} solutions: {} passed, {} failed", verdicts.size(), passed,
                     verdicts.size() - passed - suspect);
  out += suspect ? fmt::format(", {} suspect.\n\n", suspect) : std::string(".\n\n");
  if (suspect) {
    out += fmt::format(
        "> **Warning:** {} solution{} PASSED but {} timed faster than light (below a physical "
        "lower bound: docs/timing.md#faster-than-light). {} ranked below every clean pass and "
        "left out of the best per workload.\n\n",
        suspect, suspect == 1 ? "" : "s", suspect == 1 ? "was" : "were",
        suspect == 1 ? "It is" : "They are");
  }
  out +=
      "| Rank | Solution | Status | Workloads passed | Mean speedup | Geomean speedup | Mean % SOL "
      "| Failure |\n";
  out += "|---:|---|---|---:|---:|---:|---:|---|\n";
  int rank = 0;
  for (const auto& r : rows) {
    std::string status(status_name(r.v->status));
    if (!r.v->suspect.empty()) status += " (SUSPECT)";
    out += fmt::format("| {} | {} | {} | {}/{} | {} | {} | {} | {} |\n", ++rank,
                       md_cell(display_name(*r.v)), status, r.s.passed, r.s.total,
                       speed(r.s.mean_speedup), speed(r.s.geomean_speedup), percent(r.s.mean_sol),
                       md_cell(failure_kind(*r.v)));
  }

  // Best passing solution per workload: highest speedup, else lowest latency, else first seen.
  struct Best {
    json axes;
    const Verdict* v = nullptr;
    const WorkloadVerdict* w = nullptr;
    int passing = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Best> best;
  for (const auto& v : verdicts) {
    for (const auto& w : v.workloads) {
      auto [it, inserted] = best.try_emplace(w.uuid);
      if (inserted) {
        order.push_back(w.uuid);
        it->second.axes = w.axes;
      }
      if (workload_failed(w) || !v.suspect.empty()) continue;
      Best& b = it->second;
      ++b.passing;
      bool better = b.w == nullptr;
      if (!better) {
        auto s_new = speedup_of(w), s_old = speedup_of(*b.w);
        auto l_new = latency_of(w), l_old = latency_of(*b.w);
        if (s_new && s_old)
          better = *s_new > *s_old;
        else if (s_new != s_old)
          better = s_new.has_value();
        else if (l_new && l_old)
          better = *l_new < *l_old;
        else
          better = l_new.has_value() && !l_old.has_value();
      }
      if (better) {
        b.v = &v;
        b.w = &w;
      }
    }
  }
  if (!order.empty()) {
    out += "\n### Best per workload\n\n";
    out += "| Workload | Axes | Best solution | Latency | Speedup | % SOL | Solutions passed |\n";
    out += "|---|---|---|---:|---:|---:|---:|\n";
    for (const auto& uuid : order) {
      const Best& b = best[uuid];
      if (!b.w) {
        out += fmt::format("| {} | {} | (none passed) | - | - | - | 0 |\n", md_cell(uuid),
                           md_cell(axes_text(b.axes)));
        continue;
      }
      auto latency = latency_of(*b.w);
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", md_cell(uuid),
                         md_cell(axes_text(b.axes)), md_cell(display_name(*b.v)),
                         latency ? fmt::format("{:.2f} us", *latency * 1e6) : "-",
                         speed(speedup_of(*b.w)), percent(sol_fraction_of(*b.w)), b.passing);
    }
  }
  return out;
}

// Field names follow flashinfer_bench/data/trace.py (Trace, Evaluation, Environment, Correctness,
// Performance, EvaluationStatus) and flashinfer_bench/data/workload.py (Workload: uuid, axes,
// inputs) of github.com/flashinfer-ai/flashinfer-bench.
std::string to_traces_jsonl(const std::vector<Verdict>& verdicts, const TraceOptions& options) {
  std::string timestamp = options.timestamp.empty() ? utc_now_iso8601() : options.timestamp;
  std::vector<KnownWorkload> known = known_workloads(options.workloads);
  std::map<std::string, const json*> known_by_uuid;
  for (const auto& k : known)
    known_by_uuid.emplace(k.workload["uuid"].get<std::string>(), &k.workload);

  std::string out;
  for (const auto& v : verdicts) {
    std::map<std::string, bool> seen;
    for (const auto& w : v.workloads) {
      seen[w.uuid] = true;
      json inputs = json::object();
      if (auto it = known_by_uuid.find(w.uuid); it != known_by_uuid.end())
        inputs = (*it->second)["inputs"];
      json workload = {{"uuid", w.uuid}, {"axes", w.axes}, {"inputs", inputs}};
      out += dump(trace_line(v, &w, workload, timestamp)) + "\n";
    }
    // Workloads a failed solution never reached carry the solution's own status.
    if (v.passed()) continue;
    for (const auto& k : known) {
      if (!k.definition.empty() && k.definition != v.definition) continue;
      std::string uuid = k.workload["uuid"].get<std::string>();
      if (seen[uuid]) continue;
      seen[uuid] = true;
      out += dump(trace_line(v, nullptr, k.workload, timestamp)) + "\n";
    }
  }
  return out;
}

json to_report_json(const std::vector<Verdict>& verdicts, const std::string& generated_at) {
  json solutions = json::array();
  int passed = 0, suspect = 0;
  for (const auto& v : verdicts) {
    solutions.push_back(kharness::to_json(v));
    passed += v.clean_pass() ? 1 : 0;
    suspect += v.passed() && !v.clean_pass() ? 1 : 0;
  }
  return {{"schema", "kharness.score/1"},
          {"generated_at", generated_at.empty() ? utc_now_iso8601() : generated_at},
          {"solutions", solutions},
          {"summary",
           {{"solutions", verdicts.size()},
            {"passed", passed},
            {"suspect", suspect},
            {"failed", static_cast<int>(verdicts.size()) - passed - suspect}}}};
}

}  // namespace kharness::report
