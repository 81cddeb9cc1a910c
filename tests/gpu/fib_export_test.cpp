// `kharness export --fib` round trip on a real GPU: `kharness check` of the exported Solution JSON
// gives the verdict of the source it came from, workload by workload, for the sm_90a gemm_fp8 and
// fp16 GEMM seeds (tensor maps, a PDL reduction), the PDL + cooperative fixture and a plan with
// variants (the same variant per workload). Skips without a GPU, and without an sm_90 GPU for the
// seeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

json check_json(const std::string& file, const std::string& op) {
  return gpu_test::kharness_json("check '" + file + "' --operator " + op + " --trials 1");
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
    // A dispatching plan: the same variant serves each workload.
    EXPECT_EQ(b["workloads"][i].value("variant", ""), a["workloads"][i].value("variant", "")) << i;
  }
}

using gpu_test::on_hopper;

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

// A plan with variants (chosen by batch size): the workloads that each variant serves pass the same
// way from the exported JSON. FlashInfer-Bench's runner runs the generated launcher itself, with
// its if / else if chain, in scripts/fib-peer.sh.
TEST(FibExportVerdict, DispatchingPlan) {
  SKIP_WITHOUT_GPU();
  std::string source = testing::fixture("check/dispatch_by_batch.cu").string();
  expect_same_verdict(source, "rmsnorm_h4096");
  json a = check_json(source, "rmsnorm_h4096");
  std::set<std::string> variants;
  for (const auto& w : a["workloads"]) variants.insert(w.value("variant", ""));
  EXPECT_EQ(variants.size(), 3u) << "the workloads do not reach every variant";
}

TEST(FibExportVerdict, PdlCooperativeFixture) {
  SKIP_WITHOUT_GPU();
  expect_same_verdict(testing::fixture("launch/pdl_cooperative_copy.cu").string(), "copy_f32");
}

}  // namespace
}  // namespace kharness
