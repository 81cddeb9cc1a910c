// kharness model-check --model NAME|FILE --phase decode|prefill [--layers N] [--use OP=SOLUTION]...
// [--time] [--json FILE] [--markdown FILE] [--html FILE]: a model's layers with the references,
// then with solutions substituted, compared on the final hidden state under the model's tolerance
// (kharness/model_check.hpp); with --time, the layer timed end to end against the baseline layer.
// The layers run in a worker process, so a substituted kernel that crashes or hangs is a verdict
// (RUNTIME_ERROR, TIMEOUT: exit 1), as in `check`.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "core/json_util.hpp"
#include "kharness/model.hpp"
#include "kharness/model_check.hpp"
#include "kharness/report.hpp"
#include "kharness/status.hpp"

namespace kharness::cli {
namespace {

struct ModelCheckArgs {
  std::string model;
  std::string phase = "decode";
  int layers = 0;
  std::vector<std::string> use;
  std::string json_file;
  std::string markdown_file;
  std::string html_file;
  bool time = false;
  int timed_passes = 20;
  std::string arch;
  bool no_cache = false;
  double timeout = 1800;
  double launch_timeout = 10;
};

void print_timing(const model::LayerTiming& t) {
  std::printf(
      "    layer %.3f ms -> %.3f ms (%.3fx), median of %d passes; node times sum to "
      "%.1f%% / %.1f%% of the span%s\n",
      t.baseline_seconds * 1e3, t.seconds * 1e3, t.speedup, t.passes,
      t.baseline_seconds > 0 ? 100 * t.baseline_node_sum / t.baseline_seconds : 0.0,
      t.seconds > 0 ? 100 * t.node_sum / t.seconds : 0.0, t.sums_match ? "" : " (NOT within 5%)");
  for (const auto& n : t.nodes) {
    std::printf("      %-10s %-46s %8.3f ms -> %8.3f ms (%.2fx)  %5.1f%% -> %5.1f%%%s\n",
                n.node.c_str(), n.definition.c_str(), n.baseline_seconds * 1e3, n.seconds * 1e3,
                n.speedup, 100 * n.baseline_share, 100 * n.share, n.substituted ? "  *" : "");
  }
}

ExitCode run_model_check(const ModelCheckArgs& args, const GlobalOptions& global) {
  if (!args.json_file.empty()) check_output_file("--json", args.json_file);
  if (!args.markdown_file.empty()) check_output_file("--markdown", args.markdown_file);
  if (!args.html_file.empty()) check_output_file("--html", args.html_file);
  if (!(args.timeout > 0)) throw input_error("--timeout", "must be > 0 seconds");
  validate_launch_timeout(args.launch_timeout);
  OperatorRegistry registry = make_registry(global);
  model::Model m = model::load_model(model::find_model(args.model), registry);
  model::CheckOptions options;
  options.phase = args.phase;
  options.layers = args.layers;
  options.time = args.time;
  options.timed_passes = args.timed_passes;
  options.timeout_seconds = args.timeout;
  options.launch_timeout_seconds = args.launch_timeout;
  options.operators_dirs = global.operators_dirs;
  for (const auto& u : args.use) {
    auto eq = u.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == u.size())
      throw input_error("--use", fmt::format("'{}' is not OP=SOLUTION", u));
    std::string op = u.substr(0, eq);
    if (options.use.count(op)) throw input_error("--use " + op, "given twice");
    options.use[op] = u.substr(eq + 1);
  }
  // Every solution compiles in the sandbox (substituted ones may be anyone's), as for `check`.
  require_compile_sandbox("model-check");
  std::string arch = args.arch.empty() ? std::string() : resolve_arch(args.arch);
  options.compile = make_compile_options(arch, !args.no_cache);
  model::CheckResult result = model::check_model(m, options);

  const nlohmann::json verdict = model::to_json(result);
  if (!args.json_file.empty())
    write_output("--json", args.json_file, json_util::dump(verdict, 2) + "\n");
  if (!args.markdown_file.empty())
    write_output("--markdown", args.markdown_file, report::model_markdown(verdict, "verdict"));
  if (!args.html_file.empty()) {
    report::HtmlReport html;
    html.title = fmt::format("kharness model-check: {} {}", result.model, result.phase);
    html.layers = report::layer_timings(verdict, "verdict");
    write_output("--html", args.html_file, report::to_html(html));
  }
  const std::string outcome =
      result.passed ? "PASSED" : fmt::format("FAILED ({})", status_name(result.status));
  std::printf("%s %s, %d layers: %s\n", result.model.c_str(), result.phase.c_str(), result.layers,
              outcome.c_str());
  if (!result.error.empty()) std::printf("  %s\n", result.error.c_str());
  for (const auto& s : result.shapes) {
    if (s.layers.empty()) continue;
    const model::Deviation& h = s.layers.back().hidden;
    std::printf("  %-34s %s  max_rel_error %.3g  cosine %.6f  bias %+.3g\n", s.label.c_str(),
                s.passed ? "ok    " : "FAILED", h.max_rel_error, h.cosine, h.bias);
    if (!s.passed) std::printf("    %s\n", s.reason.c_str());
    if (s.timing) print_timing(*s.timing);
  }
  return result.passed ? ExitCode::kPassed : ExitCode::kFailed;
}

}  // namespace

Runner setup_model_check(CLI::App& app) {
  auto args = std::make_shared<ModelCheckArgs>();
  app.add_option("--model", args->model, "A model of models/ by name, or a model file")
      ->type_name("NAME|FILE")
      ->required();
  app.add_option("--phase", args->phase, "decode or prefill (default decode)")->type_name("PHASE");
  app.add_option("--layers", args->layers, "Layers to run (default: the model's count)")
      ->type_name("N")
      ->check(CLI::Range(1, 1024));
  app.add_option("--use", args->use,
                 "Run OP (a definition or a node of the model) with SOLUTION instead of its seed "
                 "(repeatable)")
      ->type_name("OP=SOLUTION");
  app.add_flag("--time", args->time,
               "Time the layer end to end (cold L2 per pass) against the baseline layer (seeds, "
               "else references): layer and kernel speedups, each node's share of the layer");
  app.add_option("--timed-passes", args->timed_passes,
                 "Timed passes of each layer with --time (default 20)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000));
  app.add_option("--json", args->json_file, "Write the verdict as JSON")->type_name("FILE");
  app.add_option("--markdown", args->markdown_file, "Write a Markdown summary of the verdict")
      ->type_name("FILE");
  app.add_option("--html", args->html_file,
                 "Write an HTML report (with --time: each shape's layer time by operator, "
                 "before and after)")
      ->type_name("FILE");
  app.add_option("--arch", args->arch, "NVRTC target (default: this GPU's)")->type_name("ARCH");
  app.add_flag("--no-cache", args->no_cache, "Compile even if the compile cache has a solution");
  app.add_option("--timeout", args->timeout,
                 fmt::format("Wall-clock limit of the whole check, compiles included (default {:g} "
                             "s): TIMEOUT after it",
                             args->timeout))
      ->type_name("SECONDS");
  add_launch_timeout_option(app, &args->launch_timeout);
  return [args](const GlobalOptions& global) { return run_model_check(*args, global); };
}

}  // namespace kharness::cli
