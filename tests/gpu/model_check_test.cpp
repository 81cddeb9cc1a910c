// model-check end to end (the built binary): four Llama-3.1-8B decode layers with every seed
// substituted pass at every decode shape the model lists, and four prefill layers at two ragged
// batches; a fused add-RMSNorm (op_type rmsnorm) 0.5% too large, which passes its own operator
// check, fails the model check, named by node and layer. (The first RMSNorm, attn_norm, biased
// the same way would pass: in this layer it scales only q, since the KV cache is drawn, not
// appended to, and a softmax over 1024+ random keys barely moves.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using testing::TempDir;

nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

const std::string kBiased = testing::fixture("models/fused_add_rmsnorm_h4096_biased.cu").string();

TEST(ModelCheck, FourDecodeLayersWithSeedsPass) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto json = dir.path() / "verdict.json";
  auto r = testing::kharness("model-check --model llama-3.1-8b --phase decode --layers 4 --json '" +
                             json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json v = read_json(json);
  EXPECT_TRUE(v["passed"].get<bool>());
  EXPECT_EQ(v["layers"], 4);
  EXPECT_EQ(v["tolerance"]["max_bias"], 0.0005);
  // The seeds ran (the gemm family's, the norms', the decode attention's), not the references.
  EXPECT_NE(v["solutions"]["qkv"], "reference");
  EXPECT_NE(v["solutions"]["attn_norm"], "reference");
  ASSERT_EQ(v["shapes"].size(), 9U) << v.dump(2);  // batch 1, 16, 64 x KV 1024, 4096, 8192
  for (const auto& s : v["shapes"]) {
    EXPECT_TRUE(s["passed"].get<bool>()) << s.dump(2);
    ASSERT_EQ(s["layers"].size(), 4U);
    // Drift is measured, not zero: seeds round differently from the references.
    EXPECT_GT(s["layers"][3]["max_rel_error"].get<double>(), 0.0) << s.dump(2);
    EXPECT_FALSE(s["nodes"].empty());
  }
}

// Prefill (ragged batches, causal paged attention) at shapes small enough for a quick test: the
// shipped model with its prefill batches replaced.
TEST(ModelCheck, FourPrefillLayersWithSeedsPass) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  nlohmann::ordered_json m;
  std::ifstream(testing::source_dir() / "models" / "llama-3.1-8b.json") >> m;
  m["phases"]["prefill"]["seq_lens"] = {{1}, {17, 250, 1531}};
  auto model = dir.path() / "llama-prefill.json";
  std::ofstream(model) << m.dump(2);
  auto json = dir.path() / "verdict.json";
  auto r = testing::kharness("model-check --model '" + model.string() +
                             "' --phase prefill --layers 4 --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json v = read_json(json);
  EXPECT_NE(v["solutions"]["attn"], "reference");  // the prefill family's seed
  ASSERT_EQ(v["shapes"].size(), 2U);
  EXPECT_EQ(v["shapes"][1]["shape"], "prefill tokens=[17,250,1531]");
  for (const auto& s : v["shapes"]) EXPECT_TRUE(s["passed"].get<bool>()) << s.dump(2);
}

TEST(ModelCheck, BiasedFusedAddRmsnormPassesItsOwnCheck) {
  SKIP_WITHOUT_GPU();
  auto r = testing::kharness("check '" + kBiased + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(ModelCheck, BiasedFusedAddRmsnormFailsNamingTheNodeAndLayer) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto json = dir.path() / "verdict.json";
  auto r = testing::kharness(
      "model-check --model llama-3.1-8b --phase decode --layers 4 --use "
      "fused_add_rmsnorm_h4096='" +
      kBiased + "' --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  nlohmann::json v = read_json(json);
  EXPECT_FALSE(v["passed"].get<bool>());
  EXPECT_EQ(v["solutions"]["mlp_norm"], kBiased);
  for (const auto& s : v["shapes"]) {
    ASSERT_FALSE(s["passed"].get<bool>()) << s.dump(2);
    EXPECT_EQ(s["failure"]["node"], "mlp_norm") << s.dump(2);
    EXPECT_EQ(s["failure"]["definition"], "fused_add_rmsnorm_h4096");
    EXPECT_GE(s["failure"]["layer"].get<int>(), 0);
    EXPECT_LT(s["failure"]["layer"].get<int>(), 4);
    // The node's own deviation inside the layer is the 0.5% bias.
    bool seen = false;
    for (const auto& n : s["nodes"]) {
      if (n["node"] != "mlp_norm") continue;
      seen = true;
      EXPECT_NEAR(n["bias"].get<double>(), 0.005, 0.002) << n.dump();
    }
    EXPECT_TRUE(seen);
  }
  EXPECT_NE(r.out.find("mlp_norm (fused_add_rmsnorm_h4096) in layer"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness
