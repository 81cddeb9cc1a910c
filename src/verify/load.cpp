#include "verify/load.hpp"

#include <fmt/format.h>

#include <exception>
#include <future>

#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "verify/compare.hpp"

namespace kharness::verify {

Loaded load(Solution candidate, const std::string& operator_name,
            const std::vector<std::filesystem::path>& operators_dirs,
            const std::vector<nlohmann::json>& extra_workloads) {
  std::string op_name = operator_name.empty() ? candidate.plan.definition : operator_name;
  if (op_name.empty()) {
    throw input_error(candidate.origin.empty() ? candidate.name : candidate.origin.string(),
                      "no operator: give --operator or \"definition\" in the plan");
  }
  Operator op = OperatorRegistry::from_environment(operators_dirs).load(op_name);
  for (std::size_t i = 0; i < extra_workloads.size(); ++i) {
    op.workloads.push_back(
        parse_workload(extra_workloads[i], op.definition, fmt::format("extra workload {}", i)));
  }
  if (!op.reference) {
    throw input_error(op.definition_file.string(),
                      fmt::format("no reference.cu for {} (nor for its family '{}')",
                                  op.definition.name, op.definition.family()));
  }
  if (!find_comparator(op.definition.kharness.comparator)) {
    throw input_error(
        op.definition_file.string() + ": kharness.comparator",
        fmt::format("unknown comparator '{}' (known: {})", op.definition.kharness.comparator,
                    join(comparator_names(), ", ")));
  }
  Solution reference = load_solution(*op.reference);
  return Loaded{std::move(op), std::move(candidate), std::move(reference), CompileResult{},
                CompileResult{}};
}

void compile(Loaded& loaded, const CompileOptions& options,
             const std::function<void()>& alongside) {
  const Operator& op = loaded.op;
  // std::async: each future's destructor waits, so nothing outlives `loaded` however this exits.
  auto compile_one = [&](const Solution& solution) {
    return std::async(std::launch::async, [&op, &options, &solution] {
      return compile_solution(solution, &op.definition, &op.workloads, options);
    });
  };
  std::future<CompileResult> reference = compile_one(loaded.reference);
  std::future<CompileResult> candidate = compile_one(loaded.candidate);
  std::exception_ptr alongside_error;
  if (alongside) {
    try {
      alongside();
    } catch (...) {
      alongside_error = std::current_exception();
    }
  }
  CompileResult ref = reference.get();
  if (!ref.ok()) {
    std::string why = !ref.violations.empty()    ? ref.violations[0].message
                      : !ref.diagnostics.empty() ? ref.diagnostics[0].message
                                                 : ref.log.substr(0, 300);
    throw Error(
        ExitCode::kInternal, op.reference->string(),
        fmt::format("the operator's reference does not compile for {}: {}", options.arch, why));
  }
  loaded.reference_compiled = std::move(ref);
  loaded.candidate_compiled = candidate.get();
  if (alongside_error) std::rethrow_exception(alongside_error);
}

Loaded load_and_compile(const std::filesystem::path& solution, const std::string& operator_name,
                        const std::vector<std::filesystem::path>& operators_dirs,
                        const CompileOptions& options,
                        const std::vector<nlohmann::json>& extra_workloads) {
  Loaded loaded = load(load_solution(solution), operator_name, operators_dirs, extra_workloads);
  compile(loaded, options);
  return loaded;
}

}  // namespace kharness::verify
