// The worker's side of a check request (include/kharness/verify.hpp): the request as the parent
// sends it, and the solution and operator it names loaded and compiled under the request's limits.
// check.cpp is the parent; the worker that verifies and times (pipeline/worker.cpp) reads these.
#pragma once

#include <nlohmann/json.hpp>

#include "kharness/compile.hpp"
#include "kharness/verify.hpp"
#include "verify/load.hpp"

namespace kharness::verify {

CheckRequest request_from_json(const nlohmann::json& j);
// The request's compile options; the compile limit is never above the solution's --timeout.
CompileOptions compile_options(const CheckRequest& request);
// The candidate, the reference and the operator of the request, compiled.
Loaded load_request(const CheckRequest& request);
// check_solution() of a request whose solution, operator and reference are already loaded and
// compiled (pipeline/evaluation.hpp loads and compiles once per evaluation).
Verdict check_loaded(const CheckRequest& request, const Loaded& loaded);

}  // namespace kharness::verify
