// kharness tune-space OPERATOR [--sample N | --all] [--compile-only] [--out DIR] [--json]
// The knob space of an operator's parameterised seed (tune.json): its knobs, constraints and
// count of valid configurations; with --sample, the first N configurations the tune provider
// would propose (the defaults, a space-filling sample, then neighbours), optionally compiled.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/tune.hpp"

namespace kharness::cli {
namespace {

namespace fs = std::filesystem;

struct TuneSpaceArgs {
  std::string operator_name;
  std::string seed_file;
  std::string tune_file;
  int sample = 0;
  bool all = false;
  bool compile_only = false;
  std::string arch;
  std::string out;
  std::string rng_seed;  // empty: 0
  bool json = false;
  bool no_cache = false;
};

void print(const std::string& text) { std::fputs(text.c_str(), stdout); }

std::string values_text(const tune::Knob& k) {
  std::vector<std::string> parts;
  for (auto v : k.values) parts.push_back(std::to_string(v));
  return join(parts, " ");
}

nlohmann::json space_json(const tune::TuneProblem& p) {
  nlohmann::json knobs = nlohmann::json::array();
  for (const auto& k : p.space.knobs) {
    knobs.push_back({{"name", k.name},
                     {"values", k.values},
                     {"default", k.values[k.default_index]},
                     {"description", k.description}});
  }
  nlohmann::json constraints = nlohmann::json::array();
  for (const auto& c : p.space.constraints) constraints.push_back(c.expr.text());
  return {{"operator", p.operator_name},
          {"seed", p.seed_path.string()},
          {"tune_file", p.space.source},
          {"description", p.space.description},
          {"knobs", knobs},
          {"constraints", constraints},
          {"configurations", tune::product_size(p.space)},
          {"valid", p.valid.size()},
          {"workloads", p.axes.size()}};
}

std::string space_text(const tune::TuneProblem& p) {
  std::string out =
      fmt::format("{}: seed {}, knobs {}\n", p.operator_name, p.seed_path.string(), p.space.source);
  Table table({"knob", "values", "default", "description"});
  for (const auto& k : p.space.knobs) {
    table.add({k.name, values_text(k), std::to_string(k.values[k.default_index]), k.description});
  }
  out += table.render();
  if (!p.space.constraints.empty()) {
    out += "constraints:\n";
    for (const auto& c : p.space.constraints) out += "  " + c.expr.text() + "\n";
  }
  out += fmt::format("{} valid configurations of {} (checked against {} workloads)\n",
                     p.valid.size(), tune::product_size(p.space), p.axes.size());
  return out;
}

ExitCode run_tune_space(const TuneSpaceArgs& args, const GlobalOptions& global) {
  Operator op = make_registry(global).load(args.operator_name);
  op.seed = seed_for(op, resolve_arch(args.arch));
  tune::TuneProblem problem = tune::load_tune_problem(op, args.seed_file, args.tune_file);
  std::size_t count =
      args.all ? problem.valid.size()
               : std::min<std::size_t>(static_cast<std::size_t>(std::max(args.sample, 0)),
                                       problem.valid.size());
  if (count == 0) {
    print(args.json ? json_util::dump(space_json(problem), 2) + "\n" : space_text(problem));
    return ExitCode::kPassed;
  }

  tune::SearchOptions options;
  options.seed = args.rng_seed.empty() ? 0 : parse_seed_flag("--rng-seed", args.rng_seed);
  options.budget = static_cast<std::int64_t>(count);
  tune::Search search(problem.space, problem.valid, options);
  std::string arch = args.compile_only ? resolve_arch(args.arch) : "";
  // The seed's operator folder may come from elsewhere (--operators-dir): its configurations
  // compile in the file sandbox.
  if (args.compile_only) require_compile_sandbox("tune-space --compile-only");
  CompileOptions compile_options = make_compile_options(arch, !args.no_cache);
  if (!args.out.empty()) make_output_dir("--out", args.out);

  nlohmann::json rows = nlohmann::json::array();
  Table table(args.compile_only ? std::vector<std::string>{"#", "configuration", "status",
                                                           "registers", "spills", "seconds"}
                                : std::vector<std::string>{"#", "configuration"});
  std::size_t failed = 0;
  for (std::size_t n = 0; n < count; ++n) {
    auto index = search.next();
    if (!index) break;
    const tune::Config& config = search.valid()[*index];
    std::string name = fmt::format("{}_tune{:03}.cu", op.definition.name, n + 1);
    std::string text =
        tune::instantiate(problem.seed_text, problem.seed_path.string(), problem.space, config);
    nlohmann::json row = {{"config", tune::config_json(problem.space, config)}};
    if (!args.out.empty()) {
      fs::path file = fs::path(args.out) / name;
      write_output("--out", file, text);
      row["file"] = file.string();
    }
    std::vector<std::string> cells = {std::to_string(n + 1),
                                      tune::config_text(problem.space, config)};
    if (args.compile_only) {
      Solution solution = parse_single_file_solution(text, name);
      CompileResult r = compile_solution(solution, &op.definition, &op.workloads, compile_options);
      search.report(*index, r.ok() ? std::optional<double>(0.0) : std::nullopt);
      failed += r.ok() ? 0 : 1;
      row["status"] = std::string(status_name(r.status));
      std::string regs = "-", spills = "-";
      if (!r.kernels.empty()) {
        const KernelInfo& k = r.kernels.front();
        regs = k.registers >= 0 ? std::to_string(k.registers) : "-";
        spills = k.spill_store_bytes >= 0 ? fmt::format("{} B", k.spill_store_bytes) : "-";
        row["registers"] = k.registers;
        row["spill_store_bytes"] = k.spill_store_bytes;
      }
      cells.insert(cells.end(), {std::string(status_name(r.status)), regs, spills,
                                 fmt::format("{:.2f}", r.seconds)});
      if (!r.ok()) {
        row["log"] = r.log;
        if (!args.json) {
          print(render_compile_text(
              fmt::format("{} [{}]", name, tune::config_text(problem.space, config)), r));
        }
      }
    }
    table.add(std::move(cells));
    rows.push_back(std::move(row));
  }
  if (args.json) {
    nlohmann::json j = space_json(problem);
    j["schema"] = "kharness.tune-space/1";
    j["sample"] = rows;
    if (args.compile_only) j["arch"] = arch;
    print(json_util::dump(j, 2) + "\n");
  } else {
    print(space_text(problem));
    print(table.render());
    if (args.compile_only) {
      print(fmt::format("{} of {} configurations compile for {}\n", rows.size() - failed,
                        rows.size(), arch));
    }
    if (!args.out.empty()) print(fmt::format("candidates in {}\n", args.out));
  }
  return failed == 0 ? ExitCode::kPassed : ExitCode::kFailed;
}

}  // namespace

Runner setup_tune_space(CLI::App& app) {
  auto args = std::make_shared<TuneSpaceArgs>();
  app.add_option("operator", args->operator_name, "Operator name, definition file or folder")
      ->required();
  app.add_option("--seed-file", args->seed_file, "Tune this seed instead of the operator's")
      ->type_name("FILE");
  app.add_option("--tune-file", args->tune_file,
                 "The knob space (default: tune.json beside the seed)")
      ->type_name("FILE");
  auto* sample = app.add_option("--sample", args->sample,
                                "List the first N configurations the tune provider proposes")
                     ->type_name("N")
                     ->check(CLI::PositiveNumber);
  app.add_flag("--all", args->all, "Every valid configuration, in proposal order")
      ->excludes(sample);
  app.add_flag("--compile-only", args->compile_only,
               "Compile each listed configuration with NVRTC (exit 1 if one fails)");
  app.add_option("--arch", args->arch, "Compile target (default: this GPU, else sm_90a)")
      ->type_name("ARCH");
  app.add_option("--out", args->out, "Write each listed configuration's .cu file here")
      ->type_name("DIR");
  app.add_option("--rng-seed", args->rng_seed, "The search's random seed (default 0)")
      ->type_name("S");
  app.add_flag("--json", args->json, "Print the space (and the sample) as JSON");
  app.add_flag("--no-cache", args->no_cache, "Compile even if the compile cache has a candidate");
  return [args](const GlobalOptions& global) { return run_tune_space(*args, global); };
}

}  // namespace kharness::cli
