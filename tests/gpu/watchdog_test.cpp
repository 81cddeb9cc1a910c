// The launch watchdog on a real GPU, through the built binary: a kernel that hangs on its first
// launch is TIMEOUT from `validate` within 15 s, a launch slower than a small
// --launch-timeout is TIMEOUT, and `profile` of a hang fails in seconds. slow_launch.cu passing
// with the default limit is a row of tests/gpu/check_test.cpp. Skips without a GPU.
//
// Time on an H200: about 12 + 4 + 12 s. Each run has an archive of its own, so no verdict comes
// from the cache.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::TempDir;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr
  double seconds = 0;
};

CliRun kharness_in(const TempDir& tmp, const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  testing::CommandResult r = testing::run_command(
      std::string("'") + KHARNESS_BINARY + "' --archive '" + (tmp.path() / "archive").string() +
      "' " + args + " 2>'" + (tmp.path() / "stderr.txt").string() + "'");
  CliRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.exit_code = r.exit_code;
  std::ifstream err(tmp.path() / "stderr.txt");
  run.out = r.out + std::string(std::istreambuf_iterator<char>(err), {});
  return run;
}

std::string fixture(const std::string& name) {
  return "'" + testing::fixture("check/" + name).string() + "'";
}

// The uuid of rmsnorm_h4096's batch-1 workload.
std::string batch1_workload() {
  std::ifstream in(testing::source_dir() / "operators" / "rmsnorm_h4096" / "workloads.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j["axes"].value("batch_size", 0) == 1) return j.value("uuid", "");
  }
  ADD_FAILURE() << "rmsnorm_h4096 has no batch-1 workload";
  return "";
}

json verdict_of(const CliRun& run) {
  const auto brace = run.out.find('{');
  json v = brace == std::string::npos ? json() : json::parse(run.out.substr(brace), nullptr, false);
  EXPECT_TRUE(v.is_object()) << run.out.substr(0, 4000);
  return v.is_object() ? v : json::object();
}

json evidence_of(const json& v) {
  const json f = v.value("failure", json());
  return f.is_object() ? f.value("evidence", json::object()) : json::object();
}

TEST(LaunchWatchdog, ValidateOfAKernelThatHangsIsTimeoutWithin15Seconds) {
  SKIP_WITHOUT_GPU();
  TempDir tmp;
  const CliRun run = kharness_in(
      tmp, "validate " + fixture("hang_first_launch.cu") + " --operator rmsnorm_h4096 --json");
  std::cout << "validate of a hang: exit " << run.exit_code << " in " << run.seconds << " s\n";
  EXPECT_EQ(run.exit_code, 1) << run.out.substr(0, 4000);
  EXPECT_LE(run.seconds, 15.0) << "a hang must end in seconds, not at --timeout (300 s)";
  const json v = verdict_of(run);
  EXPECT_EQ(v.value("status", ""), "TIMEOUT") << v.dump(2).substr(0, 3000);
  ASSERT_TRUE(v.value("failure", json()).is_object()) << v.dump(2).substr(0, 3000);
  EXPECT_EQ(v["failure"].value("kind", ""), "timeout");
  const json e = evidence_of(v);
  EXPECT_EQ(e.value("watchdog", false), true) << e.dump();
  EXPECT_EQ(e.value("launch_timeout_seconds", 0.0), 10.0);
  EXPECT_NE(e.value("label", "").find("rmsnorm_kernel"), std::string::npos) << e.dump();
  EXPECT_FALSE(e.value("workload", "").empty()) << e.dump();
  const std::string message = v["failure"].value("message", "");
  EXPECT_NE(message.find("launch 0 (kernel rmsnorm_kernel)"), std::string::npos) << message;
  // The workload in flight says so too.
  ASSERT_FALSE(v.value("workloads", json::array()).empty());
  EXPECT_EQ(v["workloads"].back().value("status", ""), "TIMEOUT");
}

TEST(LaunchWatchdog, ALaunchSlowerThanTheLaunchTimeoutIsTimeout) {
  SKIP_WITHOUT_GPU();
  TempDir tmp;
  // slow_launch.cu takes 2.5 s per launch: over a 1 s limit (it PASSES under the default 10 s).
  const CliRun run = kharness_in(tmp, "check " + fixture("slow_launch.cu") +
                                          " --operator rmsnorm_h4096 --trials 1 --workloads " +
                                          batch1_workload() + " --launch-timeout 1 --json");
  EXPECT_EQ(run.exit_code, 1) << run.out.substr(0, 4000);
  EXPECT_LT(run.seconds, 10.0);
  const json v = verdict_of(run);
  EXPECT_EQ(v.value("status", ""), "TIMEOUT") << v.dump(2).substr(0, 3000);
  const json e = evidence_of(v);
  EXPECT_EQ(e.value("watchdog", false), true) << e.dump();
  EXPECT_EQ(e.value("launch_timeout_seconds", 0.0), 1.0);
  EXPECT_NE(e.value("label", "").find("candidate"), std::string::npos) << e.dump();
}

TEST(LaunchWatchdog, ProfileOfAKernelThatHangsFailsInSeconds) {
  SKIP_WITHOUT_GPU();
  TempDir tmp;
  const CliRun run =
      kharness_in(tmp, "profile " + fixture("hang_first_launch.cu") +
                           " --operator rmsnorm_h4096 --workload " + batch1_workload());
  if (run.exit_code == 3) GTEST_SKIP() << "no counters here: " << run.out.substr(0, 500);
  EXPECT_EQ(run.exit_code, 1) << run.out.substr(0, 4000);
  EXPECT_LT(run.seconds, 20.0) << "not at the profile's --timeout (120 s)";
  EXPECT_NE(run.out.find("launch watchdog"), std::string::npos) << run.out.substr(0, 4000);
  EXPECT_NE(run.out.find("rmsnorm_kernel"), std::string::npos) << run.out.substr(0, 4000);
}

}  // namespace
}  // namespace kharness
