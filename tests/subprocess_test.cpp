// The subprocess layer against a real misbehaving child (tests/subprocess_child.cpp).
#include "kharness/subprocess.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
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
  EXPECT_EQ(worker_argv("__profile_worker"),
            (std::vector<std::string>{"compute-sanitizer", "--tool", "memcheck", self_executable(),
                                      "__profile_worker"}));
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

}  // namespace
}  // namespace kharness
