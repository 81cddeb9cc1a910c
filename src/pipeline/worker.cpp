// The evaluation worker (`kharness __worker`): one solution verified and then timed in a process
// of its own, on the GPU the parent chose (pipeline/worker_client.cpp spawns it and reads its
// protocol lines). Verification (verify/) and timing (bench/) are two stages this module runs in
// order, so neither stage depends on the other.
//
// The parent starts the worker before it compiles and sends the request once the compile is done,
// so the worker's start-up overlaps the compile: the GPU set-up (driver, context) begins before
// the request is read, and goes on while the request's solution and operator load; the GPU lock is
// taken once the request is in (GpuSetup says why).
// Phases in the verdict show the overlap: worker_request_wait (from the start to the request: the
// parent's compile), worker_context (the set-up, on its own thread), worker_load_compile,
// worker_ready_wait (what of the set-up the load did not hide, the lock's wait and a context made
// late included), worker_teardown and worker_run
// (from the request to the verdict line).
#include "pipeline/worker.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "bench/benchmark.hpp"
#include "device/driver.hpp"
#include "device/gpu_lock.hpp"
#include "device/watchdog.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "kharness/profile.hpp"
#include "kharness/verify.hpp"
#include "pipeline/request.hpp"
#include "worker/channel.hpp"

namespace kharness::pipeline {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The per-GPU lock (device/gpu_lock.hpp) in `mode`, on this process's device 0, in the folder the
// parent named (KHARNESS_LOCK_DIR: worker/channel.hpp). Adds its wait to `waited`.
std::unique_ptr<device::GpuLock> take_gpu_lock(device::GpuLock::Mode mode, double& waited) {
  auto lock =
      std::make_unique<device::GpuLock>(device::gpu_lock_dir(), device::gpu_lock_key(), mode);
  waited += lock->waited_seconds();
  // A lock folder that cannot be written costs the lock, not the evaluation: the worker's stderr
  // (kept in the verdict) says so.
  if (!lock->held()) spdlog::warn("no GPU lock ({}): timing unguarded", lock->problem());
  return lock;
}

// What the worker does on the GPU before it needs its request: the driver (cuInit) and the
// primary context, begun on a thread of its own as the process starts, so that it overlaps the
// parent's compile (the parent starts the worker first) and then this worker's load of the
// request. It holds no GPU lock while it waits for the request: a compile of any length (an
// adversarial one included) keeps no timing on this GPU waiting. The context is made under a
// shared lock held for its creation alone, and only where no other process holds or waits for the
// lock exclusive (a timing in flight or about to start); otherwise the worker makes it after the
// request, under the lock it takes then. Either way no context of this process is created while
// another process times. (Closed without a request, the process ends and the kernel frees the
// context with it, lock or no lock, as for a worker killed at its time limit.)
class GpuSetup {
 public:
  GpuSetup() : start_(Clock::now()), thread_([this] { run(); }) {}
  ~GpuSetup() {
    if (thread_.joinable()) thread_.join();
  }
  GpuSetup(const GpuSetup&) = delete;  // owns a thread that writes its members
  GpuSetup& operator=(const GpuSetup&) = delete;

  Clock::time_point started() const { return start_; }
  // Waits for the set-up; throws what the set-up threw (no GPU: exit 3; a driver failure).
  void wait() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

  // Null when the GPU was busy with another process's timing: made after the request.
  std::unique_ptr<device::PrimaryContext> context;
  double seconds = 0;    // the set-up's own time: cuInit, the lock's wait, the context
  double lock_wait = 0;  // of that, waiting for the lock (none: it only tries)

 private:
  void run() {
    try {
      device::GpuLock lock(device::gpu_lock_dir(), device::gpu_lock_key(),
                           device::GpuLock::Mode::kShared, device::GpuLock::Wait::kTry);
      lock_wait = lock.waited_seconds();
      // Busy: another process times (or is about to). A lock folder that cannot be written is no
      // lock at all: the worker's own lock, after the request, warns about it.
      if (!lock.busy()) context = std::make_unique<device::PrimaryContext>(0);
    } catch (...) {
      error_ = std::current_exception();
    }
    seconds = since(start_);
  }

  Clock::time_point start_;
  std::exception_ptr error_;
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace

int worker_main() {
  std::unique_ptr<GpuSetup> setup;  // begun before the request is read
  auto work = [&](const json& j, worker::ProtocolStream& protocol) {
    // One worker for every GPU task: a profile's request says so (profile/profile.cpp), as a
    // model-check's does (model/check_worker.cpp); each takes its own lock and context.
    const std::string task = j.value("task", "evaluate");
    if (task == "profile") return serve_profile(j, protocol);
    if (task == "model_check") return model::serve_model_check(j, protocol);
    const Clock::time_point request_time = Clock::now();
    auto emit = [&](const json& line) { protocol.emit(line); };
    const Request request = request_from_json(j);
    // A launch that does not finish ends this process in seconds, with a `hang` line.
    std::unique_ptr<device::Watchdog> watchdog =
        protocol.watch_launches(request.timeouts.launch_seconds);
    auto t0 = Clock::now();
    // The candidate and the reference: compile cache hits of the parent's compile, while the GPU
    // set-up goes on.
    verify::Loaded loaded = load_request(request);
    if (!loaded.candidate_compiled.ok())
      throw Error(ExitCode::kInternal, "worker", "the candidate does not compile");
    auto t1 = Clock::now();
    setup->wait();
    // The per-GPU lock (device/gpu_lock.hpp): shared from the request on, exclusive from the
    // timing phase on. Declared before the context, it is released after the context is gone: no
    // use of the GPU by this process (creating or tearing down a context, any launch) overlaps
    // another process's timing. The context is the set-up's, or made now when the GPU was busy.
    double lock_wait = setup->lock_wait;
    std::unique_ptr<device::GpuLock> gpu_held =
        take_gpu_lock(device::GpuLock::Mode::kShared, lock_wait);
    std::unique_ptr<device::PrimaryContext> context = std::move(setup->context);
    if (!context) context = std::make_unique<device::PrimaryContext>(0);
    context->make_current();
    auto t2 = Clock::now();
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
                                       request.check, sink);
    } else {
      v.solution = loaded.candidate.name;
      v.definition = loaded.op.definition.name;
      v.seed = request.check.seed;
    }
    if (request.mode != Mode::kCheck && v.passed()) {
      auto t3 = std::chrono::steady_clock::now();
      // The baseline the pipeline resolved (pipeline/request.hpp), compiled like the candidate:
      // the built-in cuBLASLt GEMM, a solution, or none (no speedup).
      bench::BenchOptions bench_options = request.bench;
      std::unique_ptr<Solution> baseline;
      std::unique_ptr<CompileResult> baseline_compiled;
      const Baseline& chosen = request.baseline;
      bench_options.baseline = chosen.kind != Baseline::Kind::kNone;
      bench_options.baseline_solution =
          chosen.kind == Baseline::Kind::kCublasLt ? "cublaslt" : chosen.solution.string();
      if (chosen.kind == Baseline::Kind::kCublasLt) {
        baseline = std::make_unique<Solution>();
        baseline->name = "cublaslt";
      } else if (chosen.kind == Baseline::Kind::kSolution) {
        baseline = std::make_unique<Solution>(load_solution(chosen.solution));
        baseline_compiled = std::make_unique<CompileResult>(compile_solution(
            *baseline, &loaded.op.definition, &loaded.op.workloads, compile_options(request)));
        if (!baseline_compiled->ok()) {
          throw Error(chosen.from_operator ? ExitCode::kInternal : ExitCode::kUsage,
                      chosen.solution.string(), "the baseline does not compile");
        }
      }
      verify::Compiled base{baseline.get(), baseline_compiled.get()};
      gpu_held.reset();  // a shared holder waiting to become exclusive would deadlock another
      gpu_held = take_gpu_lock(device::GpuLock::Mode::kExclusive, lock_wait);
      device::ActivityPhase phase("timing");
      bench::benchmark(loaded.op, {&loaded.reference, &loaded.reference_compiled},
                       {&loaded.candidate, &loaded.candidate_compiled}, baseline ? &base : nullptr,
                       request.check, bench_options, v);
      v.phases["timing"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
    }
    v.phases["worker_request_wait"] =
        std::chrono::duration<double>(request_time - setup->started()).count();
    v.phases["worker_load_compile"] = std::chrono::duration<double>(t1 - t0).count();
    v.phases["worker_context"] = setup->seconds;
    v.phases["worker_ready_wait"] = std::chrono::duration<double>(t2 - t1).count();
    v.phases["gpu_lock_wait"] = lock_wait;
    // The end, in the order the lock rule wants: the context (the last of this process's GPU
    // state: every module and buffer went with its stage), then the lock, then the verdict line
    // and _exit. Returning instead would run the exit handlers of the CUDA runtime, the driver and
    // CUPTI (finalised after timing) and every static destructor, with the lock already released;
    // they hold nothing the verdict needs, so the process ends without them. stdio is flushed
    // first: a kernel's printf output (fd 1, sent to stderr) is kept in the verdict.
    const Clock::time_point teardown = Clock::now();
    context.reset();
    gpu_held.reset();
    v.phases["worker_teardown"] = since(teardown);
    v.phases["worker_run"] = since(request_time);
    std::fflush(nullptr);
    // Under KHARNESS_WORKER_WRAPPER (compute-sanitizer: the memcheck step) the exit handlers run:
    // the tool around this process reports at its normal exit, and its report is the point.
    if (const char* wrapper = std::getenv("KHARNESS_WORKER_WRAPPER"); wrapper && *wrapper) {
      protocol.emit({{"event", "verdict"}, {"verdict", to_json(v)}});
      return;
    }
    protocol.emit_and_exit({{"event", "verdict"}, {"verdict", to_json(v)}}, 0);
  };
  return worker::serve_worker("worker", work, [&] { setup = std::make_unique<GpuSetup>(); });
}

}  // namespace kharness::pipeline
