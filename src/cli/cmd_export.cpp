// kharness export SOLUTION --operator NAME --fib OUT.json [--name N] [--author A] [--arch ARCH]
// A FlashInfer-Bench Solution JSON with a host launcher generated from the plan
// (docs/operators.md#flashinfer-bench).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "core/json_util.hpp"
#include "kharness/export.hpp"
#include "kharness/sanitize.hpp"
#include "kharness/solution.hpp"

namespace kharness::cli {
namespace {

struct ExportArgs {
  std::string solution;
  std::string operator_name;
  std::string fib;
  std::string name;
  std::string author;
  std::string entry_symbol = "run";
  std::vector<std::string> target_hardware = {"cuda"};
  std::string arch;
  bool no_cache = false;
};

ExitCode run_export(const ExportArgs& args, const GlobalOptions& global) {
  if (std::filesystem::path(args.fib).filename() == "solution.json")
    throw input_error("--fib",
                      "a file named solution.json is a solution folder's manifest to "
                      "kharness; give the Solution JSON another name");
  check_output_file("--fib", args.fib);
  Solution solution = load_solution(args.solution);
  std::string op_name = args.operator_name.empty() ? solution.plan.definition : args.operator_name;
  if (op_name.empty())
    throw input_error("--operator",
                      "required: the plan names no definition, and a FlashInfer-Bench Solution "
                      "must name one");
  Operator op = make_registry(global).load(op_name);
  // The parameter sizes of the compiled kernels decide how the launcher passes each argument.
  std::string arch = resolve_arch(args.arch);
  require_compile_sandbox("export");  // the solution may be anyone's, as for `compile`
  CompileOptions options = make_compile_options(arch, !args.no_cache);
  CompileResult compiled = compile_solution(solution, &op.definition, &op.workloads, options);
  if (!compiled.ok()) {
    std::fputs(printable_text(render_compile_text(args.solution, compiled)).c_str(), stderr);
    throw Error(ExitCode::kFailed, args.solution,
                fmt::format("cannot export to FlashInfer-Bench: {} (see `kharness compile`)",
                            status_name(compiled.status)));
  }
  exchange::FibExportOptions o;
  o.name = args.name;
  if (o.name.empty()) {
    o.name = solution.form == SolutionForm::kSingleFile
                 ? fmt::format("{}_{}", op.definition.name, solution.name)
                 : solution.name;
  }
  o.author = args.author;
  o.entry_symbol = args.entry_symbol;
  o.target_hardware = args.target_hardware;
  o.arch = arch;
  o.cutlass_version = compiled.cutlass_version;
  o.cutlass_include_dir = compiled.cutlass_include_dir;
  if (!exchange::tvm_ffi_arch(arch).empty()) {
    // FlashInfer-Bench builds for the GPU's plain arch: whether the kernels need the
    // arch-specific one (wgmma, setmaxnreg, tcgen05) is whether they compile without it.
    CompileResult plain =
        compile_solution(solution, &op.definition, &op.workloads,
                         make_compile_options(arch.substr(0, arch.size() - 1), !args.no_cache));
    if (plain.status == Status::kCompileError) o.arch_specific = arch;
  }
  if (solution.form == SolutionForm::kSingleFile) {
    // The file's own name, not the path it was given by: FlashInfer-Bench writes sources by path.
    solution.sources[solution.entry].path =
        std::filesystem::path(solution.sources[solution.entry].path).filename().string();
  }
  exchange::FibExport exported =
      exchange::export_fib_solution(solution, op.definition, compiled.kernels, o);
  write_output("--fib", args.fib, exported.solution.dump(2) + "\n");
  // The round trip: what kharness reads back from the file is the plan it was given.
  Solution back = load_solution(args.fib);
  if (back.plan.raw != solution.plan.raw) {
    throw Error(ExitCode::kInternal, args.fib,
                "the exported solution does not read back as the same plan");
  }
  for (const auto& note : exported.notes) spdlog::warn("{}", note);
  std::printf("%s: FlashInfer-Bench Solution '%s' for %s (entry point %s, %zu sources)\n",
              args.fib.c_str(), exported.solution["name"].get<std::string>().c_str(),
              op.definition.name.c_str(),
              exported.solution["spec"]["entry_point"].get<std::string>().c_str(),
              exported.solution["sources"].size());
  return ExitCode::kPassed;
}

}  // namespace

Runner setup_export(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  add_solution_options(app, &args->solution, &args->operator_name);
  app.add_option("--fib", args->fib,
                 "Write a FlashInfer-Bench Solution JSON (CUDA, tvm-ffi, with a host launcher "
                 "generated from the plan)")
      ->type_name("FILE")
      ->required();
  app.add_option("--name", args->name,
                 "The Solution's name (default: OPERATOR_STEM for a .cu file, else the "
                 "solution's name)");
  app.add_option("--author", args->author, "The Solution's author (default: the solution's)");
  app.add_option("--entry-symbol", args->entry_symbol,
                 "The launcher's function name, after '::' in spec.entry_point (default run)");
  app.add_option("--target-hardware", args->target_hardware,
                 "spec.target_hardware entries (default cuda; repeatable or comma-separated)")
      ->delimiter(',');
  app.add_option("--arch", args->arch,
                 "Target kharness compiles for to read the kernels' parameters (default: this "
                 "GPU, else sm_90a)")
      ->type_name("ARCH");
  app.add_flag("--no-cache", args->no_cache, "Compile even if the compile cache has this solution");
  return [args](const GlobalOptions& global) { return run_export(*args, global); };
}

}  // namespace kharness::cli
