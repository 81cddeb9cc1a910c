// The parent's end of the evaluation worker (`kharness __worker`, pipeline/worker.cpp): started
// before the compile so that its start-up overlaps it, sent the request once the candidate
// compiled, and its reply turned into the verdict. The channel itself (spawning, the protocol's
// lines, the launch watchdog) is worker/channel.hpp, shared with the profile worker.
#pragma once

#include <memory>
#include <optional>

#include "kharness/device.hpp"
#include "kharness/verdict.hpp"
#include "pipeline/request.hpp"
#include "verify/load.hpp"
#include "worker/channel.hpp"

namespace kharness::pipeline {

// What the pipeline prepares for check_loaded while it compiles (pipeline/evaluation.cpp), so
// that none of it waits for the compile: the environment (probed once per invocation), the
// evaluation's GPU with its clocks read now, and the worker, started before the compile so that
// its start-up overlaps it.
struct Prepared {
  std::optional<EnvironmentReport> environment;   // nullopt: check_loaded probes
  std::optional<GpuInfo> gpu;                     // nullopt: check_loaded picks it (evaluation_gpu)
  std::unique_ptr<worker::WorkerProcess> worker;  // nullptr: check_loaded starts one
};

// The `__worker` of `request`, started now, before its request is ready (WorkerProcess): on the
// candidate's GPU, under the request's wall-clock limit (which counts from its request).
std::unique_ptr<worker::WorkerProcess> start_worker(const Request& request);
// The GPU `request` runs on as the verdict records it: the candidate's GPU as `env` lists it (found
// by UUID; the candidate's own record where `env` does not list it), else env's first GPU; its
// clocks read now. `env` must be gpu_ready().
GpuInfo evaluation_gpu(const Request& request, const EnvironmentReport& env);
// The verdict of a request whose solution, operator and reference are already loaded and
// compiled (the pipeline loads and compiles once per evaluation). What `prepared` lacks, it does
// itself; a prepared worker it does not need (the candidate does not compile, --compile-only, an
// error) is closed without a request. Never throws for a misbehaving candidate; throws Error for
// no GPU (exit 3) and an internal failure such as a failing reference (exit 4).
Verdict check_loaded(const Request& request, const verify::Loaded& loaded, Prepared prepared = {});

// The verdict of an evaluation worker's run: `verdict` holds what the parent knows before the run
// (solution, source, definition, seed, compile summary, environment) and gets the rest from the
// reply's events and how the worker ended (its final verdict, or TIMEOUT for a `hang` line or the
// whole-worker limit, or RUNTIME_ERROR for a crash, with the workload that was in flight).
Verdict verdict_from_worker(const Request& request, Verdict verdict,
                            const worker::WorkerReply& reply);
// The same from the worker's raw output (read_reply first: throws Error for an `error` line).
Verdict verdict_from_worker(const Request& request, Verdict verdict, const SubprocessResult& r);

}  // namespace kharness::pipeline
