// The sm_90a GEMM seeds (TMA tensor maps + wgmma, warp-specialised) and the launch-attribute
// fixtures on a real GPU, through the built binary: every workload of gemm_n6144_k4096 and
// gemm_fp8 PASSES with the seed, a sample of the seeds' tune configurations PASSES, the PDL +
// cooperative fixture PASSES and a cooperative grid that cannot be resident is REJECTED before it
// runs. Skips without a GPU, and without an sm_90 GPU for the seeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

using gpu_test::expect_every_workload_passes;
using gpu_test::on_hopper;

json check_json(const std::string& args) { return gpu_test::kharness_json("check " + args); }

TEST(HopperGemm, Fp16SeedPassesEveryWorkload) {
  SKIP_WITHOUT_GPU();
  if (!on_hopper()) GTEST_SKIP() << "the sm_90a seed needs an sm_90 GPU";
  auto seed = testing::source_dir() / "operators/_families/gemm/seed.sm_90a.cu";
  expect_every_workload_passes(
      check_json("'" + seed.string() + "' --operator gemm_n6144_k4096 --trials 1"), 11);
}

TEST(HopperGemm, Fp8SeedPassesEveryWorkload) {
  SKIP_WITHOUT_GPU();
  if (!on_hopper()) GTEST_SKIP() << "the sm_90a seed needs an sm_90 GPU";
  auto seed = testing::source_dir() / "operators/_families/gemm_fp8/seed.sm_90a.cu";
  expect_every_workload_passes(check_json("'" + seed.string() + "' --operator gemm_fp8 --trials 1"),
                               13);
}

// Every tile shape and depth of a sample of the knob space, on ragged and decode shapes.
TEST(HopperGemm, TuneConfigurationsPass) {
  SKIP_WITHOUT_GPU();
  if (!on_hopper()) GTEST_SKIP() << "the sm_90a seed needs an sm_90 GPU";
  // Decode, ragged M and ragged N (gemm_fp8's N = 2112 ends in half a 128-wide tile).
  const std::pair<std::string, std::string> cases[] = {
      {"gemm_n6144_k4096", "c6a8dede,d10fa672,332ac347,77618ad8,acc3751e"},
      {"gemm_fp8", "d8ea2ff1,deae70b3,acaeb4c2,4801a294"}};
  for (const auto& [op, workloads] : cases) {
    testing::TempDir dir;
    auto listed = testing::kharness("tune-space " + op + " --sample 10 --json --out '" +
                                    dir.path().string() + "'");
    ASSERT_EQ(listed.exit_code, 0) << listed.out;
    json space = json::parse(listed.out.substr(listed.out.find('{')));
    EXPECT_NE(space.dump().find("seed.sm_90a.cu"), std::string::npos) << space.dump();
    std::string files;
    for (const auto& row : space["sample"]) files += " '" + row["file"].get<std::string>() + "'";
    json verdicts = check_json(files.substr(1) + " --operator " + op + " --workloads " + workloads +
                               " --trials 1");
    ASSERT_TRUE(verdicts.is_array()) << verdicts.dump().substr(0, 2000);
    ASSERT_EQ(verdicts.size(), space["sample"].size());
    for (const auto& v : verdicts) EXPECT_EQ(v["status"], "PASSED") << v.dump(1).substr(0, 4000);
  }
}

TEST(LaunchAttributes, PdlAndCooperativeFixturePasses) {
  SKIP_WITHOUT_GPU();
  auto v = check_json("'" + testing::fixture("launch/pdl_cooperative_copy.cu").string() +
                      "' --operator copy_f32 --trials 2");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["status"], "PASSED") << v.dump(1).substr(0, 4000);
}

TEST(LaunchAttributes, CooperativeGridThatCannotBeResidentIsRejected) {
  SKIP_WITHOUT_GPU();
  auto v = check_json("'" + testing::fixture("launch/cooperative_not_resident.cu").string() +
                      "' --operator copy_f32 --trials 1");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["status"], "REJECTED") << v.dump(1).substr(0, 4000);
  EXPECT_NE(v.dump().find("cannot be resident"), std::string::npos) << v.dump(1).substr(0, 4000);
}

}  // namespace
}  // namespace kharness
