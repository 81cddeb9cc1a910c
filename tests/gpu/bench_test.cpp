// The timing stage end to end through the real binary, on a GPU (skips without one).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "../test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no GPU"

constexpr const char* kLargest = "082f6370";  // rmsnorm_h4096, 16384 rows

json run_json(const std::string& args, int expected_exit, double* seconds = nullptr) {
  auto start = std::chrono::steady_clock::now();
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY + "' " + args + " 2>/dev/null");
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.out.substr(0, 3000);
  auto j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out.substr(0, 3000);
  return j;
}

std::string fixture(const std::string& name) { return "'" + testing::fixture(name).string() + "'"; }
std::string seed() {
  return "'" + (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string() + "'";
}

TEST(BenchGpu, ASecondLongKernelOnTheFirstOnesHeelsIsTimed) {
  SKIP_WITHOUT_GPU();
  for (const char* timer : {"cupti", "events"}) {
    json v = run_json("bench " + fixture("bench/two_kernels.cu") +
                          " --operator rmsnorm_h4096 --workloads " + kLargest +
                          " --no-baseline --seed 1 --json --timer " + timer,
                      0);
    ASSERT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
    const json& c = v["workloads"][0]["timing"]["candidate"];
    EXPECT_GE(c["median"].get<double>(), 200e-6)
        << timer << ": the 200 us spin kernel was not counted";
    if (std::string(timer) == "cupti") {
      EXPECT_NE(c["kernels"].get<std::string>().find("spin_kernel"), std::string::npos) << c.dump();
    }
  }
}

TEST(BenchGpu, FastOnlyOnRepeatedInputsIsStaleOutput) {
  SKIP_WITHOUT_GPU();
  json v = run_json("bench " + fixture("bench/repeat_cache.cu") +
                        " --operator rmsnorm_h4096 --workloads " + kLargest +
                        " --no-baseline --seed 1 --json",
                    1);
  EXPECT_EQ(v["status"], "INCORRECT_NUMERICAL") << v.dump(2).substr(0, 3000);
  EXPECT_EQ(v["failure"]["kind"], "stale_output") << v.dump(2).substr(0, 3000);
}

TEST(BenchGpu, OfficialProtocolTakesFiftyIterationsTimesThreeTrials) {
  SKIP_WITHOUT_GPU();
  json v = run_json("bench " + seed() + " --operator rmsnorm_h4096 --workloads " +
                        std::string(kLargest) + " --no-baseline --seed 1 --json --timing official",
                    0);
  const json& c = v["workloads"][0]["timing"]["candidate"];
  EXPECT_GE(c["count"].get<int>(), 150);
  EXPECT_GT(c["official_latency"].get<double>(), 0.0);
}

TEST(BenchGpu, ValidateTheSeedEveryWorkloadWithSpeedupAndSol) {
  SKIP_WITHOUT_GPU();
  double seconds = 0;
  json v =
      run_json("validate " + seed() + " --operator rmsnorm_h4096 --seed 1 --json", 0, &seconds);
  std::printf("whole-process validate of the rmsnorm seed: %.2f s\n", seconds);
  ASSERT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
  ASSERT_EQ(v["workloads"].size(), 16u);
  for (const auto& w : v["workloads"]) {
    const json& t = w["timing"];
    ASSERT_TRUE(t.contains("candidate") && t.contains("baseline")) << w.dump();
    EXPECT_GT(t["speedup"].get<double>(), 0.0);
    ASSERT_TRUE(t.contains("sol")) << w.dump();
    EXPECT_GT(t["sol"]["fraction"].get<double>(), 0.0);
    EXPECT_LT(t["sol"]["fraction"].get<double>(), 1.5);
  }
  EXPECT_GT(v["score"]["geomean_speedup"].get<double>(), 0.0);
}

// The built-in cuBLASLt baseline: timed in the same loop as the candidate, its outputs checked
// like a solution's, the library named in the timing record; a bad baseline name is exit 2.
TEST(BenchGpu, CublasLtBaselineForAGemmOperator) {
  SKIP_WITHOUT_GPU();
  const std::string seed_gemm =
      "'" + (testing::source_dir() / "operators/_families/gemm/seed.cu").string() + "'";
  json v = run_json("bench " + seed_gemm +
                        " --operator gemm_n4096_k14336 --workloads a6fff11f --baseline cublaslt"
                        " --seed 1 --json",
                    0);
  ASSERT_EQ(v["status"], "PASSED") << v.dump(2).substr(0, 3000);
  const json& t = v["workloads"][0]["timing"];
  ASSERT_TRUE(t.contains("baseline")) << t.dump(2);
  EXPECT_NE(t["baseline"]["solution"].get<std::string>().find("cuBLASLt"), std::string::npos);
  EXPECT_FALSE(t["baseline"]["kernels"].get<std::string>().empty());
  EXPECT_GT(t["speedup"].get<double>(), 0.0);
  std::printf("gemm_n4096_k14336 M=1: seed %.2f us, cuBLASLt %.2f us (%s)\n",
              t["candidate"]["latency"].get<double>() * 1e6,
              t["baseline"]["latency"].get<double>() * 1e6,
              t["baseline"]["kernels"].get<std::string>().c_str());
  // Not a GEMM definition: refused with the reason.
  auto r = testing::kharness("bench " + seed() +
                             " --operator rmsnorm_h4096 --workloads 99179b18 --baseline cublaslt");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("cublaslt baseline needs a GEMM definition"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness
