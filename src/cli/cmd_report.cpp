// kharness runs | show CANDIDATE | report [RUN|--all] [--html F] [--operator NAME]: what the
// archive holds (docs/archive.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "bench/speed_of_light.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "kharness/archive.hpp"
#include "kharness/report.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

using nlohmann::json;

archive::Archive open_archive(const GlobalOptions& global) {
  std::filesystem::path dir =
      global.archive_dir.empty() ? archive::Archive::default_dir() : global.archive_dir;
  if (!std::filesystem::exists(dir / "index.sqlite"))
    throw input_error(dir.string(),
                      "no archive here (evaluate something first, or give --archive DIR)");
  return archive::Archive(dir);
}

std::string speedup_text(double s) { return s > 0 ? fmt::format("{:.3f}x", s) : "-"; }

// A candidate's speedup over its operator's baseline, "~" marking a run's estimate through the
// incumbent (docs/archive.md#speedups).
std::string operator_speedup_text(const archive::CandidateSummary& c) {
  return c.operator_speedup > 0 && c.operator_speedup_estimated
             ? "~" + speedup_text(c.operator_speedup)
             : speedup_text(c.operator_speedup);
}

std::string axes_text(const json& axes) {
  std::vector<std::string> parts;
  if (axes.is_object()) {
    for (auto it = axes.begin(); it != axes.end(); ++it)
      parts.push_back(fmt::format("{}={}", it.key(), json_util::dump(it.value())));
  }
  return join(parts, " ");
}

std::string candidates_table(const std::vector<archive::CandidateSummary>& list) {
  Table t({"  #", "candidate", "name", "operator", "status", "speedup", "% SOL", "note"});
  for (const auto& c : list) {
    std::string note = c.cached_from.empty() ? "" : "cached from " + c.cached_from;
    if (!c.failure_kind.empty()) note += (note.empty() ? "" : "; ") + c.failure_kind;
    t.add({"  " + std::to_string(c.seq), c.id, c.name, c.operator_name,
           c.status.empty() ? "-" : c.status, operator_speedup_text(c),
           c.status == "PASSED" && c.mean_sol_fraction > 0
               ? fmt::format("{:.1f}%", 100 * c.mean_sol_fraction)
               : "-",
           note});
  }
  return t.render();
}

std::string best_table(const std::vector<archive::CandidateSummary>& best) {
  if (best.empty()) return "no passing candidate yet\n";
  Table t({"operator", "best candidate", "name", "run", "speedup", "GPU"});
  for (const auto& c : best)
    t.add({c.operator_name, c.id, c.name, c.run_id, operator_speedup_text(c),
           c.gpu.empty() ? "-" : c.gpu});
  return t.render();
}

// ---------------------------------------------------------------------------------------------
// kharness runs

Runner setup_runs_impl(CLI::App& app) {
  auto json_out = std::make_shared<bool>(false);
  app.add_flag("--json", *json_out, "Print the runs as JSON");
  return [json_out](const GlobalOptions& global) {
    archive::Archive a = open_archive(global);
    auto runs = a.runs();
    if (*json_out) {
      json out = json::array();
      for (const auto& r : runs) {
        out.push_back({{"id", r.id},
                       {"started_at", r.started_at},
                       {"finished_at", r.finished_at},
                       {"state", r.state},
                       {"command", r.command},
                       {"operator", r.operator_name},
                       {"candidates", r.candidates},
                       {"passed", r.passed},
                       {"best_speedup", r.best_speedup}});
      }
      std::fputs((json_util::dump(out, 2) + "\n").c_str(), stdout);
      return ExitCode::kPassed;
    }
    if (runs.empty()) {
      std::printf("no runs in %s\n", a.dir().c_str());
      return ExitCode::kPassed;
    }
    Table t({"run", "started", "state", "command", "operator", "candidates", "passed", "best"});
    for (const auto& r : runs) {
      t.add({r.id, r.started_at, r.state, r.command,
             r.operator_name.empty() ? "-" : r.operator_name, std::to_string(r.candidates),
             std::to_string(r.passed), speedup_text(r.best_speedup)});
    }
    std::fputs(t.render().c_str(), stdout);
    return ExitCode::kPassed;
  };
}

// ---------------------------------------------------------------------------------------------
// kharness show

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A unified diff (3 lines of context) from the longest common subsequence of lines. Quadratic,
// which is fine for kernels; beyond 4000 lines a side it only says that the files differ.
std::string line_diff(const std::string& a_text, const std::string& b_text,
                      const std::string& a_name, const std::string& b_name) {
  if (a_text == b_text) return "";
  auto a = split_lines(a_text), b = split_lines(b_text);
  std::string out = fmt::format("--- {}\n+++ {}\n", a_name, b_name);
  if (a.size() > 4000 || b.size() > 4000) return out + "(files differ; too long to diff here)\n";
  std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (std::size_t i = n; i-- > 0;)
    for (std::size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  // The edit script: ' ', '-' or '+' with the line.
  std::vector<std::pair<char, std::string>> script;
  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      script.emplace_back(' ', a[i++]);
      ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      script.emplace_back('-', a[i++]);
    } else {
      script.emplace_back('+', b[j++]);
    }
  }
  // Hunks: changed lines with up to 3 lines of context around them.
  std::vector<bool> keep(script.size(), false);
  for (std::size_t k = 0; k < script.size(); ++k) {
    if (script[k].first == ' ') continue;
    for (std::size_t c = (k >= 3 ? k - 3 : 0); c <= std::min(script.size() - 1, k + 3); ++c)
      keep[c] = true;
  }
  std::size_t a_line = 1, b_line = 1;
  for (std::size_t k = 0; k < script.size();) {
    if (!keep[k]) {
      if (script[k].first != '+') ++a_line;
      if (script[k].first != '-') ++b_line;
      ++k;
      continue;
    }
    std::size_t end = k;
    int a_count = 0, b_count = 0;
    while (end < script.size() && keep[end]) {
      if (script[end].first != '+') ++a_count;
      if (script[end].first != '-') ++b_count;
      ++end;
    }
    out += fmt::format("@@ -{},{} +{},{} @@\n", a_line, a_count, b_line, b_count);
    for (; k < end; ++k) out += script[k].first + script[k].second + "\n";
    a_line += static_cast<std::size_t>(a_count);
    b_line += static_cast<std::size_t>(b_count);
  }
  return out;
}

std::string entry_source(const archive::CandidateRecord& r) {
  if (r.sources.empty()) return "";
  return r.sources[std::min(r.entry, r.sources.size() - 1)].content;
}

Runner setup_show_impl(CLI::App& app) {
  struct Args {
    std::string id;
    std::string against;
    bool source = false;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("candidate", args->id, "Candidate id or unique prefix (see `kharness report`)")
      ->required();
  app.add_option("--diff", args->against,
                 "Diff the source against this candidate (default: its parent)")
      ->type_name("CANDIDATE");
  app.add_flag("--source", args->source, "Print the candidate's source");
  app.add_flag("--json", args->json, "Print the candidate's summary and verdict as JSON");
  return [args](const GlobalOptions& global) {
    archive::Archive a = open_archive(global);
    archive::StoredCandidate c = a.load(args->id);
    const auto& s = c.summary;
    if (args->json) {
      json out = {{"id", s.id},
                  {"run", s.run_id},
                  {"seq", s.seq},
                  {"name", s.name},
                  {"operator", s.operator_name},
                  {"status", s.status},
                  {"parent", s.parent_id},
                  {"step", s.step},
                  {"origin", s.origin},
                  {"created_at", s.created_at},
                  {"cached_from", s.cached_from},
                  {"operator_speedup", s.operator_speedup > 0 ? json(s.operator_speedup) : json()},
                  {"operator_speedup_estimated", s.operator_speedup_estimated},
                  {"dir", s.dir.string()},
                  {"verdict", c.record.verdict ? to_json(*c.record.verdict) : json()}};
      std::fputs((json_util::dump(out, 2) + "\n").c_str(), stdout);
      return ExitCode::kPassed;
    }
    std::string out = fmt::format("candidate {} (#{} of run {})\n", s.id, s.seq, s.run_id);
    out += fmt::format("  name      {}\n  operator  {}\n  origin    {}\n  created   {}\n", s.name,
                       s.operator_name, s.origin, s.created_at);
    if (!s.parent_id.empty()) out += fmt::format("  parent    {}\n", s.parent_id);
    if (s.step >= 0) out += fmt::format("  step      {}\n", s.step);
    if (!s.cached_from.empty())
      out += fmt::format("  cached    verdict reused from {}\n", s.cached_from);
    out += fmt::format("  status    {}", s.status.empty() ? "-" : s.status);
    if (!s.failure_kind.empty()) out += fmt::format(" ({}): {}", s.failure_kind, s.failure_message);
    out += "\n";
    if (s.mean_speedup > 0) {
      const std::string over = c.record.verdict ? c.record.verdict->score.speedups_over : "";
      out += fmt::format("  speedup   {:.3f}x mean, {:.3f}x geomean over {}{}\n", s.mean_speedup,
                         s.geomean_speedup, over.empty() ? "the operator's baseline" : over,
                         s.mean_sol_fraction > 0
                             ? fmt::format(", {:.1f}% of speed-of-light", 100 * s.mean_sol_fraction)
                             : "");
    }
    if (s.operator_speedup > 0 && s.operator_speedup_estimated)
      out += fmt::format(
          "            {:.3f}x over the operator's baseline, estimated through the "
          "incumbent\n",
          s.operator_speedup);
    if (!c.record.usage.is_null())
      out += fmt::format("  usage     {}\n", json_util::dump(c.record.usage));
    out += fmt::format("  files     {}\n", s.dir.string());
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(s.dir, ec))
      files.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
    std::sort(files.begin(), files.end());
    out += "            " + join(files, " ") + "\n";
    if (c.record.verdict && !c.record.verdict->workloads.empty()) {
      Table t({"  workload", "axes", "status", "latency", "speedup", "% SOL", "failure"});
      for (const auto& w : c.record.verdict->workloads) {
        // A figure, or 0 where there is none (or it is not finite: written as null, unknown).
        auto num = [](bool known, double v) { return known && std::isfinite(v) ? v : 0.0; };
        const TimingResult& timing = w.timing;
        double latency =
            num(timing.candidate.has_value(), timing.candidate ? timing.candidate->latency : 0.0);
        double sol = num(timing.sol.has_value(), timing.sol ? timing.sol->fraction : 0.0);
        t.add({"  " + w.uuid.substr(0, 8), axes_text(w.axes), std::string(status_name(w.status)),
               latency > 0 ? fmt::format("{:.2f} us", latency * 1e6) : "-",
               speedup_text(num(timing.speedup.has_value(), timing.speedup.value_or(0.0))),
               sol > 0 ? fmt::format("{:.1f}%", 100 * sol) : "-",
               w.failure   ? w.failure->kind
               : w.suspect ? "suspect: " + w.suspect->kind
                           : ""});
      }
      out += t.render();
    }
    std::string against = args->against.empty() ? s.parent_id : args->against;
    if (!against.empty()) {
      archive::StoredCandidate other = a.load(against);
      std::string diff = line_diff(entry_source(other.record), entry_source(c.record),
                                   other.summary.id + "/source.cu", s.id + "/source.cu");
      out += diff.empty() ? fmt::format("source identical to {}\n", other.summary.id) : "\n" + diff;
    }
    if (args->source) out += "\n" + entry_source(c.record);
    std::fputs(out.c_str(), stdout);
    return ExitCode::kPassed;
  };
}

// ---------------------------------------------------------------------------------------------
// kharness report

std::string workload_label(const WorkloadVerdict& w) {
  std::string axes = axes_text(w.axes);
  return w.uuid.substr(0, 8) + (axes.empty() ? "" : " " + axes);
}

// The HTML data: runs with their candidates, per-workload results of each best candidate (with
// FLOPs and bytes from the operator's formulas, when it loads) and the roofs of their GPUs.
report::HtmlReport html_data(const archive::Archive& a,
                             const std::vector<archive::RunSummary>& runs,
                             const std::vector<archive::CandidateSummary>& best,
                             const std::string& operator_name, const GlobalOptions& global) {
  report::HtmlReport data;
  data.title = "kharness report";
  for (const auto& r : runs) {
    report::HtmlRun run{r.id, r.started_at, r.state, r.command, r.operator_name, {}};
    for (const auto& c : a.candidates(r.id, operator_name))
      run.candidates.push_back({c.id, c.seq, c.name,
                                c.clean_pass() || c.status != "PASSED" ? c.status : "SUSPECT",
                                c.operator_speedup, !c.cached_from.empty()});
    data.runs.push_back(std::move(run));
  }
  std::vector<bench::GpuSpec> specs;
  try {
    specs = bench::load_gpu_specs(data_dir() / "configs" / "gpus");
  } catch (const Error&) {
    // no roofs without the GPU specs
  }
  OperatorRegistry registry = make_registry(global);
  std::set<std::string> roofs_added;
  for (const auto& b : best) {
    report::HtmlBest hb{b.operator_name, b.id, b.name, b.gpu, b.operator_speedup, {}};
    archive::StoredCandidate stored = a.load(b.id);
    std::optional<Operator> op;
    try {
      op = registry.load(b.operator_name);
    } catch (const Error&) {
      // an operator no longer available: no FLOP counts for it
    }
    const bench::GpuSpec* spec = bench::match_gpu(specs, b.gpu);
    if (spec && op && !roofs_added.count(spec->match)) {
      std::string dtype = bench::compute_dtype(*spec, op->definition);
      auto peak = spec->peak_flops.find(dtype);
      if (peak != spec->peak_flops.end()) {
        data.roofs.push_back({spec->match, peak->second, dtype, spec->dram_bandwidth});
        roofs_added.insert(spec->match);
      }
    }
    if (stored.record.verdict) {
      for (const auto& w : stored.record.verdict->workloads) {
        if (!w.timing.speedup) continue;
        report::HtmlWorkload hw;
        hw.label = workload_label(w);
        hw.speedup = *w.timing.speedup;
        if (w.timing.sol) hw.sol_fraction = w.timing.sol->fraction;
        if (w.timing.candidate) hw.latency = w.timing.candidate->latency;
        if (op && (spec || !specs.empty())) {
          for (const auto& ow : op->workloads) {
            if (ow.uuid != w.uuid) continue;
            bench::SolEstimate e = bench::speed_of_light(spec ? *spec : specs[0], op->definition,
                                                         ow.bindings(op->definition), false);
            hw.flops = e.flops;
            hw.bytes = e.bytes;
          }
        }
        hb.workloads.push_back(hw);
      }
    }
    data.best.push_back(std::move(hb));
  }
  return data;
}

Runner setup_report_impl(CLI::App& app) {
  struct Args {
    std::string run;
    bool all = false;
    std::string html;
    std::string operator_name;
  };
  auto args = std::make_shared<Args>();
  app.add_option("run", args->run, "Run id or unique prefix (default: the newest run)")
      ->type_name("RUN");
  app.add_flag("--all", args->all, "Every run in the archive");
  app.add_option("--html", args->html, "Write a self-contained HTML report with charts")
      ->type_name("FILE");
  app.add_option("--operator", args->operator_name, "Only this operator's candidates")
      ->type_name("NAME");
  return [args](const GlobalOptions& global) {
    if (args->all && !args->run.empty())
      throw input_error("--all", "give either a run or --all, not both");
    archive::Archive a = open_archive(global);
    std::vector<archive::RunSummary> runs;
    if (args->all) {
      runs = a.runs();
      std::reverse(runs.begin(), runs.end());  // oldest first, like the archive grew
    } else if (!args->run.empty()) {
      auto r = a.find_run(args->run);
      if (!r) throw input_error(args->run, "no such run (see `kharness runs`)");
      runs.push_back(*r);
    } else {
      auto all = a.runs();
      if (!all.empty()) runs.push_back(all.front());
    }
    // The best per operator among the runs shown.
    std::map<std::string, archive::CandidateSummary> best;
    std::string out;
    for (const auto& r : runs) {
      auto list = a.candidates(r.id, args->operator_name);
      std::string what = r.command + (r.operator_name.empty() ? "" : " " + r.operator_name);
      out += fmt::format("run {} ({}, started {}, {}): {} candidate(s)\n", r.id, what, r.started_at,
                         r.state, list.size());
      if (!list.empty()) out += candidates_table(list);
      for (const auto& c : list) {
        if (!c.clean_pass()) continue;
        auto it = best.find(c.operator_name);
        if (it == best.end() || c.operator_speedup >= it->second.operator_speedup)
          best[c.operator_name] = c;
      }
    }
    std::vector<archive::CandidateSummary> best_list;
    for (auto& [name, c] : best) best_list.push_back(c);
    if (runs.empty()) out += fmt::format("no runs in {}\n", a.dir().string());
    out += "\nbest per operator:\n" + best_table(best_list);
    if (!args->html.empty()) {
      write_output("--html", args->html,
                   report::to_html(html_data(a, runs, best_list, args->operator_name, global)));
      out += fmt::format("wrote {}\n", args->html);
    }
    std::fputs(out.c_str(), stdout);
    return ExitCode::kPassed;
  };
}

// ---------------------------------------------------------------------------------------------
// kharness archive merge DEST SRC...

Runner setup_archive_impl(CLI::App& app) {
  struct Args {
    std::string dest;
    std::vector<std::string> sources;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  app.require_subcommand(1);
  CLI::App* merge = app.add_subcommand(
      "merge",
      "Join archives (runs, candidates, verdicts, files) into DEST, idempotently: what DEST "
      "already holds is never added twice (candidate ids and verdict-cache keys decide)");
  merge->add_option("dest", args->dest, "The archive to merge into (created when absent)")
      ->required()
      ->type_name("DEST");
  merge->add_option("sources", args->sources, "Archive folders to merge (each with index.sqlite)")
      ->required()
      ->type_name("SRC");
  merge->add_flag("--json", args->json, "Print what was merged as JSON");
  return [args](const GlobalOptions&) {
    std::vector<std::filesystem::path> sources(args->sources.begin(), args->sources.end());
    archive::MergeStats s = archive::Archive::merge(args->dest, sources);
    if (args->json) {
      json out = {{"schema", "kharness.merge/1"},
                  {"dest", args->dest},
                  {"sources", s.sources},
                  {"runs_added", s.runs_added},
                  {"candidates_added", s.candidates_added},
                  {"candidates_present", s.candidates_present},
                  {"verdicts_reused", s.verdicts_reused}};
      std::fputs((json_util::dump(out, 2) + "\n").c_str(), stdout);
    } else {
      std::printf(
          "merged %d archive(s) into %s: %d run(s) and %d candidate(s) added, %d already there, "
          "%d verdict(s) reused\n",
          s.sources, args->dest.c_str(), s.runs_added, s.candidates_added, s.candidates_present,
          s.verdicts_reused);
    }
    return ExitCode::kPassed;
  };
}

}  // namespace

Runner setup_archive(CLI::App& app) { return setup_archive_impl(app); }
Runner setup_runs(CLI::App& app) { return setup_runs_impl(app); }
Runner setup_show(CLI::App& app) { return setup_show_impl(app); }
Runner setup_report(CLI::App& app) { return setup_report_impl(app); }

}  // namespace kharness::cli
