// Child processes for workers: posix_spawn into a new process group, a poll() loop over the
// child's stdin/stdout/stderr and its exit, a wall-clock limit with SIGTERM-then-SIGKILL of the
// group, bounded capture. The spawn and the loop are two steps (Subprocess), so that a child can
// start before its input is ready. The decisions are described in include/kharness/subprocess.hpp.
#include "kharness/subprocess.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "kharness/error.hpp"

extern char** environ;  // NOLINT: POSIX

namespace kharness {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kChunk = 64 << 10;  // bytes per read and per stdin write

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    // close() is not retried on EINTR: on Linux the descriptor is released regardless.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Moves fd above 2, so that dup2 onto the child's 0/1/2 never is a no-op that keeps O_CLOEXEC
// (possible when the parent runs with stdin/stdout/stderr closed).
bool lift_above_stdio(Fd& fd) {
  if (fd.get() > 2) return true;
  int lifted = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (lifted < 0) return false;
  fd = Fd(lifted);
  return true;
}

// A pipe, both ends O_CLOEXEC (so that children spawned by other threads do not inherit them) and
// above 2; `parent_end` (0: read end, 1: write end) is made non-blocking.
bool make_pipe(Fd& read_end, Fd& write_end, int parent_end, std::string& error) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = "pipe: " + errno_text(errno);
    return false;
  }
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
  if (!lift_above_stdio(read_end) || !lift_above_stdio(write_end)) {
    error = "fcntl: " + errno_text(errno);
    return false;
  }
  Fd& ours = parent_end == 0 ? read_end : write_end;
  int flags = ::fcntl(ours.get(), F_GETFL);
  if (flags < 0 || ::fcntl(ours.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    error = "fcntl: " + errno_text(errno);
    return false;
  }
  return true;
}

// Blocks SIGPIPE in the calling thread for its lifetime; consumes the SIGPIPE that an EPIPE write
// raised (unless one was pending already, which belongs to the caller), then restores the mask.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_mask_);
    sigset_t pending;
    sigemptyset(&pending);
    pending_before_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    if (raised_ && !pending_before_) {
      timespec zero{};
      while (sigtimedwait(&pipe_set_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;
  void raised() { raised_ = true; }

 private:
  sigset_t pipe_set_;
  sigset_t old_mask_;
  bool pending_before_ = false;
  bool raised_ = false;
};

// Keeps the first half and the last half of `limit` bytes; counts everything.
class BoundedCapture {
 public:
  explicit BoundedCapture(std::size_t limit)
      : limit_(limit), head_cap_(limit / 2), tail_cap_(limit - limit / 2) {}

  void add(const char* p, std::size_t n) {
    total_ += n;
    std::size_t h = std::min(n, head_cap_ - head_.size());
    head_.append(p, h);
    p += h;
    n -= h;
    if (n == 0) return;
    if (n >= tail_cap_) {
      tail_.assign(p + n - tail_cap_, tail_cap_);
      return;
    }
    tail_.append(p, n);
    if (tail_.size() > 2 * tail_cap_) tail_.erase(0, tail_.size() - tail_cap_);  // amortised O(1)
  }

  std::size_t total() const { return total_; }
  bool truncated() const { return total_ > limit_; }

  // At most `limit` bytes: everything, or head + marker + tail.
  std::string finish() const {
    if (!truncated()) return head_ + tail_;  // nothing was dropped: tail_ holds the rest in full
    auto marker = [](std::size_t dropped) {
      return fmt::format("\n[kharness: {} bytes of stderr dropped]\n", dropped);
    };
    std::size_t marker_max = marker(total_).size();  // the real marker is never longer
    if (limit_ <= marker_max) return head_.substr(0, limit_);
    std::size_t avail = limit_ - marker_max;
    std::size_t h = std::min(head_.size(), avail / 2);
    std::size_t t = std::min(tail_.size(), avail - h);
    return head_.substr(0, h) + marker(total_ - h - t) + tail_.substr(tail_.size() - t);
  }

 private:
  std::size_t limit_, head_cap_, tail_cap_;
  std::string head_, tail_;
  std::size_t total_ = 0;
};

// The environment for the child: ours, with `overrides` replacing or adding variables.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides, bool inherit) {
  std::vector<std::string> env;
  for (char** e = environ; inherit && e && *e; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                  [&](const auto& kv) { return kv.first == name; });
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& kv : overrides) {
    // A later duplicate in `overrides` wins.
    std::string prefix = kv.first + "=";
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }),
              env.end());
    env.push_back(prefix + kv.second);
  }
  return env;
}

// Reaps pid (blocking), retrying on EINTR; false if it was not our child (status lost).
bool reap(pid_t pid, int& status) {
  while (true) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return true;
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

int poll_timeout_ms(Clock::time_point now, Clock::time_point until) {
  if (until <= now) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::microseconds>(until - now).count();
  return static_cast<int>(std::min<long long>((ms + 999) / 1000, 1000));  // round up, cap 1 s
}

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

std::string signal_name(int signal) {
  static constexpr struct {
    int number;
    const char* name;
  } kNames[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
      {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
  };
  for (const auto& n : kNames) {
    if (n.number == signal) return n.name;
  }
  return fmt::format("signal {}", signal);
}

std::string SubprocessResult::describe() const {
  if (!started) return "failed to start: " + start_error;
  if (timed_out) {
    return fmt::format("timed out after {:.1f} s", timeout_seconds > 0 ? timeout_seconds : seconds);
  }
  std::string how;
  if (signal != 0) {
    std::string name = signal_name(signal);
    how = name.rfind("SIG", 0) == 0 ? fmt::format("killed by {} (signal {})", name, signal)
                                    : "killed by " + name;
  } else if (exit_code >= 0) {
    how = fmt::format("exited {}", exit_code);
  } else {
    how = "exit status unknown";
  }
  if (stdout_overflow) return "stdout over its limit; " + how;
  return how;
}

std::string self_executable() {
  std::string path(PATH_MAX, '\0');
  ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= path.size()) {
    throw Error(ExitCode::kInternal, "/proc/self/exe", "cannot read: " + errno_text(errno));
  }
  path.resize(static_cast<std::size_t>(n));
  return path;
}

std::vector<std::string> worker_argv(const std::string& subcommand) {
  std::vector<std::string> argv;
  if (const char* wrapper = std::getenv("KHARNESS_WORKER_WRAPPER"); wrapper && *wrapper) {
    std::istringstream words(wrapper);
    for (std::string word; words >> word;) argv.push_back(word);
  }
  argv.push_back(self_executable());
  argv.push_back(subcommand);
  return argv;
}

// Everything a started child needs until it is reaped: its pipes, its pid and the limits that
// apply once its input is given.
struct Subprocess::State {
  std::string exe;  // argv[0], for the debug line
  double timeout_seconds = 0;
  std::size_t stdout_limit = 0;
  std::size_t stderr_limit = 0;
  double kill_grace_seconds = 0;
  const std::atomic<bool>* cancel = nullptr;

  SubprocessResult result;  // started / start_error so far
  pid_t pid = -1;           // > 0 while not reaped
  bool used = false;        // finish() or close() was called
  Fd in_w, out_r, err_r, pidfd;
  Clock::time_point start;

  // Kills the group and reaps the child, if it is still ours.
  void kill_and_reap() {
    if (pid <= 0) return;
    ::kill(-pid, SIGKILL);
    int status;
    reap(pid, status);
    pid = -1;
  }

  void spawn(const SubprocessOptions& options);
  SubprocessResult run(std::string_view input, Clock::time_point deadline, double kill_grace);
};

// Spawns options.argv (pipes, new process group, empty signal mask, default dispositions). On
// failure, `result` says why and `pid` stays -1.
void Subprocess::State::spawn(const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    result.start_error = "no executable given";
    return;
  }
  // The child's ends here, ours in the members (closed with the State on a failure).
  Fd in_r, out_w, err_w;
  if (!make_pipe(in_r, in_w, 1, result.start_error) ||
      !make_pipe(out_r, out_w, 0, result.start_error) ||
      !make_pipe(err_r, err_w, 0, result.start_error)) {
    return;
  }

  std::vector<std::string> env_strings =
      child_environment(options.env, options.inherit_environment);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  // The child: stdio on the pipes (dup2 clears O_CLOEXEC; every other descriptor of ours is
  // O_CLOEXEC), a new process group, an empty signal mask, default dispositions.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), STDERR_FILENO);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t empty_mask, default_signals;
  sigemptyset(&empty_mask);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  sigemptyset(&default_signals);
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaddset(&default_signals, sig);
  }
  posix_spawnattr_setsigdefault(&attr, &default_signals);

  start = Clock::now();
  pid_t child = -1;
  bool has_slash = exe.find('/') != std::string::npos;
  int rc = has_slash ? posix_spawn(&child, exe.c_str(), &actions, &attr, argv.data(), envp.data())
                     : posix_spawnp(&child, exe.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    result.start_error = exe + ": " + errno_text(rc);
    spdlog::debug("subprocess: {}", result.describe());
    return;
  }
  result.started = true;
  pid = child;
  // Exit notification: a pidfd where the kernel has one (5.3+), else a short polling tick.
#ifdef SYS_pidfd_open
  pidfd = Fd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
#endif
}

// The poll loop: writes `input` (then closes stdin), reads stdout and stderr, stops the group at
// `deadline` (SIGTERM, then SIGKILL after `kill_grace`) or when cancelled, reaps the child and
// drains the pipes.
SubprocessResult Subprocess::State::run(std::string_view input, Clock::time_point deadline,
                                        double kill_grace) {
  // SIGPIPE blocked while this thread writes the child's stdin (subprocess.hpp).
  SigpipeGuard sigpipe;
  if (input.empty()) in_w.reset();

  bool exited = false;
  int status = 0;
  bool status_known = false;
  bool term_sent = false, kill_sent = false;
  Clock::time_point kill_at{}, drain_until{};
  std::size_t in_offset = 0;
  BoundedCapture err(stderr_limit);
  std::vector<char> buffer(kChunk);

  auto kill_group = [&](int sig) {
    if (!exited) ::kill(-pid, sig);  // the unreaped child keeps the group id from being reused
  };

  while (true) {
    Clock::time_point now = Clock::now();
    if (!exited) {
      // WNOWAIT: the child stays a zombie, so its group id is still ours to kill.
      siginfo_t info{};
      int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
      if ((r == 0 && info.si_pid == pid) || (r < 0 && errno == ECHILD)) {
        kill_group(SIGKILL);  // grandchildren left in the group
        status_known = reap(pid, status);
        pid = -1;
        exited = true;
        in_w.reset();
        pidfd.reset();
        drain_until = after(now, kPostExitDrainSeconds);
      }
    }
    if (exited && ((!out_r.open() && !err_r.open()) || now >= drain_until)) break;
    if (!exited) {
      if (!term_sent && !kill_sent && cancel && cancel->load()) {
        result.cancelled = true;
        term_sent = true;
        kill_group(SIGTERM);
        kill_at = after(now, std::max(0.0, kill_grace));
      }
      if (!term_sent && !kill_sent && now >= deadline) {
        result.timed_out = true;
        term_sent = true;
        kill_group(SIGTERM);
        kill_at = after(now, std::max(0.0, kill_grace));
      }
      if (term_sent && !kill_sent && now >= kill_at) {
        kill_group(SIGKILL);
        kill_sent = true;
      }
    }

    pollfd fds[4];
    nfds_t nfds = 0;
    int in_idx = -1, out_idx = -1, err_idx = -1;
    if (in_w.open()) {
      in_idx = static_cast<int>(nfds);
      fds[nfds++] = {in_w.get(), POLLOUT, 0};
    }
    if (out_r.open()) {
      out_idx = static_cast<int>(nfds);
      fds[nfds++] = {out_r.get(), POLLIN, 0};
    }
    if (err_r.open()) {
      err_idx = static_cast<int>(nfds);
      fds[nfds++] = {err_r.get(), POLLIN, 0};
    }
    if (pidfd.open()) fds[nfds++] = {pidfd.get(), POLLIN, 0};

    Clock::time_point wake = Clock::time_point::max();
    if (exited) {
      wake = drain_until;
    } else {
      if (!term_sent) wake = deadline;
      if (!term_sent && cancel) wake = std::min(wake, after(now, 0.1));
      if (term_sent && !kill_sent) wake = kill_at;
      if (!pidfd.open()) wake = std::min(wake, after(now, nfds == 0 ? 0.002 : 0.02));
    }
    int timeout_ms = wake == Clock::time_point::max() ? 1000 : poll_timeout_ms(now, wake);
    int ready = ::poll(fds, nfds, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      // EINVAL/ENOMEM: cannot wait on the pipes any more; give up on them and wait for the exit.
      in_w.reset();
      out_r.reset();
      err_r.reset();
      continue;
    }
    if (ready == 0) continue;

    if (in_idx >= 0 && fds[in_idx].revents != 0) {
      std::size_t left = input.size() - in_offset;
      ssize_t n = ::write(in_w.get(), input.data() + in_offset, left);
      if (n > 0) {
        in_offset += static_cast<std::size_t>(n);
        if (in_offset == input.size()) in_w.reset();
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        if (errno == EPIPE) sigpipe.raised();  // the child stopped reading: not an error
        in_w.reset();
      }
    }
    if (out_idx >= 0 && fds[out_idx].revents != 0) {
      ssize_t n = ::read(out_r.get(), buffer.data(), buffer.size());
      if (n > 0) {
        std::size_t room = stdout_limit - result.stdout_data.size();
        std::size_t keep = std::min(room, static_cast<std::size_t>(n));
        result.stdout_data.append(buffer.data(), keep);
        if (keep < static_cast<std::size_t>(n)) {
          result.stdout_overflow = true;
          kill_group(SIGKILL);
          kill_sent = true;
          out_r.reset();
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        out_r.reset();
      }
    }
    if (err_idx >= 0 && fds[err_idx].revents != 0) {
      ssize_t n = ::read(err_r.get(), buffer.data(), buffer.size());
      if (n > 0) {
        err.add(buffer.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        err_r.reset();
      }
    }
  }
  out_r.reset();
  err_r.reset();

  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (status_known) {
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  result.stderr_data = err.finish();
  result.stderr_bytes = err.total();
  result.stderr_truncated = err.truncated();
  spdlog::debug(
      "subprocess {}: {} in {:.3f} s{} ({} bytes out, {} bytes err)", exe, result.describe(),
      result.seconds,
      result.input_seconds > 0
          ? fmt::format(" (its input given {:.3f} s after its start)", result.input_seconds)
          : std::string(),
      result.stdout_data.size(), result.stderr_bytes);
  return std::move(result);
}

Subprocess::Subprocess(const SubprocessOptions& options) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.exe = options.argv.empty() ? std::string() : options.argv[0];
  st.timeout_seconds = options.timeout_seconds;
  st.stdout_limit = options.stdout_limit;
  st.stderr_limit = options.stderr_limit;
  st.kill_grace_seconds = options.kill_grace_seconds;
  st.cancel = options.cancel;
  st.result.timeout_seconds = options.timeout_seconds > 0 ? options.timeout_seconds : 0;
  st.spawn(options);
}

Subprocess::~Subprocess() {
  if (state_) state_->kill_and_reap();
}

Subprocess::Subprocess(Subprocess&&) noexcept = default;

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (state_) state_->kill_and_reap();
    state_ = std::move(other.state_);
  }
  return *this;
}

bool Subprocess::started() const { return state_ && state_->result.started; }

pid_t Subprocess::pid() const { return state_ ? state_->pid : -1; }

SubprocessResult Subprocess::finish(std::string_view input) { return finish(input, false); }

// `at_spawn`: run_subprocess, whose input is given with the spawn (input_seconds stays 0).
SubprocessResult Subprocess::finish(std::string_view input, bool at_spawn) {
  if (!state_ || state_->used) throw std::logic_error("Subprocess: finished or closed already");
  State& st = *state_;
  st.used = true;
  if (!st.result.started) return std::move(st.result);
  const Clock::time_point now = Clock::now();
  if (!at_spawn) st.result.input_seconds = std::chrono::duration<double>(now - st.start).count();
  const Clock::time_point deadline =
      st.timeout_seconds > 0 ? after(now, st.timeout_seconds) : Clock::time_point::max();
  return st.run(input, deadline, st.kill_grace_seconds);
}

SubprocessResult Subprocess::close(double grace_seconds) {
  if (!state_ || state_->used) throw std::logic_error("Subprocess: finished or closed already");
  State& st = *state_;
  st.used = true;
  if (!st.result.started) return std::move(st.result);
  const Clock::time_point now = Clock::now();
  st.result.input_seconds = std::chrono::duration<double>(now - st.start).count();
  st.result.timeout_seconds = std::max(0.0, grace_seconds);
  return st.run({}, after(now, std::max(0.0, grace_seconds)), 0);
}

SubprocessResult run_subprocess(const SubprocessOptions& options) {
  Subprocess child(options);
  return child.finish(options.stdin_data, true);
}

}  // namespace kharness
