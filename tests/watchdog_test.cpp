// The launch watchdog without a GPU: a fake blocking call (a function that sleeps) wrapped the way
// the driver's blocking entry points are, the watchdog firing and not firing, the worker's `hang`
// line and exit status (a forked child), and the parent turning a `hang` line into TIMEOUT.
#include "device/watchdog.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kharness/subprocess.hpp"
#include "kharness/verify.hpp"
#include "pipeline/worker_client.hpp"
#include "worker/channel.hpp"

namespace kharness {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// A blocking "driver call": sleeps for `ms` milliseconds.
int sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

constexpr char kFakeSync[] = "fakeStreamSynchronize";
constexpr char kOtherFake[] = "fakeEventSynchronize";

// The watched version of sleep_ms, made like the driver table's (driver.cpp): watch() replaces the
// pointer.
int (*watched_sleep())(int) {
  static int (*fn)(int) = [] {
    int (*f)(int) = &sleep_ms;
    device::watch<kFakeSync>(f);
    return f;
  }();
  return fn;
}

// What a watchdog reported, and when.
struct Reports {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<device::Hang> hangs;
  std::chrono::steady_clock::time_point at;

  std::function<void(const device::Hang&)> sink() {
    return [this](const device::Hang& h) {
      std::lock_guard<std::mutex> lock(mutex);
      hangs.push_back(h);
      at = std::chrono::steady_clock::now();
      cv.notify_all();
    };
  }
  std::size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return hangs.size();
  }
};

TEST(Watchdog, WatchReplacesThePointerOnceAndLeavesNullAlone) {
  int (*f)(int) = &sleep_ms;
  device::watch<kOtherFake>(f);
  EXPECT_NE(f, &sleep_ms);
  int (*again)(int) = f;
  device::watch<kOtherFake>(again);  // already watched: not wrapped twice
  EXPECT_EQ(again, f);
  EXPECT_EQ(f(1), 1);  // calls through to the real function
  int (*none)(int) = nullptr;
  device::watch<kOtherFake>(none);
  EXPECT_EQ(none, nullptr);
}

TEST(Watchdog, AWatchedCallIsAWaitWhileItRunsAndOnlyThen) {
  EXPECT_FALSE(device::longest_wait().waiting);
  std::thread t([] { watched_sleep()(300); });
  std::this_thread::sleep_for(150ms);
  const device::WaitInProgress w = device::longest_wait();
  EXPECT_TRUE(w.waiting);
  EXPECT_GE(w.seconds, 0.05);
  ASSERT_NE(w.call, nullptr);
  EXPECT_STREQ(w.call, kFakeSync);
  t.join();
  EXPECT_FALSE(device::longest_wait().waiting);
}

TEST(Watchdog, FiresForAWaitLongerThanItsLimit) {
  Reports reports;
  device::ActivityPhase phase("candidate");
  device::note_launch(0, "rmsnorm_kernel");
  const auto start = std::chrono::steady_clock::now();
  {
    device::Watchdog watchdog(0.2, reports.sink(), 10ms);
    watched_sleep()(1000);  // a "hung" call: 5x the limit
  }
  ASSERT_EQ(reports.count(), 1u) << "one report, then the watchdog stops";
  const device::Hang& h = reports.hangs[0];
  EXPECT_EQ(h.call, kFakeSync);
  EXPECT_EQ(h.label, "candidate: launch 0 (kernel rmsnorm_kernel)");
  EXPECT_DOUBLE_EQ(h.limit_seconds, 0.2);
  EXPECT_GT(h.seconds, 0.2);
  // Declared soon after the limit, not when the call returned.
  const double after = std::chrono::duration<double>(reports.at - start).count();
  EXPECT_LT(after, 0.9) << after;
  const json line = device::to_json(h);
  EXPECT_EQ(line["event"], "hang");
  EXPECT_EQ(line["label"], h.label);
  EXPECT_EQ(line["call"], kFakeSync);
}

TEST(Watchdog, ManyShortWaitsLongerThanTheLimitTogetherAreNoHang) {
  Reports reports;
  {
    device::Watchdog watchdog(0.5, reports.sink(), 10ms);
    // 12 x 100 ms = 1.2 s of waiting, never more than 0.1 s at a time (0.4 s of slack for a
    // loaded machine): an honest plan of slow launches synchronised one by one.
    for (int i = 0; i < 12; ++i) watched_sleep()(100);
  }
  EXPECT_EQ(reports.count(), 0u);
}

TEST(Watchdog, NoWaitIsNoHangHoweverLongTheHostWorks) {
  Reports reports;
  {
    device::Watchdog watchdog(0.1, reports.sink(), 10ms);
    std::this_thread::sleep_for(400ms);  // host work (a compile), not a wait on the GPU
  }
  EXPECT_EQ(reports.count(), 0u);
}

TEST(Watchdog, ANestedWaitKeepsTheOuterWaitsClock) {
  Reports reports;
  {
    device::Watchdog watchdog(0.3, reports.sink(), 10ms);
    device::WaitScope outer("outer wait");
    // Inner calls begin and end inside the outer wait: they must not restart its clock.
    for (int i = 0; i < 8; ++i) watched_sleep()(100);
  }
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.hangs[0].call, "outer wait");
  EXPECT_FALSE(device::longest_wait().waiting) << "the outer wait ended with its scope";
}

TEST(Watchdog, AHungThreadIsFoundWhileAnotherMakesProgress) {
  Reports reports;
  std::atomic<bool> stop{false};
  {
    device::Watchdog watchdog(0.3, reports.sink(), 10ms);
    std::thread busy([&] {
      while (!stop) watched_sleep()(20);  // short waits, one after another
    });
    std::thread hung([] { watched_sleep()(900); });
    hung.join();
    stop = true;
    busy.join();
  }
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_GT(reports.hangs[0].seconds, 0.3);
}

TEST(Watchdog, ActivityPhasesNestAndRestore) {
  {
    device::ActivityPhase outer("correctness trial");
    EXPECT_EQ(device::activity_label(), "correctness trial");
    {
      device::ActivityPhase inner("reference");
      device::note_launch(2, "ref_kernel");
      EXPECT_EQ(device::activity_label(), "reference: launch 2 (kernel ref_kernel)");
    }
    EXPECT_EQ(device::activity_label(), "correctness trial") << "the launch note is cleared";
    // Kernel names are copied and truncated, never allocated.
    device::note_launch(0, std::string(300, 'k'));
    EXPECT_EQ(device::activity_label(),
              "correctness trial: launch 0 (kernel " + std::string(127, 'k') + ")");
  }
  EXPECT_EQ(device::activity_label(), "");
}

// The worker end for real, in a forked child: ProtocolStream writes the `hang` line to the
// protocol (the child's stdout) and the process ends with kHangExitCode while the "driver call"
// is still stuck.
TEST(Watchdog, AWorkerWritesOneHangLineAndExitsWithItsStatus) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    worker::ProtocolStream protocol;
    protocol.emit({{"event", "started"}, {"workload", "w1"}});
    auto watchdog = protocol.watch_launches(0.2);
    device::ActivityPhase phase("candidate");
    device::note_launch(0, "spin_kernel");
    watched_sleep()(5000);                  // never returns in time: the watchdog ends the process
    protocol.emit({{"event", "verdict"}});  // must never be written
    ::_exit(0);
  }
  ::close(out[1]);
  std::string data;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) data.append(buf, buf + n);
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), device::kHangExitCode);
  EXPECT_LT(seconds, 2.0) << "ended by the watchdog, not by the call returning";
  const auto newline = data.find('\n');
  ASSERT_NE(newline, std::string::npos) << data;
  EXPECT_EQ(json::parse(data.substr(0, newline))["event"], "started");
  const std::string rest = data.substr(newline + 1);
  ASSERT_EQ(std::count(rest.begin(), rest.end(), '\n'), 1) << data;
  const json hang = json::parse(rest);
  EXPECT_EQ(hang["event"], "hang");
  EXPECT_EQ(hang["label"], "candidate: launch 0 (kernel spin_kernel)");
  EXPECT_EQ(hang["call"], kFakeSync);
  EXPECT_DOUBLE_EQ(hang["limit_seconds"].get<double>(), 0.2);
}

TEST(Watchdog, NoLimitIsNoWatchdog) {
  // watch_launches(0) and a NaN limit start nothing (the CLI refuses them before this point).
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    worker::ProtocolStream protocol;
    const bool none_started = protocol.watch_launches(0) == nullptr &&
                              protocol.watch_launches(std::nan("")) == nullptr &&
                              protocol.watch_launches(-1) == nullptr;
    ::_exit(none_started ? 0 : 1);
  }
  ::close(out[1]);
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// ---- the parent end: a worker's lines and exit into a verdict ----

pipeline::Request request() {
  pipeline::Request r;
  r.timeouts.seconds = 300;
  r.timeouts.launch_seconds = 10;
  return r;
}

SubprocessResult worker_run(const std::vector<json>& lines, int exit_code) {
  SubprocessResult r;
  r.started = true;
  r.exit_code = exit_code;
  r.seconds = 11.5;
  for (const auto& l : lines) r.stdout_data += l.dump() + "\n";
  return r;
}

json hang_line() {
  device::Hang h;
  h.seconds = 10.05;
  h.limit_seconds = 10;
  h.call = "cuStreamSynchronize";
  h.label = "candidate: launch 0 (kernel rmsnorm_kernel)";
  return device::to_json(h);
}

json passed_workload(const std::string& uuid) {
  WorkloadVerdict w;
  w.uuid = uuid;
  return {{"event", "workload"}, {"result", to_json(w)}};
}

TEST(WorkerVerdict, AHangLineIsTimeoutWithTheWatchdogsEvidence) {
  const Verdict v = pipeline::verdict_from_worker(
      request(), Verdict{},
      worker_run({{{"event", "started"}, {"workload", "w1"}}, hang_line()}, device::kHangExitCode));
  EXPECT_EQ(v.status, Status::kTimeout);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(v.failure->kind, "timeout");
  EXPECT_EQ(v.failure->message,
            "candidate: launch 0 (kernel rmsnorm_kernel) did not finish within 10 s (launch "
            "watchdog; workload w1 was running)");
  const json& e = v.failure->evidence;
  EXPECT_EQ(e["watchdog"], true);
  EXPECT_EQ(e["launch_timeout_seconds"], 10.0);
  EXPECT_EQ(e["label"], "candidate: launch 0 (kernel rmsnorm_kernel)");
  EXPECT_EQ(e["workload"], "w1");
  EXPECT_EQ(e["call"], "cuStreamSynchronize");
  // The workload in flight carries it too.
  ASSERT_EQ(v.workloads.size(), 1u);
  EXPECT_EQ(v.workloads[0].uuid, "w1");
  EXPECT_EQ(v.workloads[0].status, Status::kTimeout);
  ASSERT_TRUE(v.workloads[0].failure);
  EXPECT_EQ(v.workloads[0].failure->evidence["watchdog"], true);
  EXPECT_DOUBLE_EQ(v.seconds, 11.5);
}

TEST(WorkerVerdict, AHangAfterPassedWorkloadsKeepsThem) {
  const Verdict v =
      pipeline::verdict_from_worker(request(), Verdict{},
                                    worker_run({{{"event", "started"}, {"workload", "w1"}},
                                                passed_workload("w1"),
                                                {{"event", "started"}, {"workload", "w2"}},
                                                hang_line()},
                                               device::kHangExitCode));
  EXPECT_EQ(v.status, Status::kTimeout);
  ASSERT_EQ(v.workloads.size(), 2u);
  EXPECT_EQ(v.workloads[0].status, Status::kPassed);
  EXPECT_EQ(v.workloads[1].status, Status::kTimeout);
  EXPECT_EQ(v.failure->evidence["workload"], "w2");
}

TEST(WorkerVerdict, AHangInTimingHasNoWorkloadInFlight) {
  json hang = hang_line();
  hang["label"] = "timing: launch 0 (kernel rmsnorm_kernel)";
  const Verdict v = pipeline::verdict_from_worker(
      request(), Verdict{},
      worker_run({{{"event", "started"}, {"workload", "w1"}}, passed_workload("w1"), hang},
                 device::kHangExitCode));
  EXPECT_EQ(v.status, Status::kTimeout);
  EXPECT_EQ(v.failure->message,
            "timing: launch 0 (kernel rmsnorm_kernel) did not finish within 10 s (launch "
            "watchdog)");
  EXPECT_FALSE(v.failure->evidence.contains("workload"));
}

TEST(WorkerVerdict, TheWholeWorkerLimitAndCrashesAreAsBefore) {
  SubprocessResult slow = worker_run({{{"event", "started"}, {"workload", "w1"}}}, -1);
  slow.timed_out = true;
  Verdict v = pipeline::verdict_from_worker(request(), Verdict{}, slow);
  EXPECT_EQ(v.status, Status::kTimeout);
  EXPECT_EQ(v.failure->message, "no verdict within 300 s (workload w1 was running)");
  EXPECT_FALSE(v.failure->evidence.contains("watchdog"));

  SubprocessResult crash = worker_run({{{"event", "started"}, {"workload", "w1"}}}, -1);
  crash.signal = 11;
  v = pipeline::verdict_from_worker(request(), Verdict{}, crash);
  EXPECT_EQ(v.status, Status::kRuntimeError);
  EXPECT_EQ(v.failure->kind, "worker_crashed");

  // A hang line wins over the outer limit when both happened (the process took long to end).
  SubprocessResult both = worker_run({hang_line()}, -1);
  both.timed_out = true;
  v = pipeline::verdict_from_worker(request(), Verdict{}, both);
  EXPECT_EQ(v.failure->evidence["watchdog"], true);
}

TEST(WorkerVerdict, AFinalVerdictIsTakenAsItIs) {
  Verdict passed;
  passed.solution = "good";
  const Verdict v = pipeline::verdict_from_worker(
      request(), Verdict{},
      worker_run({passed_workload("w1"), {{"event", "verdict"}, {"verdict", to_json(passed)}}}, 0));
  EXPECT_EQ(v.status, Status::kPassed);
  EXPECT_EQ(v.solution, "good");
}

}  // namespace
}  // namespace kharness
