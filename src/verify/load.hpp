// What the correctness, timing and profile stages load before anything runs: the solution, its
// operator and the operator's reference, both compiled. The parent process and its worker call it
// alike (the worker's compiles are cache hits of the parent's).
#pragma once

#include <filesystem>
#include <functional>
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

// The two halves of load_and_compile, for the pipeline (pipeline/evaluation.hpp), which keys the
// verdict cache on what is loaded and compiles only on a miss: load() takes the candidate as
// already parsed and compiles nothing (the CompileResults stay empty); compile() compiles the
// reference and the candidate, throwing as load_and_compile does when the reference fails.
//
// The two compiles run concurrently (each NVRTC compile is a sandboxed child process of its own;
// compile cache hits are file reads), and `alongside`, when given, runs on the calling thread
// meanwhile (the pipeline probes the environment and starts nothing on the GPU there). The outcome
// is the sequential one, whichever finishes first: the reference's failure or exception first,
// then what the candidate's compile threw, then what `alongside` threw.
Loaded load(Solution candidate, const std::string& operator_name,
            const std::vector<std::filesystem::path>& operators_dirs,
            const std::vector<nlohmann::json>& extra_workloads = {});
void compile(Loaded& loaded, const CompileOptions& options,
             const std::function<void()>& alongside = {});

}  // namespace kharness::verify
