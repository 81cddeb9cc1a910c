#include "pipeline/worker_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "kharness/version.hpp"
#include "pipeline/request.hpp"

namespace kharness::pipeline {
namespace {

using nlohmann::json;

// The compile result as a verdict records it: everything but the log, which can be long.
nlohmann::json compile_summary(const CompileResult& r) {
  nlohmann::json j = to_json(r);
  j.erase("log");
  return j;
}

// The verdict's record of the GPU the worker runs on (docs/verdicts.md#verdict-fields): name, UUID,
// PCI bus id, ordinal and clocks (NVML, when present) at the start of the evaluation.
json gpu_record(const GpuInfo& g) {
  json j = {{"gpu", g.name}, {"gpu_index", g.index}};
  auto put = [&](const char* key, const auto& value) {
    if (value) j[key] = *value;
  };
  if (!g.uuid.empty()) j["gpu_uuid"] = g.uuid;
  if (!g.pci_bus_id.empty()) j["gpu_pci_bus_id"] = g.pci_bus_id;
  put("sm_clock_mhz", g.sm_clock_mhz);
  put("memory_clock_mhz", g.memory_clock_mhz);
  put("max_sm_clock_mhz", g.max_sm_clock_mhz);
  put("max_memory_clock_mhz", g.max_memory_clock_mhz);
  return j;
}

// The failure of a worker stopped by its launch watchdog.
Failure hang_failure(const Request& request, const json& hang, const std::string& running) {
  const double limit = hang.value("limit_seconds", request.timeouts.launch_seconds);
  const std::string label = hang.value("label", "");
  const std::string call = hang.value("call", "");
  Failure f{"timeout",
            fmt::format("{} did not finish within {:g} s (launch watchdog{})",
                        label.empty() ? "a launch" : label, limit,
                        running.empty() ? "" : fmt::format("; workload {} was running", running)),
            {{"launch_timeout_seconds", limit},
             {"watchdog", true},
             {"label", label},
             {"call", call},
             {"waited_seconds", hang.value("seconds", 0.0)}}};
  return f;
}

}  // namespace

std::unique_ptr<worker::WorkerProcess> start_worker(const Request& request) {
  return std::make_unique<worker::WorkerProcess>(worker::WorkerCall{
      "__worker", "worker", json(), worker_timeout_seconds(request), request.candidate.gpu});
}

GpuInfo evaluation_gpu(const Request& request, const EnvironmentReport& env) {
  // The probe's record where it lists the request's GPU; the pool's record where it does not.
  GpuInfo gpu = env.gpus.at(0);
  if (const std::optional<GpuInfo>& asked = request.candidate.gpu) {
    gpu = *asked;
    for (const auto& g : env.gpus) {
      if (!asked->uuid.empty() && g.uuid == asked->uuid) gpu = g;
    }
  }
  read_clocks(gpu);  // fresh: the clocks at the start of this evaluation
  return gpu;
}

Verdict check_loaded(const Request& request, const verify::Loaded& loaded, Prepared prepared) {
  Verdict verdict;
  verdict.solution = loaded.candidate.name;
  verdict.source = request.candidate.solution.string();
  verdict.definition = loaded.op.definition.name;
  verdict.seed = request.check.seed;
  verdict.compile = compile_summary(loaded.candidate_compiled);
  if (!loaded.candidate_compiled.ok()) {
    const CompileResult& c = loaded.candidate_compiled;
    verdict.status = c.status;
    if (c.status == Status::kRejected && !c.violations.empty()) {
      const RuleViolation& v = c.violations[0];
      verdict.failure = Failure{v.rule, v.message, {{"file", v.file}, {"line", v.line}}};
    } else {
      std::string first = c.diagnostics.empty() ? c.log.substr(0, 300) : c.diagnostics[0].message;
      json evidence = json::object();
      if (!c.diagnostics.empty())
        evidence = {{"file", c.diagnostics[0].file}, {"line", c.diagnostics[0].line}};
      if (!c.limit.empty()) evidence["limit"] = c.limit;  // stopped at the compile sandbox's limit
      verdict.failure = Failure{"compile_error", first, evidence};
    }
    return verdict;
  }
  if (request.mode == Mode::kCompile) return verdict;  // --compile-only: what needs no GPU
  // Only now is a GPU needed.
  const EnvironmentReport env =
      prepared.environment ? std::move(*prepared.environment) : probe_environment();
  if (!env.gpu_ready()) {
    throw environment_error(
        fmt::format("{}; `kharness compile` checks a solution without one",
                    env.driver.available ? "no CUDA device visible" : env.driver.reason));
  }
  // The GPU of this evaluation with its clocks at the start of the evaluation.
  const GpuInfo gpu = prepared.gpu ? *prepared.gpu : evaluation_gpu(request, env);
  verdict.environment = gpu_record(gpu);
  verdict.environment.update(json{{"driver", env.driver.nvidia_version},
                                  {"cuda", cuda_version_string(env.driver.cuda_version)},
                                  {"nvrtc", env.nvrtc_version},
                                  {"kharness", fmt::format("{} ({})", kVersion, kGitCommit)}});
  if (!loaded.candidate_compiled.cutlass_version.empty())
    verdict.environment["cutlass"] = loaded.candidate_compiled.cutlass_version;

  std::unique_ptr<worker::WorkerProcess> worker =
      prepared.worker ? std::move(prepared.worker) : start_worker(request);
  return verdict_from_worker(request, std::move(verdict), worker->send(request_json(request)));
}

Verdict verdict_from_worker(const Request& request, Verdict verdict, const SubprocessResult& r) {
  return verdict_from_worker(request, std::move(verdict), worker::read_reply(r, "worker"));
}

Verdict verdict_from_worker(const Request& request, Verdict verdict,
                            const worker::WorkerReply& reply) {
  const SubprocessResult& r = reply.process;
  verdict.worker_stderr = r.stderr_data;
  verdict.worker_stderr_truncated = r.stderr_truncated;
  // What the evaluation waited for: the worker from its request to its end (a worker started
  // early ran input_seconds before, overlapping the parent's compile).
  const double waited = std::max(0.0, r.seconds - r.input_seconds);
  verdict.seconds = waited;

  std::string running;  // the workload in flight when the worker stopped
  std::optional<Verdict> final_verdict;
  for (const json& event : reply.events) {
    const std::string type = event.value("event", "");
    if (type == "started") {
      running = event.value("workload", "");
    } else if (type == "workload") {
      verdict.workloads.push_back(workload_verdict_from_json(event.at("result")));
      running.clear();
    } else if (type == "verdict") {
      final_verdict = verdict_from_json(event.at("verdict"));
    }
  }
  if (final_verdict && reply.finished()) {
    Verdict v = std::move(*final_verdict);
    v.compile = verdict.compile;
    v.environment = verdict.environment;
    v.worker_stderr = verdict.worker_stderr;
    v.worker_stderr_truncated = verdict.worker_stderr_truncated;
    v.phases["worker_process"] = waited;
    if (r.input_seconds > 0) v.phases["worker_head_start"] = r.input_seconds;
    // The worker's time from its request to its verdict line is worker_run; the rest of the wait
    // is the request's way in and the worker's exit after its verdict line.
    if (auto run = v.phases.find("worker_run"); run != v.phases.end())
      v.phases["worker_exit"] = std::max(0.0, waited - run->second);
    v.seconds = verdict.seconds;
    v.source = verdict.source;
    return v;
  }
  // The worker did not finish: a hang (TIMEOUT: its launch watchdog, or the whole-worker limit) or
  // a crash (RUNTIME_ERROR).
  Failure failure;
  if (reply.hang) {
    verdict.status = Status::kTimeout;
    failure = hang_failure(request, *reply.hang, running);
  } else if (r.timed_out) {
    verdict.status = Status::kTimeout;
    failure = Failure{
        "timeout",
        fmt::format("no verdict within {:.0f} s{}", worker_timeout_seconds(request),
                    running.empty() ? "" : fmt::format(" (workload {} was running)", running)),
        {{"timeout_seconds", worker_timeout_seconds(request)}}};
  } else {
    verdict.status = Status::kRuntimeError;
    failure = Failure{
        "worker_crashed",
        fmt::format("the worker {}{}", r.describe(),
                    running.empty() ? "" : fmt::format(" while running workload {}", running)),
        {{"worker", r.describe()}}};
  }
  if (!running.empty()) {
    failure.evidence["workload"] = running;
    WorkloadVerdict wv;
    wv.uuid = running;
    wv.status = verdict.status;
    wv.failure = failure;
    verdict.workloads.push_back(std::move(wv));
  }
  verdict.failure = failure;
  // An earlier workload's failure is the more useful first line.
  for (const auto& w : verdict.workloads) {
    if (w.status != Status::kPassed && w.uuid != running) {
      verdict.status = w.status;
      verdict.failure = w.failure;
      break;
    }
  }
  return verdict;
}

}  // namespace kharness::pipeline
