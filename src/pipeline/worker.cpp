// The evaluation worker (`kharness __worker`): one solution verified and then timed in a process
// of its own, on the GPU the parent chose (verify/check.cpp spawns it and reads its protocol
// lines). Verification (verify/) and timing (bench/) are two stages this module runs in order, so
// neither stage depends on the other.
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "bench/benchmark.hpp"
#include "device/driver.hpp"
#include "device/gpu_lock.hpp"
#include "device/watchdog.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/verify.hpp"
#include "verify/request.hpp"
#include "verify/worker_protocol.hpp"

namespace kharness {

using nlohmann::json;

int worker_main() {
  return verify::serve_worker("worker", [](const json& j, verify::ProtocolStream& protocol) {
    auto emit = [&](const json& line) { protocol.emit(line); };
    CheckRequest request = verify::request_from_json(j);
    // A launch that does not finish ends this process in seconds, with a `hang` line.
    std::unique_ptr<device::Watchdog> watchdog =
        protocol.watch_launches(request.launch_timeout_seconds);
    auto t0 = std::chrono::steady_clock::now();
    verify::Loaded loaded = verify::load_request(request);
    if (!loaded.candidate_compiled.ok())
      throw Error(ExitCode::kInternal, "worker", "the candidate does not compile");
    auto t1 = std::chrono::steady_clock::now();
    // The per-GPU lock (device/gpu_lock.hpp): shared from before the context exists, exclusive
    // from the timing phase on. Declared before the context, it is released after the context is
    // gone: no use of the GPU by this process (creating or tearing down a context included)
    // overlaps another process's timing.
    const std::filesystem::path lock_dir = j.value("gpu_lock_dir", std::string());
    const std::string lock_key = device::gpu_lock_key();
    double lock_wait = 0;
    auto gpu_lock = [&](device::GpuLock::Mode mode) {
      auto lock = std::make_unique<device::GpuLock>(
          lock_dir.empty() ? device::gpu_lock_dir() : lock_dir, lock_key, mode);
      lock_wait += lock->waited_seconds();
      // A lock folder that cannot be written costs the lock, not the evaluation: the worker's
      // stderr (kept in the verdict) says so.
      if (!lock->held()) spdlog::warn("no GPU lock ({}): timing unguarded", lock->problem());
      return lock;
    };
    std::unique_ptr<device::GpuLock> gpu_held = gpu_lock(device::GpuLock::Mode::kShared);
    device::PrimaryContext context(0);
    auto t2 = std::chrono::steady_clock::now();
    verify::EvaluationSink sink;
    sink.started = [&](const std::string& uuid) {
      emit({{"event", "started"}, {"workload", uuid}});
    };
    sink.finished = [&](const WorkloadVerdict& w) {
      emit({{"event", "workload"}, {"result", to_json(w)}});
    };
    Verdict v;
    if (request.mode != Mode::kBench) {
      v = verify::evaluate_correctness(loaded.op, {&loaded.reference, &loaded.reference_compiled},
                                       {&loaded.candidate, &loaded.candidate_compiled},
                                       request.options, sink);
    } else {
      v.solution = loaded.candidate.name;
      v.definition = loaded.op.definition.name;
      v.seed = request.options.seed;
    }
    if (request.mode != Mode::kCheck && v.passed()) {
      auto t3 = std::chrono::steady_clock::now();
      bench::BenchOptions bench_options = request.bench;
      // The baseline, compiled like the candidate; an operator without one gets no speedup.
      std::unique_ptr<Solution> baseline;
      std::unique_ptr<CompileResult> baseline_compiled;
      // `--baseline cublaslt` (or a definition's "baseline": "cublaslt") times the built-in
      // cuBLASLt GEMM instead; `--baseline PATH` another solution.
      std::string chosen = bench_options.baseline_solution;
      if (chosen.empty() && loaded.op.definition.kharness.baseline == "cublaslt")
        chosen = "cublaslt";
      bench_options.baseline_solution = chosen;
      std::optional<std::filesystem::path> baseline_path =
          chosen.empty() ? loaded.op.baseline : std::optional<std::filesystem::path>(chosen);
      if (bench_options.baseline && chosen == "cublaslt") {
        baseline = std::make_unique<Solution>();
        baseline->name = "cublaslt";
      } else if (bench_options.baseline && baseline_path) {
        baseline = std::make_unique<Solution>(load_solution(*baseline_path));
        baseline_compiled = std::make_unique<CompileResult>(
            compile_solution(*baseline, &loaded.op.definition, &loaded.op.workloads,
                             verify::compile_options(request)));
        if (!baseline_compiled->ok()) {
          throw Error(chosen.empty() ? ExitCode::kInternal : ExitCode::kUsage,
                      baseline_path->string(), "the baseline does not compile");
        }
      }
      verify::Compiled base{baseline.get(), baseline_compiled.get()};
      gpu_held.reset();  // a shared holder waiting to become exclusive would deadlock another
      gpu_held = gpu_lock(device::GpuLock::Mode::kExclusive);
      device::ActivityPhase phase("timing");
      bench::benchmark(loaded.op, {&loaded.reference, &loaded.reference_compiled},
                       {&loaded.candidate, &loaded.candidate_compiled}, baseline ? &base : nullptr,
                       request.options, bench_options, v);
      v.phases["timing"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
    }
    v.phases["worker_load_compile"] = std::chrono::duration<double>(t1 - t0).count();
    v.phases["worker_context"] = std::chrono::duration<double>(t2 - t1).count();
    v.phases["gpu_lock_wait"] = lock_wait;
    emit({{"event", "verdict"}, {"verdict", to_json(v)}});
  });
}

}  // namespace kharness
