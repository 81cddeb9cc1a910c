// kharness check SOLUTION... --operator NAME [--workloads U,...] [--trials N] [--seed N] [--json]
// and the hidden worker mode it runs each solution in.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "kharness/text.hpp"
#include "kharness/verify.hpp"

namespace kharness::cli {
namespace {

struct CheckArgs {
  std::string mode = "check";  // "check", "bench" or "validate"
  std::string timing = "adaptive";
  std::string timer = "cupti";
  double max_noise = 0.005;
  double max_time = 2.0;
  int warmup = 10, iterations = 50, num_trials = 3, input_sets = 2;
  bool no_baseline = false;
  std::vector<std::string> solutions;
  std::string operator_name;
  std::vector<std::string> workloads;
  int trials = 3;
  std::string seed;
  double atol = -1, rtol = -1, matched_ratio = -1;
  double timeout = 60;
  std::string arch;
  bool no_cache = false;
  bool json = false;
};

std::string number(double v) {
  if (v == 0) return "0";
  return fmt::format("{:.3g}", v);
}

std::string render_verdict(const Verdict& v, int verbosity) {
  std::string out = fmt::format("{} [{}]: {}", v.source, v.definition, status_name(v.status));
  if (v.failure) out += fmt::format(" ({}): {}", v.failure->kind, v.failure->message);
  out += "\n";
  if (!v.workloads.empty()) {
    Table table({"  workload", "axes", "status", "trials", "max abs err", "max rel err", "matched", "failure"});
    for (const auto& w : v.workloads) {
      std::vector<std::string> axes;
      for (auto it = w.axes.begin(); it != w.axes.end(); ++it) axes.push_back(fmt::format("{}={}", it.key(), it.value().dump()));
      double max_abs = 0, max_rel = 0, matched = 1;
      for (const auto& t : w.trials) {
        for (const auto& c : t.comparisons) {
          max_abs = std::max(max_abs, c.max_abs_error);
          max_rel = std::max(max_rel, c.max_rel_error);
          matched = std::min(matched, c.matched_ratio);
        }
      }
      bool compared = !w.trials.empty() && !w.trials[0].comparisons.empty();
      table.add({"  " + w.uuid.substr(0, 8), join(axes, " "), std::string(status_name(w.status)),
                 std::to_string(w.trials.size()), compared ? number(max_abs) : "-", compared ? number(max_rel) : "-",
                 compared ? fmt::format("{:.4f}", matched) : "-", w.failure ? w.failure->kind : ""});
    }
    out += table.render();
  }
  bool timed = std::any_of(v.workloads.begin(), v.workloads.end(),
                           [](const WorkloadVerdict& w) { return w.timing.contains("candidate"); });
  if (timed) {
    Table t({"  workload", "axes", "latency", "baseline", "speedup", "% SOL", "noise", "samples", "note"});
    auto us = [](const nlohmann::json& j) { return fmt::format("{:.2f} us", j.value("latency", 0.0) * 1e6); };
    for (const auto& w : v.workloads) {
      if (!w.timing.contains("candidate")) continue;
      const auto& c = w.timing["candidate"];
      std::vector<std::string> axes;
      for (auto it = w.axes.begin(); it != w.axes.end(); ++it) axes.push_back(fmt::format("{}={}", it.key(), it.value().dump()));
      std::string note;
      if (!c.value("noise_met", true)) note = "noise target not met";
      if (c.value("clock_flagged_samples", 0) > 0) note += (note.empty() ? "" : "; ") + fmt::format("{} samples at low SM clock", c.value("clock_flagged_samples", 0));
      t.add({"  " + w.uuid.substr(0, 8), join(axes, " "), us(c),
             w.timing.contains("baseline") ? us(w.timing["baseline"]) : "-",
             w.timing.contains("speedup") ? fmt::format("{:.3f}x", w.timing["speedup"].get<double>()) : "-",
             w.timing.contains("sol") ? fmt::format("{:.1f}%", 100 * w.timing["sol"].value("fraction", 0.0)) : "-",
             fmt::format("{:.2f}%", 100 * c.value("noise", 0.0)), std::to_string(c.value("count", 0)), note});
    }
    out += t.render();
    if (v.score.contains("mean_speedup")) {
      out += fmt::format("  score: mean speedup {:.3f}x, geomean {:.3f}x", v.score["mean_speedup"].get<double>(),
                         v.score["geomean_speedup"].get<double>());
      if (v.score.contains("mean_sol_fraction")) out += fmt::format(", mean {:.1f}% of speed-of-light", 100 * v.score["mean_sol_fraction"].get<double>());
      out += "\n";
    }
  }
  out += fmt::format("  seed {} (replay with --seed {}), {:.2f} s\n", v.seed, v.seed, v.seconds);
  if (!v.worker_stderr.empty() && (verbosity > 0 || !v.passed())) {
    std::string tail = v.worker_stderr.size() > 2000 ? "…" + v.worker_stderr.substr(v.worker_stderr.size() - 2000)
                                                     : v.worker_stderr;
    out += "  worker stderr:\n    " + tail + "\n";
  }
  return out;
}

ExitCode run_check(const CheckArgs& args, const GlobalOptions& global) {
  std::uint64_t seed = 0;
  if (args.seed.empty()) {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } else {
    try {
      std::size_t used = 0;
      seed = std::stoull(args.seed, &used, 0);
      if (used != args.seed.size()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw input_error("--seed", fmt::format("'{}' is not an unsigned integer", args.seed));
    }
  }
  if (args.trials < 1) throw input_error("--trials", "must be at least 1");
  if (args.input_sets < 2) throw input_error("--input-sets", "must be at least 2 (inputs rotate during timing)");
  if (args.max_noise <= 0) throw input_error("--max-noise", "must be > 0");
  std::string arch = resolve_arch(args.arch);
  nlohmann::json all = nlohmann::json::array();
  bool all_passed = true;
  for (const auto& path : args.solutions) {
    CheckRequest request;
    request.solution = path;
    request.operator_name = args.operator_name;
    request.operators_dirs = global.operators_dirs;
    request.arch = arch;
    request.use_cache = !args.no_cache;
    request.timeout_seconds = args.timeout;
    request.options.trials = args.trials;
    request.options.seed = seed;
    for (const auto& w : args.workloads) request.options.workloads.push_back(w);
    if (args.atol >= 0) request.options.atol = args.atol;
    if (args.rtol >= 0) request.options.rtol = args.rtol;
    if (args.matched_ratio >= 0) request.options.required_matched_ratio = args.matched_ratio;
    request.mode = args.mode;
    request.bench = {{"protocol", args.timing},     {"timer", args.timer},          {"warmup", args.warmup},
                     {"iterations", args.iterations}, {"trials", args.num_trials},  {"max_noise", args.max_noise},
                     {"max_seconds", args.max_time},  {"input_sets", args.input_sets}, {"baseline", !args.no_baseline}};
    Verdict v = check_solution(request);
    all_passed = all_passed && v.passed();
    if (args.json) {
      all.push_back(to_json(v));
    } else {
      std::fputs(render_verdict(v, global.verbosity).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (args.json) std::fputs(((args.solutions.size() == 1 ? all[0] : all).dump(2) + "\n").c_str(), stdout);
  return all_passed ? ExitCode::kPassed : ExitCode::kFailed;
}

// The options every mode shares, then the timing options for bench and validate.
Runner setup_mode(CLI::App& app, const std::string& mode) {
  auto args = std::make_shared<CheckArgs>();
  args->mode = mode;
  if (mode != "check") args->timeout = 300;
  app.add_option("solutions", args->solutions, "Solutions (.cu, folder or FlashInfer-Bench JSON); each in its own worker")
      ->required();
  app.add_option("--operator", args->operator_name, "Operator name or definition file (default: the plan's)")
      ->type_name("NAME");
  app.add_option("--workloads", args->workloads, "Only these workloads (uuids or prefixes; repeatable or comma-separated)")
      ->delimiter(',')
      ->type_name("UUID");
  app.add_option("--timeout", args->timeout, mode == "check" ? "Wall-clock limit per solution in seconds (default 60)"
                                                             : "Wall-clock limit per solution in seconds (default 300)");
  app.add_option("--seed", args->seed, "Base seed, to replay a verdict (default: random, printed)");
  app.add_option("--arch", args->arch, "Target (default: this GPU)")->type_name("ARCH");
  app.add_flag("--no-cache", args->no_cache, "Bypass the compile cache");
  app.add_flag("--json", args->json, "Print verdicts as JSON");
  if (mode != "bench") {
    app.add_option("--trials", args->trials, "Correctness trials per workload, each with fresh inputs (default 3)");
    app.add_option("--atol", args->atol, "Absolute tolerance (default: the definition's)");
    app.add_option("--rtol", args->rtol, "Relative tolerance (default: the definition's)");
    app.add_option("--required-matched-ratio", args->matched_ratio,
                   "Fraction of elements that must match (default: the definition's)");
  }
  if (mode != "check") {
    app.add_option("--timing", args->timing, "adaptive (stop at --max-noise) or official (FlashInfer-Bench's protocol)")
        ->check(CLI::IsMember({"adaptive", "official"}));
    app.add_option("--timer", args->timer, "cupti (default) or events (CUDA events, for comparison only)")
        ->check(CLI::IsMember({"cupti", "events"}));
    app.add_option("--max-noise", args->max_noise, "Adaptive: relative noise of the median to reach (default 0.005)");
    app.add_option("--max-time", args->max_time, "Adaptive: seconds per workload before giving up on the noise (default 2)");
    app.add_option("--warmup-runs", args->warmup, "Warmup iterations (default 10)");
    app.add_option("--iterations", args->iterations, "Official: timed iterations per trial (default 50)");
    app.add_option("--num-trials", args->num_trials, "Official: trials (default 3)");
    app.add_option("--input-sets", args->input_sets, "Input sets rotated during timing (default 2)");
    app.add_flag("--no-baseline", args->no_baseline, "Do not time the operator's baseline (no speedup)");
  }
  return [args](const GlobalOptions& global) { return run_check(*args, global); };
}

}  // namespace

Runner setup_check(CLI::App& app) { return setup_mode(app, "check"); }
Runner setup_bench(CLI::App& app) { return setup_mode(app, "bench"); }
Runner setup_validate(CLI::App& app) { return setup_mode(app, "validate"); }


Runner setup_worker(CLI::App&) {
  return [](const GlobalOptions&) { return static_cast<ExitCode>(worker_main()); };
}

}  // namespace kharness::cli
