// The evaluation request on its way to the worker and back: the parent writes it as JSON
// (request_json), the worker (pipeline/worker.cpp) reads it (request_from_json), and both load and
// compile the solution and operator it names under the same limits (load_request), so that the
// worker's compile is a hit of the parent's compile cache.
#pragma once

#include <nlohmann/json.hpp>

#include "kharness/compile.hpp"
#include "kharness/verify.hpp"
#include "verify/load.hpp"

namespace kharness::pipeline {

nlohmann::json request_json(const CheckRequest& request);
CheckRequest request_from_json(const nlohmann::json& j);
// The request's compile options; the compile limit is never above the solution's --timeout.
CompileOptions compile_options(const CheckRequest& request);
// The candidate, the reference and the operator of the request, compiled.
verify::Loaded load_request(const CheckRequest& request);

}  // namespace kharness::pipeline
