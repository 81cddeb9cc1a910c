#include "verify/load.hpp"

#include <fmt/format.h>

#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "verify/compare.hpp"

namespace kharness::verify {

Loaded load_and_compile(const std::filesystem::path& solution, const std::string& operator_name,
                        const std::vector<std::filesystem::path>& operators_dirs,
                        const CompileOptions& options,
                        const std::vector<nlohmann::json>& extra_workloads) {
  Solution candidate = load_solution(solution);
  std::string op_name = operator_name.empty() ? candidate.plan.definition : operator_name;
  if (op_name.empty()) {
    throw input_error(solution.string(),
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
  CompileResult ref = compile_solution(reference, &op.definition, &op.workloads, options);
  if (!ref.ok()) {
    std::string why = !ref.violations.empty()    ? ref.violations[0].message
                      : !ref.diagnostics.empty() ? ref.diagnostics[0].message
                                                 : ref.log.substr(0, 300);
    throw Error(
        ExitCode::kInternal, op.reference->string(),
        fmt::format("the operator's reference does not compile for {}: {}", options.arch, why));
  }
  CompileResult cand = compile_solution(candidate, &op.definition, &op.workloads, options);
  return Loaded{std::move(op), std::move(candidate), std::move(reference), std::move(cand),
                std::move(ref)};
}

}  // namespace kharness::verify
