// The worker's side of a check request (include/kharness/verify.hpp): the request as the parent
// sends it, and the solution and operator it names loaded and compiled under the request's limits.
// check.cpp is the parent; the worker that verifies and times (pipeline/worker.cpp) reads these.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/verify.hpp"
#include "verify/load.hpp"
#include "verify/worker_protocol.hpp"

namespace kharness::verify {

CheckRequest request_from_json(const nlohmann::json& j);
// The request's compile options; the compile limit is never above the solution's --timeout.
CompileOptions compile_options(const CheckRequest& request);
// The candidate, the reference and the operator of the request, compiled.
Loaded load_request(const CheckRequest& request);

// What the pipeline prepares for check_loaded while it compiles (pipeline/evaluation.cpp), so
// that none of it waits for the compile: the environment (probed once per invocation), the
// evaluation's GPU with its clocks read now, and the worker, started before the compile so that
// its start-up overlaps it.
struct Prepared {
  std::optional<EnvironmentReport> environment;  // nullopt: check_loaded probes
  std::optional<GpuInfo> gpu;                    // nullopt: check_loaded picks it (evaluation_gpu)
  std::unique_ptr<WorkerProcess> worker;         // nullptr: check_loaded starts one
};

// The `__worker` of `request`, started now, before its request is ready (WorkerProcess): on the
// request's GPU, under the request's wall-clock limit (which counts from its request).
std::unique_ptr<WorkerProcess> start_worker(const CheckRequest& request);
// The GPU `request` runs on as the verdict records it: the request's GPU as `env` lists it (found
// by UUID; the request's own record where `env` does not list it), else env's first GPU; its
// clocks read now. `env` must be gpu_ready().
GpuInfo evaluation_gpu(const CheckRequest& request, const EnvironmentReport& env);
// check_solution() of a request whose solution, operator and reference are already loaded and
// compiled (pipeline/evaluation.hpp loads and compiles once per evaluation). What `prepared`
// lacks, it does itself; a prepared worker it does not need (the candidate does not compile,
// --compile-only, an error) is closed without a request.
Verdict check_loaded(const CheckRequest& request, const Loaded& loaded, Prepared prepared = {});

}  // namespace kharness::verify
