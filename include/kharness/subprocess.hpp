// Running a child process with bounded output and a wall-clock limit. Every candidate kernel is
// judged in a fresh exec of kharness (a worker), so that a crash, trap or hang ends the worker and
// never the harness. The child is always a fresh exec (posix_spawn): the CUDA driver cannot be used
// in a plain fork() of a process that already called cuInit.
//
// Process model:
// - The child runs in a new process group of its own (pgid = its pid). On timeout the whole group
//   gets SIGTERM, then SIGKILL after kill_grace_seconds.
// - When the child exits, whatever is left of its process group (grandchildren) gets SIGKILL, and
//   the pipes are drained until end-of-file, for at most kPostExitDrainSeconds: a grandchild that
//   left the group (setsid) and still holds the pipes cannot make a call wait forever; it is left
//   running and its pipes are closed.
// - SIGPIPE: no process-wide setting. SIGPIPE is blocked in the calling thread while the call runs;
//   a SIGPIPE raised by writing the child's stdin after the child stopped reading is consumed, and
//   the write's EPIPE just closes stdin. The child starts with an empty signal mask and default
//   dispositions for the standard signals.
// - Thread-safe: concurrent calls from different threads share nothing. Callers must not set
//   SIGCHLD to SIG_IGN nor reap children with waitpid(-1) elsewhere in the process.
// - Started early: a Subprocess is spawned before its input is known, so that its start-up (exec,
//   the CUDA driver, a context) overlaps what the caller does meanwhile (the parent's compile); its
//   input comes later (finish) or never (close). Until then nothing reads its pipes: a child that
//   writes more than a pipe holds (64 KiB) before its input comes waits for finish() to drain it.
// Library code never prints; a spdlog::debug line records each run.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kharness {

// How long a call keeps reading the child's pipes after the child exited (see above).
inline constexpr double kPostExitDrainSeconds = 0.5;

struct SubprocessOptions {
  std::vector<std::string> argv;        // argv[0] is the executable path (no '/': searched in PATH)
  std::string stdin_data;               // written to the child's stdin, then stdin is closed
  double timeout_seconds = 60;          // wall clock; <= 0: none
  std::size_t stdout_limit = 64 << 20;  // bytes kept; beyond that the child's group gets SIGKILL
  // Bytes of stderr kept: up to this many verbatim; beyond, the head and the tail are kept and the
  // middle is replaced by a marker line, stderr_data.size() <= stderr_limit. The rest is read and
  // discarded, never buffered.
  std::size_t stderr_limit = 64 << 10;
  std::vector<std::pair<std::string, std::string>> env;  // added/overridden variables
  // false: the child's environment is `env` alone, nothing of ours (see
  // sandbox::scrubbed_environment for what a worker gets).
  bool inherit_environment = true;
  double kill_grace_seconds = 2;  // SIGTERM to the group, then SIGKILL after this
  // Checked every 100 ms while the child runs: once true, the group is stopped like at a timeout
  // (SIGTERM, then SIGKILL after the grace) and the result says `cancelled` (Ctrl-C of a run
  // waiting on a coding-agent CLI).
  const std::atomic<bool>* cancel = nullptr;
};

struct SubprocessResult {
  bool started = false;
  std::string start_error;        // why the child could not be started (exec failure, pipes, ...)
  bool timed_out = false;         // the wall-clock limit expired and the group was killed
  bool cancelled = false;         // SubprocessOptions::cancel was set and the group was stopped
  bool stdout_overflow = false;   // the child wrote more than stdout_limit and was killed
  int exit_code = -1;             // when exited normally
  int signal = 0;                 // when killed by a signal (SIGSEGV, SIGABRT, SIGKILL ...)
  std::string stdout_data;        // at most stdout_limit bytes
  std::string stderr_data;        // bounded as SubprocessOptions::stderr_limit says
  std::size_t stderr_bytes = 0;   // total bytes the child wrote to stderr
  bool stderr_truncated = false;  // stderr_bytes > stderr_limit: the middle was dropped
  double seconds = 0;             // wall clock from spawn to reaping
  // Wall clock from spawn to the input's handover (Subprocess::finish or close): how long the
  // child ran before it had its input. 0 for run_subprocess.
  double input_seconds = 0;
  double timeout_seconds = 0;  // the limit that applied (for describe())

  // "exited 0", "killed by SIGSEGV (signal 11)", "timed out after 60.0 s",
  // "stdout over its limit; killed by SIGKILL (signal 9)", "failed to start: <why>".
  std::string describe() const;
};

// Runs argv to completion (or to its limit). Never throws for anything the child does; a child
// that cannot be started gives started = false and start_error.
SubprocessResult run_subprocess(const SubprocessOptions& options);

// A child spawned by the constructor and given its input later: finish(input) writes it, closes
// stdin and runs the child to its end as run_subprocess does (run_subprocess is a Subprocess
// finished at once); close() ends it with no input. Exactly one of the two, once; an object
// destroyed without either SIGKILLs the child's group and reaps it, so that no child and no zombie
// outlives it. options.stdin_data is not used: the input is finish()'s. One thread at a time.
class Subprocess {
 public:
  explicit Subprocess(const SubprocessOptions& options);
  ~Subprocess();
  Subprocess(Subprocess&&) noexcept;
  Subprocess& operator=(Subprocess&&) noexcept;
  Subprocess(const Subprocess&) = delete;  // owns the child and its pipes
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const;
  pid_t pid() const;  // -1 when not started, or reaped

  // Writes `input`, closes stdin and waits for the end under the options' limits; the wall-clock
  // limit counts from this call, not from the spawn (a child waiting for its input is not late).
  SubprocessResult finish(std::string_view input);
  // Closes stdin with nothing written (the child reads end-of-file) and waits for the end, at most
  // `grace_seconds`; then the group is killed (SIGTERM and SIGKILL at once; the result says
  // timed_out). The cancel flag of the options still applies.
  SubprocessResult close(double grace_seconds);

 private:
  friend SubprocessResult run_subprocess(const SubprocessOptions& options);
  SubprocessResult finish(std::string_view input, bool at_spawn);
  struct State;
  std::unique_ptr<State> state_;
};

// The path of the running executable (/proc/self/exe), to re-execute kharness as a worker.
std::string self_executable();

// The command line of a kharness worker: self_executable() and `subcommand`, run under the tool
// that KHARNESS_WORKER_WRAPPER names, split at spaces ("compute-sanitizer --tool memcheck").
std::vector<std::string> worker_argv(const std::string& subcommand);

// "SIGSEGV" for 11, ...; "signal N" for one without a name.
std::string signal_name(int signal);

}  // namespace kharness
