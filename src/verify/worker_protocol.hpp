// Both ends of a worker's protocol: one JSON object a line on a private copy of the worker's stdout
// (`check`'s __worker and `profile`'s __profile_worker).
//
// Worker end: ProtocolStream sets the process up (the protocol on a copy of fd 1, fd 1 itself to
// stderr for kernels' printf, no core files) and writes lines from any thread; its launch watchdog
// writes {"event":"hang",...} and ends the process with device::kHangExitCode when a wait on the
// GPU outlasts the launch timeout (device/watchdog.hpp).
//
// Parent end: verdict_from_worker turns what a `check` worker wrote (and how it ended) into the
// verdict: its final verdict, or TIMEOUT (a `hang` line, or the whole-worker limit) or
// RUNTIME_ERROR (a crash), with the workload that was in flight.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "device/watchdog.hpp"
#include "kharness/subprocess.hpp"
#include "kharness/verdict.hpp"
#include "kharness/verify.hpp"

namespace kharness::verify {

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

// The verdict of a `check` worker run: `verdict` holds what the parent knows before the run
// (solution, source, definition, seed, compile summary, environment) and gets the rest from the
// protocol lines in `r.stdout_data` and how the worker ended. Throws Error for an `error` line
// (the worker's own failure: bad input, internal).
Verdict verdict_from_worker(const CheckRequest& request, Verdict verdict,
                            const SubprocessResult& r);

}  // namespace kharness::verify
