#include "verify/worker_protocol.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/json_util.hpp"
#include "device/gpu_lock.hpp"
#include "kharness/error.hpp"
#include "kharness/sandbox.hpp"

namespace kharness::verify {

using nlohmann::json;

ProtocolStream::ProtocolStream() {
  // Kernels' printf goes to fd 1; keep the protocol on a private copy of stdout and send fd 1 to
  // stderr, which the parent captures (bounded).
  const int protocol_fd = ::dup(1);
  ::dup2(2, 1);
  out_ = ::fdopen(protocol_fd, "w");
  // A crashing kernel must not leave core files behind.
  struct rlimit no_core {
    0, 0
  };
  ::setrlimit(RLIMIT_CORE, &no_core);
  // The parent enforces this worker's time limit and reads its answer: when the parent dies
  // (killed, or Ctrl-C, which does not reach the worker's own process group), the worker dies too,
  // instead of evaluating on for nobody while holding the GPU lock (exclusively, while it times).
  // (No check that the parent is still the one that spawned it: a kharness running as PID 1 in a
  // container, or a KHARNESS_WORKER_WRAPPER tool between the two, makes any such test wrong; a
  // parent dying in the microseconds before this line leaves a worker that ends at its request's
  // end of file.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
}

ProtocolStream::~ProtocolStream() {
  if (out_ != nullptr) std::fclose(out_);
}

void ProtocolStream::write_locked(const json& event) {
  if (out_ == nullptr) return;
  const std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

void ProtocolStream::emit(const json& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_locked(event);
}

void ProtocolStream::emit_and_exit(const json& event, int code) {
  mutex_.lock();  // never unlocked: the process ends holding it
  write_locked(event);
  ::_exit(code);
}

std::unique_ptr<device::Watchdog> ProtocolStream::watch_launches(double limit_seconds) {
  if (!(limit_seconds > 0)) return nullptr;
  return std::make_unique<device::Watchdog>(limit_seconds, [this](const device::Hang& hang) {
    emit_and_exit(device::to_json(hang), device::kHangExitCode);
  });
}

namespace {

// The end of a worker whose error line is out: _exit, not return. Returning would run the
// destructors of what `before_request` began, and a GPU set-up still in flight on another thread
// (pipeline/worker.cpp's GpuSetup: a wait for the shared GPU lock behind another process's timing,
// then a context) would be joined first, so that the parent, which waits for this process's exit,
// would hear of a prompt error (a request that does not load, a candidate that does not compile)
// only minutes later. The kernel frees the lock and the context with the process, as for a worker
// killed at its limit.
[[noreturn]] void exit_after_error(int code) {
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

int serve_worker(const std::string& name, const WorkerWork& work,
                 const std::function<void()>& before_request) {
  ProtocolStream protocol;
  auto error_line = [&](int code, const std::string& where, const std::string& message) {
    protocol.emit({{"event", "error"}, {"code", code}, {"where", where}, {"message", message}});
  };
  try {
    if (before_request) before_request();
    const std::string input((std::istreambuf_iterator<char>(std::cin)),
                            std::istreambuf_iterator<char>());
    // Closed without a request (WorkerProcess::close): nothing to answer. _exit, not return: a GPU
    // set-up still in flight on another thread (cuInit, the context) is not waited for. This
    // process has loaded no module and launched nothing; the kernel frees its context, made or
    // half-made, and any lock it holds with the process, as for a worker killed at its time limit.
    if (input.empty()) ::_exit(0);
    const json request = json_util::parse_or_discarded(input);
    if (request.is_discarded()) throw Error(ExitCode::kInternal, name, "the request is not JSON");
    if (request.is_object() && request.value("verbose", false))
      spdlog::set_level(spdlog::level::debug);
    work(request, protocol);
    return 0;
  } catch (const Error& e) {
    error_line(static_cast<int>(e.code()), e.where(), e.what());
    exit_after_error(static_cast<int>(e.code()));
  } catch (const std::exception& e) {
    error_line(4, name, e.what());
  }
  exit_after_error(4);
}

namespace {

// CUDA_VISIBLE_DEVICES for a worker on `g`: its UUID (which names it whatever the parent's own
// CUDA_VISIBLE_DEVICES says), else its entry of the parent's list, else its ordinal.
std::string visible_devices_for(const GpuInfo& g) {
  if (!g.uuid.empty()) return g.uuid;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::vector<std::string> entries(1);
    for (const char* c = visible; *c; ++c) {
      if (*c == ',') {
        entries.emplace_back();
      } else if (*c != ' ') {
        entries.back() += *c;
      }
    }
    if (g.index >= 0 && static_cast<std::size_t>(g.index) < entries.size())
      return entries[static_cast<std::size_t>(g.index)];
  }
  return std::to_string(g.index);
}

// The failure of a worker stopped by its launch watchdog.
Failure hang_failure(const CheckRequest& request, const json& hang, const std::string& running) {
  const double limit = hang.value("limit_seconds", request.launch_timeout_seconds);
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

// How a worker is spawned: under KHARNESS_WORKER_WRAPPER, in the scrubbed environment with the
// GPU lock folder and, for a pool's worker, its one GPU.
SubprocessOptions worker_options(const WorkerCall& call) {
  SubprocessOptions sub;
  // KHARNESS_WORKER_WRAPPER="compute-sanitizer --tool memcheck" runs the worker under a tool.
  sub.argv = worker_argv(call.subcommand);
  sub.timeout_seconds = call.timeout_seconds;
  // Only what the driver, the toolkit and kharness's settings need: no API keys.
  sub.inherit_environment = false;
  sub.env = sandbox::scrubbed_environment();
  auto set = [&](const std::string& name, const std::string& value) {
    sub.env.erase(std::remove_if(sub.env.begin(), sub.env.end(),
                                 [&](const auto& kv) { return kv.first == name; }),
                  sub.env.end());
    sub.env.emplace_back(name, value);
  };
  // The parent's lock folder, whatever the worker's own settings would make of it (it takes the
  // lock before its request comes).
  set("KHARNESS_LOCK_DIR", device::gpu_lock_dir().string());
  if (call.gpu) set("CUDA_VISIBLE_DEVICES", visible_devices_for(*call.gpu));
  return sub;
}

}  // namespace

bool WorkerReply::finished() const { return !hang && !process.timed_out && process.exit_code == 0; }

WorkerReply call_worker(const WorkerCall& call) {
  WorkerProcess worker(call);
  return worker.send(call.request);
}

WorkerProcess::WorkerProcess(const WorkerCall& call)
    : name_(call.name), process_(worker_options(call)) {}

WorkerProcess::~WorkerProcess() { close(); }

WorkerReply WorkerProcess::send(const nlohmann::json& request) {
  if (done_) throw std::logic_error("WorkerProcess: sent or closed already");
  done_ = true;
  return read_reply(process_.finish(json_util::dump(request)), name_);
}

void WorkerProcess::close() noexcept {
  if (done_) return;
  done_ = true;
  try {
    const SubprocessResult r = process_.close(kWorkerCloseSeconds);
    spdlog::debug("{}: closed without a request after {:.3f} s: {}", name_, r.input_seconds,
                  r.describe());
  } catch (const std::exception& e) {
    // Nothing may leave a destructor; the Subprocess's own destructor still kills and reaps.
    spdlog::debug("{}: closing: {}", name_, e.what());
  }
}

WorkerReply read_reply(SubprocessResult process, const std::string& name) {
  // One JSON line per event; take what arrived, even from a worker that died.
  WorkerReply reply;
  std::istringstream lines(process.stdout_data);
  for (std::string line; std::getline(lines, line);) {
    json event = json_util::parse_or_discarded(line);
    if (event.is_discarded() || !event.is_object()) {
      spdlog::debug("{}: not a protocol line: {}", name, line.substr(0, 200));
      continue;
    }
    const std::string type = event.value("event", "");
    if (type == "error") {
      throw Error(static_cast<ExitCode>(event.value("code", 4)), event.value("where", name),
                  event.value("message", fmt::format("the {} failed", name)));
    }
    if (type == "hang") {
      reply.hang = std::move(event);
    } else {
      reply.events.push_back(std::move(event));
    }
  }
  reply.process = std::move(process);
  return reply;
}

Verdict verdict_from_worker(const CheckRequest& request, Verdict verdict,
                            const SubprocessResult& r) {
  return verdict_from_worker(request, std::move(verdict), read_reply(r, "worker"));
}

Verdict verdict_from_worker(const CheckRequest& request, Verdict verdict,
                            const WorkerReply& reply) {
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
        fmt::format("no verdict within {:.0f} s{}", request.timeout_seconds,
                    running.empty() ? "" : fmt::format(" (workload {} was running)", running)),
        {{"timeout_seconds", request.timeout_seconds}}};
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

}  // namespace kharness::verify
