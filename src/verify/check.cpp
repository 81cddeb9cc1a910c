#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "device/driver.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "kharness/verify.hpp"
#include "kharness/version.hpp"
#include "verify/compare.hpp"
#include "verify/load.hpp"
#include "verify/request.hpp"
#include "verify/worker_protocol.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// The compile result as a verdict records it: everything but the log, which can be long.
nlohmann::json compile_summary(const CompileResult& r) {
  nlohmann::json j = to_json(r);
  j.erase("log");
  return j;
}

json request_json(const CheckRequest& r) {
  std::vector<std::string> dirs;
  for (const auto& d : r.operators_dirs) dirs.push_back(std::filesystem::absolute(d).string());
  return {{"solution", std::filesystem::absolute(r.solution).string()},
          {"operator", r.operator_name},
          {"operators_dirs", dirs},
          {"arch", r.arch},
          {"use_cache", r.use_cache},
          {"compile_cache_dir", r.compile_cache_dir.string()},
          {"options", r.options.to_json()},
          {"launch_timeout_seconds", r.launch_timeout_seconds},
          {"mode", std::string(name_of(r.mode))},
          {"bench", r.bench.to_json()},
          {"extra_workloads", r.extra_workloads}};
}

// The verdict's record of the GPU the worker runs on (DESIGN §4, §9): name, UUID, PCI bus id,
// ordinal and clocks (NVML, when present) at the start of the evaluation.
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

}  // namespace

namespace verify {

// The compile limit is part of the solution's --timeout: never above it.
CompileOptions compile_options(const CheckRequest& request) {
  CompileOptions options = make_compile_options(request.arch, request.use_cache);
  if (!request.compile_cache_dir.empty()) {
    options.cache_dir = request.compile_cache_dir;
    options.use_cache = true;
  }
  if (request.timeout_seconds > 0)
    options.limits.timeout_seconds =
        std::min(options.limits.timeout_seconds, request.timeout_seconds);
  return options;
}

Loaded load_request(const CheckRequest& request) {
  return load_and_compile(request.solution, request.operator_name, request.operators_dirs,
                          compile_options(request), request.extra_workloads);
}

CheckRequest request_from_json(const json& j) {
  CheckRequest r;
  r.solution = j.at("solution").get<std::string>();
  r.operator_name = j.value("operator", "");
  for (const auto& d : j.value("operators_dirs", std::vector<std::string>{}))
    r.operators_dirs.emplace_back(d);
  r.arch = j.at("arch").get<std::string>();
  r.use_cache = j.value("use_cache", true);
  r.compile_cache_dir = j.value("compile_cache_dir", "");
  r.options = CheckOptions::from_json(j.value("options", json::object()));
  r.launch_timeout_seconds = j.value("launch_timeout_seconds", r.launch_timeout_seconds);
  const std::string mode = j.value("mode", "check");
  const std::optional<Mode> parsed = parse_enum<Mode>(mode);
  if (!parsed) throw std::runtime_error("unknown mode '" + mode + "'");
  r.mode = *parsed;
  r.bench = bench::BenchOptions::from_json(j.value("bench", json::object()));
  r.extra_workloads = j.value("extra_workloads", std::vector<json>{});
  return r;
}

}  // namespace verify

Verdict check_solution(const CheckRequest& request) {
  verify::Loaded loaded = verify::load_request(request);
  return verify::check_loaded(request, loaded);
}

std::unique_ptr<verify::WorkerProcess> verify::start_worker(const CheckRequest& request) {
  return std::make_unique<WorkerProcess>(
      WorkerCall{"__worker", "worker", json(), request.timeout_seconds, request.gpu});
}

GpuInfo verify::evaluation_gpu(const CheckRequest& request, const EnvironmentReport& env) {
  // The probe's record where it lists the request's GPU; the pool's record where it does not.
  GpuInfo gpu = env.gpus.at(0);
  if (request.gpu) {
    gpu = *request.gpu;
    for (const auto& g : env.gpus) {
      if (!request.gpu->uuid.empty() && g.uuid == request.gpu->uuid) gpu = g;
    }
  }
  read_clocks(gpu);  // fresh: the clocks at the start of this evaluation
  return gpu;
}

Verdict verify::check_loaded(const CheckRequest& request, const Loaded& loaded, Prepared prepared) {
  Verdict verdict;
  verdict.solution = loaded.candidate.name;
  verdict.source = request.solution.string();
  verdict.definition = loaded.op.definition.name;
  verdict.seed = request.options.seed;
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

  std::unique_ptr<WorkerProcess> worker =
      prepared.worker ? std::move(prepared.worker) : start_worker(request);
  return verify::verdict_from_worker(request, std::move(verdict),
                                     worker->send(request_json(request)));
}

}  // namespace kharness
