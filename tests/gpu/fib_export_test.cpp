// `kharness export --fib` round trip on a real GPU: `kharness check` of the exported Solution JSON
// gives the verdict of the source it came from, workload by workload, for the sm_90a gemm_fp8 and
// fp16 GEMM seeds (tensor maps, a PDL reduction) and the PDL + cooperative fixture. Skips without
// a GPU, and without an sm_90 GPU for the seeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

json check_json(const std::string& file, const std::string& op) {
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY + "' check '" + file +
                                "' --operator " + op + " --trials 1 --json 2>/dev/null");
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out.substr(0, 4000);
  return j;
}

void expect_same_verdict(const std::string& source, const std::string& op) {
  testing::TempDir dir;
  std::string exported = (dir.path() / "fib.json").string();
  auto e = testing::kharness("--archive '" + dir.path().string() + "/a' export '" + source +
                             "' --operator " + op + " --fib '" + exported + "'");
  ASSERT_EQ(e.exit_code, 0) << e.out;
  json a = check_json(source, op);
  json b = check_json(exported, op);
  ASSERT_TRUE(a.is_object() && b.is_object());
  EXPECT_EQ(a["status"], "PASSED") << a.dump(1).substr(0, 4000);
  EXPECT_EQ(b["status"], a["status"]) << b.dump(1).substr(0, 4000);
  ASSERT_EQ(b["workloads"].size(), a["workloads"].size());
  for (std::size_t i = 0; i < a["workloads"].size(); ++i) {
    EXPECT_EQ(b["workloads"][i]["status"], a["workloads"][i]["status"]) << i;
  }
}

bool on_hopper() { return default_arch_for_device(0) == "sm_90a"; }

TEST(FibExportVerdict, Sm90aGemmFp8Seed) {
  SKIP_WITHOUT_GPU();
  if (!on_hopper()) GTEST_SKIP() << "the sm_90a seed needs an sm_90 GPU";
  expect_same_verdict(
      (testing::source_dir() / "operators/_families/gemm_fp8/seed.sm_90a.cu").string(), "gemm_fp8");
}

TEST(FibExportVerdict, Sm90aGemmSeed) {
  SKIP_WITHOUT_GPU();
  if (!on_hopper()) GTEST_SKIP() << "the sm_90a seed needs an sm_90 GPU";
  expect_same_verdict((testing::source_dir() / "operators/_families/gemm/seed.sm_90a.cu").string(),
                      "gemm_n6144_k4096");
}

TEST(FibExportVerdict, PdlCooperativeFixture) {
  SKIP_WITHOUT_GPU();
  expect_same_verdict(testing::fixture("launch/pdl_cooperative_copy.cu").string(), "copy_f32");
}

}  // namespace
}  // namespace kharness
