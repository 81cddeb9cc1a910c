#include "worker/channel.hpp"

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

namespace kharness::worker {

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

}  // namespace kharness::worker
