// kharness check SOLUTION... --operator NAME [--workloads U,...] [--trials N] [--seed N] [--json]
// and the hidden worker mode it runs each solution in.
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

}  // namespace

Runner setup_check(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  app.add_option("solutions", args->solutions, "Solutions (.cu, folder or FlashInfer-Bench JSON); each in its own worker")
      ->required();
  app.add_option("--operator", args->operator_name, "Operator name or definition file (default: the plan's)")
      ->type_name("NAME");
  app.add_option("--workloads", args->workloads, "Only these workloads (uuids or prefixes; repeatable or comma-separated)")
      ->delimiter(',')
      ->type_name("UUID");
  app.add_option("--trials", args->trials, "Trials per workload, each with fresh inputs (default 3)");
  app.add_option("--seed", args->seed, "Base seed, to replay a verdict (default: random, printed)");
  app.add_option("--atol", args->atol, "Absolute tolerance (default: the definition's)");
  app.add_option("--rtol", args->rtol, "Relative tolerance (default: the definition's)");
  app.add_option("--required-matched-ratio", args->matched_ratio, "Fraction of elements that must match (default: the definition's)");
  app.add_option("--timeout", args->timeout, "Wall-clock limit per solution in seconds (default 60)");
  app.add_option("--arch", args->arch, "Target (default: this GPU)")->type_name("ARCH");
  app.add_flag("--no-cache", args->no_cache, "Bypass the compile cache");
  app.add_flag("--json", args->json, "Print verdicts as JSON");
  return [args](const GlobalOptions& global) { return run_check(*args, global); };
}

Runner setup_worker(CLI::App&) {
  return [](const GlobalOptions&) { return static_cast<ExitCode>(worker_main()); };
}

}  // namespace kharness::cli
