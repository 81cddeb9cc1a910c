// The CuTe fixtures (tests/fixtures/cute/) on a real GPU through the built binary: the CuTe
// rmsnorm and the CuTe Hopper GEMMs (TMA copy atoms, GMMA MMA atoms; fp16 and block-scaled fp8)
// PASS every workload, and the
// GEMM's speed against cuBLASLt at M >= 256 with its speed-of-light fraction. Needs a CUTLASS
// root (KHARNESS_CUTLASS, or an installed nvidia-cutlass wheel): skips without a GPU, without an
// sm_90 GPU for the GEMM, and without CUTLASS headers.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"

namespace kharness {
namespace {

using nlohmann::json;

#define SKIP_WITHOUT_CUTLASS() \
  if (!cutlass_root()) GTEST_SKIP() << "no CUTLASS headers: " << cutlass_missing_hint()

std::optional<CutlassRoot> cutlass_root() {
  try {
    return find_cutlass();
  } catch (const Error&) {
    return std::nullopt;
  }
}

using gpu_test::on_hopper;

// A CuTe GEMM compiles in about 8 s on a quiet machine: a wider compile limit than the default
// minute, so that a loaded one does not fail the test.
json run_json(const std::string& args) {
  return gpu_test::kharness_json("--compile-timeout 300 " + args);
}

// Every workload PASSED, under the CUTLASS root of this machine.
void expect_every_workload_passes(const json& v, std::size_t workloads) {
  gpu_test::expect_every_workload_passes(v, workloads);
  if (v.is_object())
    EXPECT_EQ(v["environment"]["cutlass"], cutlass_root()->version) << v["environment"].dump();
}

std::string fixture(const char* name) {
  return "'" + testing::fixture(std::string("cute/") + name).string() + "'";
}

// The gemm family's CuTe seed, run as a fixture.
std::string cute_gemm_seed() {
  return "'" +
         (testing::source_dir() / "operators" / "_families" / "gemm" / "seed.cute.sm_90a.cu")
             .string() +
         "'";
}

TEST(CuteGpu, RmsnormPassesEveryWorkload) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUTLASS();
  expect_every_workload_passes(
      run_json("check " + fixture("rmsnorm_h4096.cu") + " --operator rmsnorm_h4096 --trials 2"),
      16);
}

TEST(CuteGpu, HopperGemmPassesEveryWorkload) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUTLASS();
  if (!on_hopper()) GTEST_SKIP() << "the CuTe GEMM uses sm_90a TMA and GMMA";
  expect_every_workload_passes(
      run_json("check " + cute_gemm_seed() + " --operator gemm_n6144_k4096 --trials 2"), 11);
}

// The block-scaled fp8 GEMM (fp8 GMMA atoms, per-128-K promotion with the A and B scales).
TEST(CuteGpu, BlockScaledFp8GemmPassesEveryWorkload) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUTLASS();
  if (!on_hopper()) GTEST_SKIP() << "the CuTe fp8 GEMM uses sm_90a TMA and GMMA";
  expect_every_workload_passes(
      run_json("check " + fixture("gemm_fp8.cu") + " --operator gemm_fp8 --trials 2"), 13);
}

// M = 256, 972, 2048, 8192 against cuBLASLt: at least 0.7x, with the speed-of-light fraction.
TEST(CuteGpu, HopperGemmAgainstCublasLt) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUTLASS();
  if (!on_hopper()) GTEST_SKIP() << "the CuTe GEMM uses sm_90a TMA and GMMA";
  json v = run_json("bench " + cute_gemm_seed() +
                    " --operator gemm_n6144_k4096 --baseline cublaslt --seed 1"
                    " --workloads 9b6b5bfc,77618ad8,215393d4,9e348845");
  ASSERT_TRUE(v.is_object()) << v.dump().substr(0, 2000);
  ASSERT_EQ(v["status"], "PASSED") << v.dump(1).substr(0, 6000);
  for (const auto& w : v["workloads"]) {
    const json& t = w["timing"];
    ASSERT_TRUE(t.contains("baseline")) << w.dump();
    const double speedup = t["speedup"].get<double>();
    const double sol = t.contains("sol") ? t["sol"]["fraction"].get<double>() : 0.0;
    std::printf("[ measured ] CuTe GEMM %s: %.2f us, cuBLASLt %.2f us, %.2fx, %.0f%% of SOL\n",
                w["axes"].dump().c_str(), t["candidate"]["latency"].get<double>() * 1e6,
                t["baseline"]["latency"].get<double>() * 1e6, speedup, 100 * sol);
    // Thousands of -default-device constants: restored by copies, not a module reload.
    std::printf("[ measured ] CuTe GEMM state reset: %s\n",
                t["candidate"].value("integrity", json::object()).dump().c_str());
    EXPECT_EQ(t["candidate"]["integrity"]["state_reset"], "globals restored") << w.dump();
    EXPECT_GE(speedup, 0.7) << w["axes"].dump();
  }
}

}  // namespace
}  // namespace kharness
