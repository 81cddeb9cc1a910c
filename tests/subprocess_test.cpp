// The subprocess layer against a real misbehaving child (tests/subprocess_child.cpp).
#include "kharness/subprocess.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kharness {
namespace {

SubprocessOptions child(std::vector<std::string> args) {
  SubprocessOptions o;
  o.argv = {KHARNESS_TEST_CHILD};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_seconds = 20;  // a safety net; tests that time out set their own
  return o;
}

std::size_t count_fds() {
  std::size_t n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the DIR's own descriptor
}

// True once `pid` is gone or a zombie (waiting at most `seconds`).
bool process_gone(pid_t pid, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) return true;
    auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

// A worker is kharness itself; KHARNESS_WORKER_WRAPPER puts a tool in front of it, word by word.
TEST(Subprocess, WorkerArgvRunsKharnessUnderTheWrapper) {
  ::unsetenv("KHARNESS_WORKER_WRAPPER");
  EXPECT_EQ(worker_argv("__worker"), (std::vector<std::string>{self_executable(), "__worker"}));
  ::setenv("KHARNESS_WORKER_WRAPPER", "  compute-sanitizer --tool  memcheck ", 1);
  EXPECT_EQ(worker_argv("__compile_worker"),
            (std::vector<std::string>{"compute-sanitizer", "--tool", "memcheck", self_executable(),
                                      "__compile_worker"}));
  ::unsetenv("KHARNESS_WORKER_WRAPPER");
}

TEST(Subprocess, EchoRoundTripOf5MiB) {
  auto o = child({"echo"});
  o.stdin_data.resize(5 << 20);
  for (std::size_t i = 0; i < o.stdin_data.size(); ++i) {
    o.stdin_data[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  auto r = run_subprocess(o);
  ASSERT_TRUE(r.started) << r.start_error;
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.stdout_overflow);
  EXPECT_EQ(r.stdout_data.size(), o.stdin_data.size());
  EXPECT_TRUE(r.stdout_data == o.stdin_data);
  EXPECT_EQ(r.stderr_bytes, 0u);
  EXPECT_EQ(r.describe(), "exited 0");
  EXPECT_LT(r.seconds, 5.0);
}

TEST(Subprocess, EmptyStdinGivesEof) {
  auto r = run_subprocess(child({"echo"}));
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.stdout_data, "");
}

TEST(Subprocess, ExitCodes) {
  for (int code : {0, 1, 3, 42, 255}) {
    auto r = run_subprocess(child({"exit", std::to_string(code)}));
    ASSERT_TRUE(r.started) << r.start_error;
    EXPECT_EQ(r.exit_code, code);
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.describe(), "exited " + std::to_string(code));
  }
}

TEST(Subprocess, SignalsAreNamed) {
  auto segv = run_subprocess(child({"segv"}));
  EXPECT_EQ(segv.signal, SIGSEGV);
  EXPECT_EQ(segv.exit_code, -1);
  EXPECT_EQ(segv.describe(), "killed by SIGSEGV (signal 11)");
  auto abrt = run_subprocess(child({"abort"}));
  EXPECT_EQ(abrt.signal, SIGABRT);
  EXPECT_EQ(abrt.describe(), "killed by SIGABRT (signal 6)");
}

TEST(Subprocess, TimeoutKillsAHangingChildThatIgnoresSigterm) {
  auto o = child({"hang"});
  o.timeout_seconds = 1;
  o.kill_grace_seconds = 2;
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_subprocess(o);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);  // SIGTERM was ignored
  EXPECT_GE(r.seconds, 2.9);     // 1 s limit + 2 s grace
  EXPECT_LT(wall, 5.0);
  EXPECT_EQ(r.describe(), "timed out after 1.0 s");
}

TEST(Subprocess, TimeoutEndsAChildThatHonoursSigterm) {
  SubprocessOptions o;
  o.argv = {"sleep", "30"};  // found in PATH
  o.timeout_seconds = 0.3;
  auto r = run_subprocess(o);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_LT(r.seconds, 1.5);  // no grace wait: SIGTERM sufficed
}

// Ctrl-C of a run waiting on a coding-agent CLI: the flag, set from another thread, stops the
// child's group within the polling tick, long before its own timeout.
TEST(Subprocess, CancelStopsTheChildGroup) {
  std::atomic<bool> cancel{false};
  SubprocessOptions o;
  o.argv = {"sleep", "30"};
  o.timeout_seconds = 20;
  o.cancel = &cancel;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  auto r = run_subprocess(o);
  setter.join();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_LT(r.seconds, 2.0);
  // Never set: no effect.
  std::atomic<bool> never{false};
  SubprocessOptions quick;
  quick.argv = {"true"};
  quick.cancel = &never;
  auto q = run_subprocess(quick);
  EXPECT_FALSE(q.cancelled);
  EXPECT_EQ(q.exit_code, 0);
}

TEST(Subprocess, StderrFloodIsBoundedHeadAndTailKept) {
  auto o = child({"flood-stderr", "200"});
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_subprocess(o);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.stderr_bytes, std::size_t{200} << 20);
  EXPECT_TRUE(r.stderr_truncated);
  EXPECT_LE(r.stderr_data.size(), o.stderr_limit);
  EXPECT_GT(r.stderr_data.size(), o.stderr_limit - 200);
  EXPECT_EQ(r.stderr_data.rfind("flood-stderr begin\n", 0), 0u);
  const std::string end = "flood-stderr end\n";
  ASSERT_GE(r.stderr_data.size(), end.size());
  EXPECT_EQ(r.stderr_data.substr(r.stderr_data.size() - end.size()), end);
  EXPECT_NE(r.stderr_data.find("bytes of stderr dropped]"), std::string::npos);
  EXPECT_LT(wall, 10.0);
}

TEST(Subprocess, SmallStderrKeptVerbatimAndTinyLimitsHold) {
  auto o = child({"flood-stderr", "1"});
  o.stderr_limit = 2 << 20;
  auto r = run_subprocess(o);
  EXPECT_FALSE(r.stderr_truncated);
  EXPECT_EQ(r.stderr_data.size(), std::size_t{1} << 20);
  for (std::size_t limit : {0, 10, 100}) {
    o.stderr_limit = limit;
    r = run_subprocess(o);
    EXPECT_TRUE(r.stderr_truncated);
    EXPECT_LE(r.stderr_data.size(), limit);
    EXPECT_EQ(r.stderr_bytes, std::size_t{1} << 20);
  }
}

TEST(Subprocess, StdoutOverLimitKillsTheChild) {
  auto o = child({"flood-stdout", "100"});
  o.stdout_limit = 1 << 20;
  auto r = run_subprocess(o);
  EXPECT_TRUE(r.stdout_overflow);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.stdout_data.size(), std::size_t{1} << 20);
  EXPECT_EQ(r.describe(), "stdout over its limit; killed by SIGKILL (signal 9)");
  EXPECT_LT(r.seconds, 5.0);

  auto ok = run_subprocess(child({"flood-stdout", "8"}));
  EXPECT_FALSE(ok.stdout_overflow);
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.stdout_data.size(), std::size_t{8} << 20);
}

TEST(Subprocess, ChildIgnoringStdinDoesNotHangOrKillTheParent) {
  auto o = child({"ignore-stdin"});
  o.stdin_data.assign(10 << 20, 'i');
  for (int i = 0; i < 3; ++i) {
    auto r = run_subprocess(o);  // SIGPIPE would end this test binary
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_FALSE(r.timed_out);
    EXPECT_LT(r.seconds, 5.0);
  }
  sigset_t pending;
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));  // consumed, not left for later
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&mask, SIGPIPE));  // the caller's mask is restored
}

TEST(Subprocess, GrandchildHoldingThePipesIsKilledWithTheGroup) {
  auto r = run_subprocess(child({"grandchild-hang"}));
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.seconds, 3.0);
  pid_t grandchild = std::stoi(r.stdout_data);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(process_gone(grandchild, 2.0));
}

TEST(Subprocess, GrandchildThatLeftTheGroupDoesNotBlockTheCall) {
  auto r = run_subprocess(child({"grandchild-setsid"}));
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_GE(r.seconds, kPostExitDrainSeconds * 0.9);  // drained for the bound, then gave up
  EXPECT_LT(r.seconds, kPostExitDrainSeconds + 2.0);
  pid_t grandchild = std::stoi(r.stdout_data);
  ASSERT_GT(grandchild, 0);
  ::kill(grandchild, SIGKILL);  // it escaped the group: ours to clean up
}

TEST(Subprocess, TwentyMixedRunsGiveTwentyCorrectResultsWithoutLeaks) {
  std::size_t fds_before = count_fds();
  for (int i = 0; i < 20; ++i) {
    SubprocessResult r;
    switch (i % 5) {
      case 0: {
        auto o = child({"echo"});
        o.stdin_data = "run " + std::to_string(i);
        r = run_subprocess(o);
        EXPECT_EQ(r.exit_code, 0);
        EXPECT_EQ(r.stdout_data, o.stdin_data);
        break;
      }
      case 1:
        r = run_subprocess(child({"segv"}));
        EXPECT_EQ(r.signal, SIGSEGV);
        break;
      case 2: {
        auto o = child({"hang"});
        o.timeout_seconds = 0.2;
        o.kill_grace_seconds = 0.1;
        r = run_subprocess(o);
        EXPECT_TRUE(r.timed_out);
        EXPECT_EQ(r.signal, SIGKILL);
        break;
      }
      case 3:
        r = run_subprocess(child({"exit", std::to_string(i)}));
        EXPECT_EQ(r.exit_code, i);
        break;
      case 4:
        r = run_subprocess(child({"abort"}));
        EXPECT_EQ(r.signal, SIGABRT);
        break;
    }
    EXPECT_TRUE(r.started) << i;
  }
  EXPECT_EQ(count_fds(), fds_before);
  int status;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);  // no child left, zombie or not
  EXPECT_EQ(errno, ECHILD);
}

TEST(Subprocess, ConcurrentCallsFromThreads) {
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<SubprocessResult> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &results] {
      auto o = child(t % 2 ? std::vector<std::string>{"echo"}
                           : std::vector<std::string>{"ignore-stdin"});
      o.stdin_data.assign(1 << 20, static_cast<char>('a' + t));
      results[t] = run_subprocess(o);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(results[t].exit_code, 0) << t;
    if (t % 2) EXPECT_EQ(results[t].stdout_data, std::string(1 << 20, static_cast<char>('a' + t)));
  }
}

TEST(Subprocess, EnvironmentAddedAndOverridden) {
  auto o = child({"env", "KHARNESS_SUBPROCESS_TEST"});
  o.env = {{"KHARNESS_SUBPROCESS_TEST", "hello world"}};
  EXPECT_EQ(run_subprocess(o).stdout_data, "hello world");
  ::setenv("KHARNESS_SUBPROCESS_TEST", "old", 1);
  EXPECT_EQ(run_subprocess(o).stdout_data, "hello world");  // replaced, not shadowed
  o.env.clear();
  EXPECT_EQ(run_subprocess(o).stdout_data, "old");  // inherited
  ::unsetenv("KHARNESS_SUBPROCESS_TEST");
  EXPECT_EQ(run_subprocess(o).stdout_data, "<unset>");
}

TEST(Subprocess, StartErrorForMissingExecutable) {
  std::size_t fds_before = count_fds();
  SubprocessOptions o;
  o.argv = {"/nonexistent/kharness-worker"};
  auto r = run_subprocess(o);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.start_error.find("/nonexistent/kharness-worker"), std::string::npos);
  EXPECT_NE(r.start_error.find("No such file"), std::string::npos) << r.start_error;
  EXPECT_EQ(r.describe().rfind("failed to start: ", 0), 0u);
  EXPECT_EQ(count_fds(), fds_before);
  o.argv.clear();
  EXPECT_FALSE(run_subprocess(o).started);
}

TEST(Subprocess, DescribeStrings) {
  SubprocessResult r;
  r.started = true;
  r.exit_code = 0;
  EXPECT_EQ(r.describe(), "exited 0");
  r.exit_code = -1;
  r.signal = SIGSEGV;
  EXPECT_EQ(r.describe(), "killed by SIGSEGV (signal 11)");
  r.signal = SIGKILL;
  r.timed_out = true;
  r.timeout_seconds = 60;
  EXPECT_EQ(r.describe(), "timed out after 60.0 s");
  r.timed_out = false;
  r.signal = 77;
  EXPECT_EQ(r.describe(), "killed by signal 77");
  r.started = false;
  r.start_error = "x: No such file or directory";
  EXPECT_EQ(r.describe(), "failed to start: x: No such file or directory");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
}

TEST(Subprocess, SelfExecutableIsThisBinary) {
  std::string self = self_executable();
  EXPECT_EQ(self.front(), '/');
  EXPECT_NE(self.find("kharness_tests"), std::string::npos);
}

// ---- Subprocess: started before its input is ready ----

SubprocessOptions shell(const std::string& script) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.timeout_seconds = 20;
  return o;
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// True once `pid` has been reaped: no process and no zombie of that id is ours any more.
bool reaped(pid_t pid) {
  int status;
  return ::waitpid(pid, &status, WNOHANG) == -1 && errno == ECHILD;
}

// The child runs from the constructor on (its output before the input is kept); the input given
// late reaches it whole, and the result says how long it waited for it.
TEST(StartedSubprocess, InputGivenLateReachesTheRunningChild) {
  Subprocess p(shell("echo started; read line; echo \"got $line\""));
  ASSERT_TRUE(p.started());
  EXPECT_GT(p.pid(), 0);
  sleep_seconds(0.3);
  SubprocessResult r = p.finish("late input\n");
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.stdout_data, "started\ngot late input\n");
  EXPECT_GE(r.input_seconds, 0.3);
  EXPECT_GE(r.seconds, r.input_seconds);
  EXPECT_EQ(p.pid(), -1);  // reaped
  EXPECT_THROW(p.finish("again"), std::logic_error);
  EXPECT_THROW(p.close(1), std::logic_error);
}

// A large input given late: the same writer as run_subprocess (partial writes, poll).
TEST(StartedSubprocess, FiveMiBGivenLateRoundTrip) {
  Subprocess p(child({"echo"}));
  sleep_seconds(0.1);
  std::string data(5 << 20, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7919u >> 5);
  SubprocessResult r = p.finish(data);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(r.stdout_data == data);
}

// The wall-clock limit counts from the input, not from the spawn: a child waiting for its input
// is not late; one that hangs after it is stopped at its limit.
TEST(StartedSubprocess, TheLimitCountsFromTheInput) {
  auto waiting = shell("read line; echo \"$line\"");
  waiting.timeout_seconds = 0.5;
  Subprocess patient(waiting);
  sleep_seconds(1.0);  // twice the limit before the input
  SubprocessResult r = patient.finish("x\n");
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "x\n");

  auto hanging = child({"hang"});
  hanging.timeout_seconds = 0.5;
  hanging.kill_grace_seconds = 0.2;
  Subprocess late(hanging);
  sleep_seconds(0.3);
  r = late.finish("");
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);  // it ignores SIGTERM
  EXPECT_GE(r.seconds - r.input_seconds, 0.5 + 0.2 - 0.05);
  EXPECT_LT(r.seconds - r.input_seconds, 3.0);
  EXPECT_EQ(r.describe(), "timed out after 0.5 s");
}

// close(): stdin ends with nothing written; a child that exits on end-of-file ends at once and
// is reaped, with its output and exit status.
TEST(StartedSubprocess, ClosedWithoutInputTheChildReadsEndOfFile) {
  Subprocess p(shell("if read line; then echo \"got $line\"; exit 1; else echo eof; fi"));
  sleep_seconds(0.1);
  const pid_t pid = p.pid();
  auto t0 = std::chrono::steady_clock::now();
  SubprocessResult r = p.close(5);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.stdout_data, "eof\n");
  EXPECT_LT(wall, 2.0);
  EXPECT_TRUE(reaped(pid));
}

// A child that does not end when its stdin closes is killed after the grace, and reaped.
TEST(StartedSubprocess, CloseKillsAChildThatDoesNotEnd) {
  Subprocess p(child({"hang"}));
  const pid_t pid = p.pid();
  auto t0 = std::chrono::steady_clock::now();
  SubprocessResult r = p.close(0.3);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);  // SIGTERM is ignored; no further grace
  EXPECT_GE(wall, 0.25);
  EXPECT_LT(wall, 2.0);
  EXPECT_TRUE(reaped(pid));
}

// Destroyed with neither finish() nor close(): the group is killed and the child reaped; no
// descriptor is left open. A moved-from object owns nothing.
TEST(StartedSubprocess, DestroyedUnfinishedKillsAndReapsWithoutLeaks) {
  std::size_t fds_before = count_fds();
  pid_t pid = -1, moved_pid = -1;
  {
    Subprocess p(child({"hang"}));
    pid = p.pid();
    ASSERT_GT(pid, 0);
    Subprocess a(child({"echo"}));
    Subprocess b(std::move(a));
    moved_pid = b.pid();
    EXPECT_FALSE(a.started());  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(a.pid(), -1);     // NOLINT(bugprone-use-after-move)
  }
  EXPECT_TRUE(reaped(pid));
  EXPECT_TRUE(reaped(moved_pid));
  EXPECT_EQ(count_fds(), fds_before);
}

// One that cannot start says why, from finish() as from run_subprocess.
TEST(StartedSubprocess, StartErrorIsTheResult) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/kharness-worker"};
  Subprocess p(o);
  EXPECT_FALSE(p.started());
  SubprocessResult r = p.finish("input");
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.start_error.find("No such file"), std::string::npos) << r.start_error;
  Subprocess q(o);
  EXPECT_FALSE(q.close(1).started);
}

// Children started early in several threads while others run to completion: each gets its own
// input (no pipe end leaks into a sibling, which would hold a stdin open), nothing is left.
TEST(StartedSubprocess, EarlyChildrenAlongsideOtherRunsInThreads) {
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &outputs] {
      Subprocess p(child({"echo"}));
      auto other = child({"echo"});
      other.stdin_data = "other";
      EXPECT_EQ(run_subprocess(other).stdout_data, "other");
      if (t % 2 == 0) {
        outputs[t] = p.finish("thread " + std::to_string(t)).stdout_data;
      } else {
        SubprocessResult r = p.close(5);
        EXPECT_FALSE(r.timed_out) << t;  // end-of-file reached it: no sibling held its stdin
        outputs[t] = r.stdout_data;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(outputs[0], "thread 0");
  EXPECT_EQ(outputs[1], "");
  EXPECT_EQ(outputs[2], "thread 2");
  EXPECT_EQ(outputs[3], "");
  int status;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace kharness
