// Held-out shapes on a real GPU: `kharness check --holdout` catches a kernel that special-cases
// the shipped shapes (tests/fixtures/cheats/shipped_shapes_only.cu) and passes the honest seed.
// Skips without a GPU. Three checks of every workload with one trial each.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// `kharness check SOLUTION` for rmsnorm_h4096 under a fixed holdout seed, one trial, a fresh
// archive (no cached verdict), JSON on stdout.
testing::CommandResult check(const std::string& solution, const std::string& extra) {
  return testing::run_command("KHARNESS_HOLDOUT_SEED=1234 KHARNESS_ARCHIVE=$(mktemp -d) '" +
                              std::string(KHARNESS_BINARY) + "' check '" + solution +
                              "' --operator rmsnorm_h4096 --trials 1 --no-cache --json " + extra +
                              " 2>/dev/null");
}

TEST(Holdout, CheatPassesShippedShapesAndFailsHeldOut) {
  SKIP_WITHOUT_GPU();
  std::string cheat = testing::fixture("cheats/shipped_shapes_only.cu").string();
  auto plain = check(cheat, "");
  EXPECT_EQ(plain.exit_code, 0) << plain.out;
  auto held = check(cheat, "--holdout 4");
  EXPECT_EQ(held.exit_code, 1) << held.out;
  json v = json::parse(held.out);
  EXPECT_EQ(v["status"], "INCORRECT_NUMERICAL") << held.out;
  ASSERT_TRUE(v["score"].contains("holdout")) << held.out;
  EXPECT_EQ(v["score"]["holdout"]["drawn"], 4);
  EXPECT_EQ(v["score"]["holdout"]["seed_hash"].get<std::string>().rfind("sha256:", 0), 0u);
  EXPECT_EQ(held.out.find("1234"), std::string::npos) << "the seed itself must not be recorded";
  bool held_out_failed = false;
  for (const auto& w : v["workloads"]) {
    std::string uuid = w["uuid"];
    if (uuid.rfind("holdout-", 0) == 0 && w["status"] != "PASSED") held_out_failed = true;
    if (uuid.rfind("holdout-", 0) != 0) {
      EXPECT_EQ(w["status"], "PASSED") << uuid;
    }
  }
  EXPECT_TRUE(held_out_failed) << held.out;
}

TEST(Holdout, HonestSeedPassesHeldOut) {
  SKIP_WITHOUT_GPU();
  std::string seed = (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string();
  auto held = check(seed, "--holdout 4");
  EXPECT_EQ(held.exit_code, 0) << held.out;
  json v = json::parse(held.out);
  EXPECT_EQ(v["status"], "PASSED");
  int held_out = 0;
  for (const auto& w : v["workloads"])
    if (w["uuid"].get<std::string>().rfind("holdout-", 0) == 0) ++held_out;
  EXPECT_EQ(held_out, 4);
}

}  // namespace
}  // namespace kharness
