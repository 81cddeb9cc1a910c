// The worker channel: both ends of the protocol between kharness and a worker process of its own
// (`kharness __worker`, which evaluates or profiles): the request as one JSON object on the
// worker's stdin, the answer as one JSON object a line on a private copy of its stdout.
//
// Worker end: serve_worker() is the whole of a worker's main: ProtocolStream sets the process up
// (the protocol on a copy of fd 1, fd 1 itself to stderr for kernels' printf, no core files) and
// writes lines from any thread; the request is read and handed to the worker's work; whatever the
// work throws becomes an {"event":"error"} line. Its launch watchdog writes {"event":"hang",...}
// and ends the process with device::kHangExitCode when a wait on the GPU outlasts the launch
// timeout (device/watchdog.hpp).
//
// An empty request (stdin closed with nothing written) is no error: the parent started the worker
// before its request was ready and needs it no more (a candidate that does not compile). The
// worker ends at once, status 0, no line.
//
// Parent end: call_worker() spawns the worker (a fresh exec, scrubbed environment, wall-clock
// limit, one GPU) and reads its lines back (an `error` line throws its Error); what the lines mean
// is the caller's (pipeline/worker_client.hpp: verdict_from_worker turns an evaluation worker's
// reply into the verdict; profile/: the profile worker's). WorkerProcess is call_worker in two
// steps: the worker starts first, so that its start-up (exec, driver, GPU lock, context) overlaps
// the parent's compile, and gets its request once the compile is done. The GPU lock folder goes to
// the worker in its environment (KHARNESS_LOCK_DIR: the parent's gpu_lock_dir()), as it takes the
// lock before its request comes.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "device/watchdog.hpp"
#include "kharness/device.hpp"
#include "kharness/subprocess.hpp"

namespace kharness::worker {

// ---- worker end ----

class ProtocolStream {
 public:
  ProtocolStream();  // dup(1) for the protocol, dup2(2, 1), RLIMIT_CORE 0
  ~ProtocolStream();
  ProtocolStream(const ProtocolStream&) = delete;  // owns the protocol FILE
  ProtocolStream& operator=(const ProtocolStream&) = delete;

  // One line; thread-safe (lines never interleave).
  void emit(const nlohmann::json& event);
  // Writes `event` and ends the process with `code` (_exit: no destructor runs, and the GPU call
  // some other thread is stuck in never returns). The lock is held to the end: no line follows.
  [[noreturn]] void emit_and_exit(const nlohmann::json& event, int code);

  // Starts the launch watchdog (`limit_seconds` <= 0: none, nullptr). On a hang it writes the
  // `hang` line and ends the process with device::kHangExitCode.
  std::unique_ptr<device::Watchdog> watch_launches(double limit_seconds);

 private:
  void write_locked(const nlohmann::json& event);
  std::mutex mutex_;
  std::FILE* out_ = nullptr;
};

// A worker's work: the request (a JSON object; "verbose": true has already raised the log level)
// in, its answer written to `protocol` as its last line.
using WorkerWork = std::function<void(const nlohmann::json& request, ProtocolStream& protocol)>;

// The main of the worker `name` ("worker", "profile worker"): reads the request from stdin and
// runs `work`. What `work` throws is written as {"event":"error","code","where","message"} (an
// Error keeps its code and place; anything else is code 4 at `name`). Returns 0 when `work`
// returns; after an error line the process ends at once (_exit) with the Error's code, or 4, so
// that no set-up still in flight is waited for. `before_request`, when given, runs once the process
// is set up and before the request is read (the check worker begins its GPU set-up there,
// overlapping the parent's compile); what it throws is an error line too. An empty request ends the
// process at once (_exit(0), no line): set-up begun by `before_request` is not waited for.
int serve_worker(const std::string& name, const WorkerWork& work,
                 const std::function<void()>& before_request = {});

// ---- parent end ----

struct WorkerCall {
  std::string subcommand;       // "__worker"
  std::string name;             // "worker", "profile worker": the `where` of its failures
  nlohmann::json request;       // written to the worker's stdin
  double timeout_seconds = 60;  // the whole worker's wall-clock limit
  // The GPU the worker runs on: it sees only this one (CUDA_VISIBLE_DEVICES). nullopt: what the
  // parent sees.
  std::optional<GpuInfo> gpu;
};

// What a worker wrote and how it ended.
struct WorkerReply {
  SubprocessResult process;
  // Its protocol lines in order, but for `hang` and `error` (lines that are not JSON objects are
  // skipped).
  std::vector<nlohmann::json> events;
  std::optional<nlohmann::json> hang;  // its launch watchdog's line
  // Ended by itself: exit 0, within its limit, no hang.
  bool finished() const;
};

// Runs the worker under KHARNESS_WORKER_WRAPPER (worker_argv), in the scrubbed environment (no API
// keys: sandbox::scrubbed_environment), and reads its reply (read_reply).
WorkerReply call_worker(const WorkerCall& call);

// How long close() waits for a worker that got no request to end by itself (it ends at once when
// it reads its empty stdin; a wrapper such as compute-sanitizer may take longer) before SIGKILL.
inline constexpr double kWorkerCloseSeconds = 5;

// A worker started before its request is ready. `call.request` is not used: send() gives the
// request. Destroyed without send(), it is closed (close()).
class WorkerProcess {
 public:
  explicit WorkerProcess(const WorkerCall& call);  // spawns the worker now
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;  // owns the child process
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Hands `request` over and reads the reply, as call_worker does (throws Error for an `error`
  // line). The worker's wall-clock limit counts from here. Once.
  WorkerReply send(const nlohmann::json& request);
  // Ends a worker that gets no request: its stdin is closed empty and it exits at once, quietly;
  // waits for it (kWorkerCloseSeconds at most, then SIGKILL), so that no zombie is left. Nothing
  // is thrown and nothing is logged above debug. Idempotent; a no-op after send().
  void close() noexcept;

 private:
  std::string name_;
  Subprocess process_;
  bool done_ = false;
};

// The reply in a worker's output. Throws Error for an `error` line (the worker's own failure: bad
// input, no GPU, internal), with the code and place the line names (else 4 and `name`).
WorkerReply read_reply(SubprocessResult process, const std::string& name);

}  // namespace kharness::worker
