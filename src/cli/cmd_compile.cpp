// kharness compile SOLUTION [--operator NAME] [--arch ARCH] [--out DIR] [--json] [--no-cache]
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "core/json_util.hpp"
#include "kharness/sanitize.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

struct CompileArgs {
  std::string solution;
  std::string operator_name;
  std::string arch;
  std::string out;
  bool json = false;
  bool no_cache = false;
};

void write_artifacts(const std::filesystem::path& dir, const CompileResult& r) {
  make_output_dir("--out", dir);
  write_output("--out", dir / "compile.log", r.log);
  if (!r.ptx.empty()) write_output("--out", dir / "kernel.ptx", r.ptx);
  if (!r.cubin.empty()) write_output("--out", dir / "kernel.cubin", r.cubin);
  write_output("--out", dir / "compile.json", json_util::dump(to_json(r), 2) + "\n");
}

ExitCode run_compile(const CompileArgs& args, const GlobalOptions& global) {
  Solution solution = load_solution(args.solution);
  std::string arch = resolve_arch(args.arch);
  std::string op_name = args.operator_name.empty() ? solution.plan.definition : args.operator_name;
  std::unique_ptr<Operator> op;
  if (!op_name.empty()) {
    op = std::make_unique<Operator>(make_registry(global).load(op_name));
    if (!solution.plan.definition.empty() && solution.plan.definition != op->definition.name) {
      spdlog::warn("{}: the plan names definition '{}', checking against '{}' as asked",
                   solution.plan_source, solution.plan.definition, op->definition.name);
    }
  } else {
    spdlog::warn(
        "{}: no operator (give --operator or \"definition\" in the plan): "
        "the plan's names and sizes are not checked",
        args.solution);
  }
  // The file compiled may be anyone's (a pull request's kernel): NVRTC runs in the file sandbox,
  // refused where Landlock is missing unless --allow-unsandboxed, as for `score`.
  require_compile_sandbox("compile");
  CompileOptions options = make_compile_options(arch, !args.no_cache);
  CompileResult result = compile_solution(solution, op ? &op->definition : nullptr,
                                          op ? &op->workloads : nullptr, options);
  if (!args.out.empty()) write_artifacts(args.out, result);
  if (args.json) {
    nlohmann::json j = to_json(result);
    j["schema"] = "kharness.compile/1";
    j["solution"] = args.solution;
    j["operator"] = op ? op->definition.name : "";
    if (!args.out.empty()) j["out"] = args.out;
    std::fputs((json_util::dump(j, 2) + "\n").c_str(), stdout);
  } else {
    std::string what =
        op ? fmt::format("{} [{}]", args.solution, op->definition.name) : args.solution;
    // Diagnostics quote the submission (#line file names, its text): made printable.
    std::fputs(printable_text(render_compile_text(what, result)).c_str(), stdout);
    if (!args.out.empty()) std::fputs(fmt::format("artifacts in {}\n", args.out).c_str(), stdout);
  }
  return result.ok() ? ExitCode::kPassed : ExitCode::kFailed;
}

}  // namespace

Runner setup_compile_worker(CLI::App&) {
  return [](const GlobalOptions&) { return static_cast<ExitCode>(compile_worker_main()); };
}

Runner setup_compile(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  add_solution_options(app, &args->solution, &args->operator_name);
  app.add_option("--arch", args->arch,
                 "Target: sm_80, sm_89, sm_90, sm_90a, sm_100a, sm_120, ... (default: this GPU, "
                 "else sm_90a)")
      ->type_name("ARCH");
  app.add_option("--out", args->out,
                 "Write kernel.ptx, kernel.cubin, compile.log and compile.json here")
      ->type_name("DIR");
  app.add_flag("--json", args->json, "Print the result as JSON");
  app.add_flag("--no-cache", args->no_cache, "Compile even if the compile cache has this solution");
  return [args](const GlobalOptions& global) { return run_compile(*args, global); };
}

}  // namespace kharness::cli
