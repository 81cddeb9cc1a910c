// What the correctness, timing and profile stages load before anything runs: the solution, its
// operator and the operator's reference, both compiled. The parent process and its worker call it
// alike (the worker's compiles are cache hits of the parent's).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness::verify {

struct Loaded {
  Operator op;
  Solution candidate;
  Solution reference;
  CompileResult candidate_compiled;  // may have failed: the verdict says so
  CompileResult reference_compiled;  // compiled (or this throws)
};

// The operator is `operator_name`, else the plan's "definition". Throws kharness::Error: exit 2
// for no operator, an unknown one, an operator without a reference or with an unknown comparator;
// exit 4 when the reference does not compile (a kharness bug, not the solution's).
// `extra_workloads` (workload JSON: held-out shapes) join the operator's before anything compiles.
Loaded load_and_compile(const std::filesystem::path& solution, const std::string& operator_name,
                        const std::vector<std::filesystem::path>& operators_dirs,
                        const CompileOptions& options,
                        const std::vector<nlohmann::json>& extra_workloads = {});

}  // namespace kharness::verify
