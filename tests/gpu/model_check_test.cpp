// model-check end to end (the built binary): four Llama-3.1-8B decode layers with every seed
// substituted pass at every decode shape the model lists, and four prefill layers at two ragged
// batches; a fused add-RMSNorm (op_type rmsnorm) 0.5% too large, which passes its own operator
// check, fails the model check, named by node and layer. A RoPE that rotates the keys by the
// wrong position fails too: the layer appends its keys and values to the paged KV cache before
// attention reads them, so a wrong key reaches the hidden state (before, nothing read k_out).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
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
const std::string kRopeKeys = testing::fixture("models/rope_d128_k_next_position.cu").string();

// The shipped Llama model with its prefill batches replaced by `seq_lens`, written into `dir`.
std::filesystem::path llama_with_prefill(const TempDir& dir, const nlohmann::json& seq_lens) {
  nlohmann::ordered_json m;
  std::ifstream(testing::source_dir() / "models" / "llama-3.1-8b.json") >> m;
  m["phases"]["prefill"]["seq_lens"] = seq_lens;
  auto model = dir.path() / "llama-prefill.json";
  std::ofstream(model) << m.dump(2);
  return model;
}

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
  auto model = llama_with_prefill(dir, {{1}, {17, 250, 1531}});
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

// The keys rotated by the next position's angle: its own check fails on k_out (this is no subtle
// kernel; it shows that the layer's keys now reach attention through the cache).
TEST(ModelCheck, RopeWithWrongKeyPositionFailsItsOwnCheck) {
  SKIP_WITHOUT_GPU();
  auto r = testing::kharness("check '" + kRopeKeys + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("k_out"), std::string::npos) << r.out;
}

// In prefill every key attention reads is one the layer appended: the wrong keys move the hidden
// state far past the model tolerance, and the failure names rope in layer 0.
TEST(ModelCheck, PrefillAttentionReadsTheAppendedKeys) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto model = llama_with_prefill(dir, {{17, 250, 1531}});
  auto json = dir.path() / "verdict.json";
  auto r = testing::kharness("model-check --model '" + model.string() +
                             "' --phase prefill --layers 2 --use rope='" + kRopeKeys +
                             "' --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  nlohmann::json v = read_json(json);
  ASSERT_EQ(v["shapes"].size(), 1U);
  const auto& s = v["shapes"][0];
  EXPECT_FALSE(s["passed"].get<bool>());
  EXPECT_EQ(s["failure"]["node"], "rope") << s.dump(2);
  EXPECT_EQ(s["failure"]["layer"], 0) << s.dump(2);
  EXPECT_NE(s["failure"]["reason"].get<std::string>().find("k_out"), std::string::npos);
  // The hidden state itself is off: the keys reached attention through the cache.
  ASSERT_EQ(s["layers"].size(), 2U);
  EXPECT_LT(s["layers"][0]["cosine"].get<double>(), v["tolerance"]["min_cosine"].get<double>())
      << s.dump(2);
}

// In decode only each sequence's newest key is the layer's (the rest is the drawn history), so
// the hidden state barely moves; the rope node still fails its own check inside the layer.
TEST(ModelCheck, DecodeNamesARopeThatBreaksItsOwnCheckInsideTheLayer) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto json = dir.path() / "verdict.json";
  auto r =
      testing::kharness("model-check --model llama-3.1-8b --phase decode --layers 1 --use rope='" +
                        kRopeKeys + "' --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  nlohmann::json v = read_json(json);
  for (const auto& s : v["shapes"]) {
    ASSERT_FALSE(s["passed"].get<bool>()) << s.dump(2);
    EXPECT_EQ(s["failure"]["node"], "rope") << s.dump(2);
    EXPECT_EQ(s["failure"]["layer"], 0);
  }
  EXPECT_NE(
      r.out.find("node rope (rope_with_cos_sin_cache_neox_style_d128_rd128) in layer 0 breaks "
                 "its own operator check"),
      std::string::npos)
      << r.out;
}

// --time: one decode shape's layer timed end to end, the baseline layer (seeds) against the layer
// with the RMSNorm reference substituted for its seed; the verdict, the Markdown summary and the
// HTML report carry the layer speedup, each node's time and share, and the 5% sum check.
TEST(ModelCheck, TimedDecodeLayerGivesSpeedupsSharesAndTheSumCheck) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  nlohmann::ordered_json m;
  std::ifstream(testing::source_dir() / "models" / "llama-3.1-8b.json") >> m;
  m["phases"]["decode"]["batch_sizes"] = {16};
  m["phases"]["decode"]["kv_lens"] = {4096};
  auto model = dir.path() / "llama-decode.json";
  std::ofstream(model) << m.dump(2);
  const std::string rmsnorm_reference =
      (testing::source_dir() / "operators" / "_families" / "rmsnorm" / "reference.cu").string();
  auto json = dir.path() / "verdict.json";
  auto md = dir.path() / "verdict.md";
  auto html = dir.path() / "verdict.html";
  auto r =
      testing::kharness("model-check --model '" + model.string() +
                        "' --phase decode --layers 1 --time --timed-passes 10 --use attn_norm='" +
                        rmsnorm_reference + "' --json '" + json.string() + "' --markdown '" +
                        md.string() + "' --html '" + html.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json v = read_json(json);
  ASSERT_EQ(v["shapes"].size(), 1U);
  const auto& t = v["shapes"][0]["timing"];
  ASSERT_TRUE(t.is_object()) << v.dump(2);
  EXPECT_EQ(t["passes"], 10);
  EXPECT_GT(t["baseline_seconds"].get<double>(), 0.0);
  EXPECT_GT(t["seconds"].get<double>(), 0.0);
  ASSERT_EQ(t["nodes"].size(), 9U);  // every node of the decode layer
  double shares = 0;
  for (const auto& n : t["nodes"]) {
    EXPECT_GT(n["seconds"].get<double>(), 0.0) << n.dump();
    EXPECT_EQ(n["substituted"].get<bool>(), n["node"] == "attn_norm") << n.dump();
    shares += n["share"].get<double>();
  }
  EXPECT_NEAR(shares, t["node_sum"].get<double>() / t["seconds"].get<double>(), 1e-9);
  // Every launch of every node back to back: the node times cover the span within 5%.
  EXPECT_TRUE(t["sums_match"].get<bool>()) << t.dump(2);
  EXPECT_NE(r.out.find("layer "), std::string::npos) << r.out;
  std::ifstream md_in(md);
  std::string summary((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find("| attn_norm (substituted) | rmsnorm_h4096 |"), std::string::npos)
      << summary;
  std::ifstream html_in(html);
  std::string page((std::istreambuf_iterator<char>(html_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("Layer time by operator"), std::string::npos);
}

// The layers run in a worker process, as `check`'s trials do: a substituted kernel that traps
// inside the layer is a RUNTIME_ERROR verdict (exit 1), and kharness itself goes on to write it.
TEST(ModelCheck, AKernelThatTrapsInsideTheLayerIsARuntimeError) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto json = dir.path() / "verdict.json";
  auto r = testing::kharness(
      "model-check --model '" + testing::fixture("models/tiny.json").string() +
      "' --layers 1 --use rmsnorm_h4096='" + testing::fixture("check/trap.cu").string() +
      "' --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  nlohmann::json v = read_json(json);
  EXPECT_FALSE(v["passed"].get<bool>());
  EXPECT_EQ(v["status"], "RUNTIME_ERROR") << v.dump(2);
  EXPECT_NE(r.out.find("FAILED (RUNTIME_ERROR)"), std::string::npos) << r.out;
  ASSERT_FALSE(v["shapes"].empty()) << v.dump(2);
  EXPECT_EQ(v["shapes"][0]["shape"], "decode batch=1 kv=16");
}

// A kernel that never finishes inside the layer: the worker's launch watchdog declares the hang
// within seconds (TIMEOUT, exit 1), naming the shape that was running, long before --timeout.
TEST(ModelCheck, AKernelThatHangsInsideTheLayerIsATimeoutWithinSeconds) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto json = dir.path() / "verdict.json";
  const auto start = std::chrono::steady_clock::now();
  auto r = testing::kharness(
      "model-check --model '" + testing::fixture("models/tiny.json").string() +
      "' --layers 1 --launch-timeout 2 --timeout 300 --use rmsnorm_h4096='" +
      testing::fixture("check/infinite_loop.cu").string() + "' --json '" + json.string() + "'");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 1) << r.out;
  EXPECT_LT(seconds, 120) << r.out;
  nlohmann::json v = read_json(json);
  EXPECT_EQ(v["status"], "TIMEOUT") << v.dump(2);
  const std::string error = v.value("error", "");
  EXPECT_NE(error.find("launch watchdog"), std::string::npos) << error;
  EXPECT_NE(error.find("while shape decode batch=1 kv=16 was running"), std::string::npos) << error;
}

}  // namespace
}  // namespace kharness
