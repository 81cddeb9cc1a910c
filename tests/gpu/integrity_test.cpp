// Timed verdicts that cannot be gamed (docs/correctness.md#checked-iterations): every cheat in
// tests/fixtures/cheats against the real binary, each beside an honest kernel that must still pass.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "../test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no GPU"

// A few rmsnorm workloads, small to large: 1, 7, 64 and 16384 rows.
constexpr const char* kRmsnormWorkloads = "99179b18,5024178e,e2c76f8d,082f6370";

json run_json(const std::string& args, int expected_exit) {
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY + "' " + args + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.out.substr(0, 4000);
  auto j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out.substr(0, 3000);
  return j;
}

std::string cheat(const std::string& name) {
  return "'" + testing::fixture("cheats/" + name).string() + "'";
}

// A kernel that computes only when it believes it is checked fails, whichever launch gives it
// away: the correctness trials poison outputs from the timed iterations' distribution,
// so `check` mostly catches it already (output_not_written), and every timed iteration is checked
// against its own inputs' truth (stale_output naming the iteration).
void expect_caught(const std::string& file, const std::string& op, const std::string& workloads) {
  json v = run_json("validate " + cheat(file) + " --operator " + op + " --workloads " + workloads +
                        " --trials 1 --seed 3 --json",
                    1);
  EXPECT_EQ(v["status"], "INCORRECT_NUMERICAL") << file << ": " << v.dump(2).substr(0, 3000);
  ASSERT_TRUE(v.contains("failure")) << v.dump(2).substr(0, 2000);
  const std::string kind = v["failure"]["kind"];
  EXPECT_TRUE(kind == "stale_output" || kind == "output_not_written" || kind == "tolerance")
      << file << ": " << v["failure"].dump(2);
  if (kind == "stale_output") {
    EXPECT_TRUE(v["failure"]["evidence"].contains("iteration")) << v["failure"].dump(2);
  }
  std::printf("%s: %s: %s\n", file.c_str(), kind.c_str(),
              v["failure"]["message"].get<std::string>().c_str());
}

TEST(IntegrityGpu, SkipWhenTheOutputIsAlreadyFiniteIsCaught) {
  SKIP_WITHOUT_GPU();
  expect_caught("skip_if_finite.cu", "rmsnorm_h4096", kRmsnormWorkloads);
}

TEST(IntegrityGpu, ComputeOnlyOnTheCheckersPoisonIsCaught) {
  SKIP_WITHOUT_GPU();
  expect_caught("compute_if_poison.cu", "rmsnorm_h4096", kRmsnormWorkloads);
}

TEST(IntegrityGpu, ComputeOnlyOnANanOutputIsCaught) {
  SKIP_WITHOUT_GPU();
  expect_caught("compute_if_nan.cu", "rmsnorm_h4096", kRmsnormWorkloads);
}

// Three lines in the gemm_fp8 seed that skip a tile already holding a number: without checked
// timed iterations they would be timed thousands of times faster than the seed.
TEST(IntegrityGpu, GemmFp8SkippingFiniteTilesIsCaught) {
  SKIP_WITHOUT_GPU();
  expect_caught("gemm_fp8_skip_if_c_finite.cu", "gemm_fp8", "d8ea2ff1,deae70b3");
}

TEST(IntegrityGpu, AWorkspaceAssumedZeroFailsTheCheck) {
  SKIP_WITHOUT_GPU();
  json c = run_json("check " + cheat("workspace_assumed_zero.cu") +
                        " --operator rmsnorm_h4096 --workloads 99179b18 --trials 1 --seed 3 --json",
                    1);
  EXPECT_EQ(c["status"], "INCORRECT_NUMERICAL") << c.dump(2).substr(0, 2000);
  EXPECT_EQ(c["failure"]["kind"], "nan_or_inf") << c["failure"].dump(2);
}

// State in __device__ globals (a result cache keyed by an input fingerprint, a %globaltimer
// timing-loop detector) is reset before every iteration, so the shortcut never fires: the verdict
// passes at the honest path's latency (it spins 40 us), never at a cache hit's few microseconds.
void expect_no_shortcut(const std::string& file, const std::string& state_reset) {
  json v = run_json("validate " + cheat(file) +
                        " --operator rmsnorm_h4096 --workloads 99179b18,5024178e,e2c76f8d"
                        " --trials 1 --seed 3 --json --state-reset " +
                        state_reset,
                    0);
  ASSERT_EQ(v["status"], "PASSED") << file << ": " << v.dump(2).substr(0, 3000);
  for (const auto& w : v["workloads"]) {
    const json& c = w["timing"]["candidate"];
    EXPECT_GE(c["latency"].get<double>(), 38e-6) << file << " " << w["uuid"] << ": " << c.dump(2);
    EXPECT_EQ(c["integrity"]["state_reset"],
              state_reset == "reload" ? "module reload" : "globals restored")
        << c.dump(2);
    std::printf("%s (%s) %s: %.1f us\n", file.c_str(), state_reset.c_str(),
                w["uuid"].get<std::string>().substr(0, 8).c_str(),
                c["latency"].get<double>() * 1e6);
  }
}

TEST(IntegrityGpu, AResultCacheInDeviceGlobalsNeverHits) {
  SKIP_WITHOUT_GPU();
  expect_no_shortcut("input_cache.cu", "auto");
  expect_no_shortcut("input_cache.cu", "reload");
}

TEST(IntegrityGpu, ATimingLoopDetectorNeverFires) {
  SKIP_WITHOUT_GPU();
  expect_no_shortcut("loop_detector.cu", "auto");
}

TEST(IntegrityGpu, NothingSurvivesInSharedMemory) {
  SKIP_WITHOUT_GPU();
  json v = run_json("validate " + cheat("shared_leftover.cu") + " --operator rmsnorm_h4096" +
                        " --workloads " + kRmsnormWorkloads + " --trials 1 --seed 3 --json",
                    0);
  EXPECT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
}

// The honest twin of the globals cheats: an initialised __device__ table and a self-resetting
// counter still pass, and the verdict says the globals were restored.
TEST(IntegrityGpu, HonestDeviceGlobalsStillPass) {
  SKIP_WITHOUT_GPU();
  json v = run_json("validate " + cheat("honest_globals.cu") + " --operator rmsnorm_h4096" +
                        " --workloads " + kRmsnormWorkloads + " --trials 2 --seed 3 --json",
                    0);
  ASSERT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
  const json& i = v["workloads"][0]["timing"]["candidate"]["integrity"];
  EXPECT_EQ(i["module_globals"], 2) << i.dump();
  EXPECT_EQ(i["state_reset"], "globals restored") << i.dump();
  EXPECT_GT(i["checked_iterations"].get<int>(), 10) << i.dump();
}

// The correctness trials compare outputs on the device, so the expected outputs are in
// device memory while the candidate runs. overwrites_expected.cu writes a wrong answer (1.0
// everywhere) to its output and the same over the memory just past its output's guard zone,
// where a copy allocated after the reference's output buffer would lie (the candidate's output
// most likely took the freed reference buffer's place). A plain copy there would then equal its
// output; kharness's copies are sealed and checksummed, so it never passes. Which failure it gets
// depends on where the driver put the buffers: harness_memory_modified (the writes landed on the
// sealed copy and the checksum caught them before any comparison counted), tolerance (they
// missed it and the wrong answer is compared as it is) or illegal_address (that memory is not
// mapped). The host comparison (KHARNESS_HOST_COMPARE=1) holds its copy on the host: tolerance or
// illegal_address. Each run prints which.
TEST(IntegrityGpu, WritingItsAnswerWhereTheReferenceCopyLiesNeverPasses) {
  SKIP_WITHOUT_GPU();
  const std::set<std::string> kinds = {"harness_memory_modified", "tolerance", "illegal_address"};
  for (const std::string env : {"", "KHARNESS_HOST_COMPARE=1 "}) {
    auto r = testing::run_command(env + "'" + KHARNESS_BINARY + "' check " +
                                  cheat("overwrites_expected.cu") +
                                  " --operator rmsnorm_h4096 --workloads 99179b18,5024178e,"
                                  "e2c76f8d --trials 1 --seed 3 --no-cache --json 2>/dev/null");
    EXPECT_EQ(r.exit_code, 1) << env << r.out.substr(0, 3000);
    json v = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(v.is_object()) << r.out.substr(0, 3000);
    EXPECT_NE(v["status"], "PASSED") << env << v.dump(2).substr(0, 3000);
    ASSERT_TRUE(v["failure"].is_object()) << v.dump(2).substr(0, 3000);
    const std::string kind = v["failure"].value("kind", "");
    EXPECT_TRUE(kinds.count(kind)) << env << "kind " << kind << ": " << v["failure"].dump(2);
    if (!env.empty()) EXPECT_NE(kind, "harness_memory_modified") << v["failure"].dump(2);
    std::printf("overwrites_expected.cu (%s comparison): %s / %s: %s\n",
                env.empty() ? "device" : "host", v["status"].get<std::string>().c_str(),
                kind.c_str(), v["failure"].value("message", "").c_str());
  }
}

// What a PASSED timed verdict rests on is in the verdict: every timed iteration checked on the
// device, three input sets.
TEST(IntegrityGpu, TheSeedPassesWithEveryIterationChecked) {
  SKIP_WITHOUT_GPU();
  json v = run_json(
      "validate '" + (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string() +
          "' --operator rmsnorm_h4096 --workloads " + kRmsnormWorkloads + " --seed 3 --json",
      0);
  ASSERT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
  for (const auto& w : v["workloads"]) {
    const json& t = w["timing"];
    EXPECT_EQ(t["input_sets"], 3) << t.dump(2);
    for (const char* role : {"candidate", "baseline"}) {
      const json& i = t[role]["integrity"];
      EXPECT_EQ(i["check"], "device") << i.dump();
      // Warmup iterations are checked too: at least the samples.
      EXPECT_GE(i["checked_iterations"].get<int>(), t[role]["count"].get<int>()) << t.dump(2);
    }
  }
}

}  // namespace
}  // namespace kharness
