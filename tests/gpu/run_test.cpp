// `kharness run` on a GPU with the recorded rmsnorm answers (tests/fixtures/replay/rmsnorm): five
// candidates with verdicts, the expected statuses, no promotion of a kernel that is the seed's
// algorithm restated, and a summary. Skips without a GPU. Takes a few minutes on an H200 (the seed
// and every correct candidate are validated and timed on all 16 workloads).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "kharness/device.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

using nlohmann::json;

json record(const std::filesystem::path& run, const std::string& id) {
  return json::parse(read_file((run / "candidates" / id / "record.json").string()));
}

TEST(RunGpu, ReplayFiveCandidatesOnRmsnorm) {
  if (!gpu_available())
    GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason();
  testing::TempDir tmp;
  auto run = tmp.path() / "run";
  auto out = tmp.path() / "best.cu";
  auto r = testing::kharness(
      "--archive '" + (tmp.path() / "archive").string() +
      "' run --operator rmsnorm_h4096 --budget 5 --provider replay --responses '" +
      testing::fixture("replay/rmsnorm").string() + "' --seed 1 --run-dir '" + run.string() +
      "' --out '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::cout << r.out;
  json seed = record(run, "c0000");
  EXPECT_EQ(seed["status"], "PASSED");
  EXPECT_GT(seed["score"].get<double>(), 0.0);
  json same = record(run, "c0001");
  EXPECT_EQ(same["status"], "PASSED") << same.dump();
  EXPECT_FALSE(same["promoted"].get<bool>())
      << "the seed's own algorithm beat it beyond the noise: " << same.dump();
  json faster = record(run, "c0002");
  EXPECT_EQ(faster["status"], "PASSED") << faster.dump();
  EXPECT_GT(faster["speedup_vs_incumbent"].get<double>(), 0.0);
  json broken = record(run, "c0003");
  EXPECT_EQ(broken["status"], "INCORRECT_NUMERICAL") << broken.dump();
  EXPECT_EQ(broken["stage"], "representatives") << "the cascade stops it on the representatives";
  EXPECT_GT(broken["saved_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(broken["promoted"].get<bool>());
  EXPECT_EQ(record(run, "c0004")["status"], "NO_CODE");
  json compile_error = record(run, "c0005");
  EXPECT_EQ(compile_error["status"], "COMPILE_ERROR");
  EXPECT_EQ(compile_error["stage"], "compile") << "stopped by the compiler, not the cascade";
  EXPECT_EQ(compile_error["saved_seconds"].get<double>(), 0.0);
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["candidates"].size(), 6u);
  EXPECT_EQ(summary["stop_reason"], "budget");
  std::string best = summary["best"];
  EXPECT_TRUE(best == "c0000" || best == "c0002") << best;
  EXPECT_TRUE(std::filesystem::exists(out));
  EXPECT_NE(r.out.find("Shape cascade"), std::string::npos) << r.out;
  // The profile stage's diagnosis of the seed went into the prompts (when counters are permitted).
  if (!seed.value("diagnosis", "").empty()) {
    std::string prompt = read_file((run / "candidates" / "c0001" / "prompt.md").string());
    EXPECT_NE(prompt.find("# Diagnosis of the current best kernel"), std::string::npos);
  }

  // A second run of the same answers into the same archive: every verdict comes from the cache
  // (the same kernels against the same incumbents), so the same decisions and the same best.
  auto run2 = tmp.path() / "run2";
  const auto start = std::chrono::steady_clock::now();
  auto r2 = testing::kharness(
      "--archive '" + (tmp.path() / "archive").string() +
      "' run --operator rmsnorm_h4096 --budget 5 --provider replay --responses '" +
      testing::fixture("replay/rmsnorm").string() + "' --seed 1 --run-dir '" + run2.string() + "'");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  std::cout << "second run (verdicts from the cache): " << seconds << " s\n";
  for (const char* id : {"c0000", "c0001", "c0002", "c0003", "c0005"}) {
    json a = record(run, id), b = record(run2, id);
    EXPECT_EQ(b["status"], a["status"]) << id;
    EXPECT_EQ(b["promoted"], a["promoted"]) << id;
    EXPECT_EQ(b["cache_key"], a["cache_key"]) << id;
    EXPECT_FALSE(b["cached_from"].get<std::string>().empty()) << id << ": " << b.dump();
  }
  json summary2 = json::parse(read_file((run2 / "summary.json").string()));
  EXPECT_EQ(summary2["best"], summary["best"]);
}

// `run --model`: a tune run on rmsnorm_h4096 validated in Llama's decode layer (2 layers a
// model-check). The seeds' layer is checked and timed once at the start (its share of the layer
// time goes into every prompt); every promoted candidate passed model-check; only candidates that
// their kernel verdict would promote were model-checked, so the count stays bounded.
TEST(RunGpu, TuneRunWithAModelPromotesOnlyWhatPassesModelCheck) {
  if (!gpu_available())
    GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason();
  testing::TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = testing::kharness("--archive '" + (tmp.path() / "archive").string() +
                             "' run --operator rmsnorm_h4096 --model llama-3.1-8b --phase decode "
                             "--model-layers 2 --provider tune --budget 4 --seed 1 --no-profile "
                             "--run-dir '" +
                             run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::cout << r.out;
  const json seed = record(run, "c0000");
  ASSERT_TRUE(seed["model_check"].is_object()) << seed.dump(2);
  EXPECT_TRUE(seed["model_check"]["passed"].get<bool>()) << seed.dump(2);
  EXPECT_EQ(seed["model_check"]["layer_speedup"], 1.0);
  const double share = seed["model_check"]["share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 0.5);  // one RMSNorm among three large GEMMs and attention
  EXPECT_EQ(seed["model_check"]["nodes"], json::array({"attn_norm"}));
  EXPECT_TRUE(std::filesystem::exists(run / "candidates" / "c0000" / "model_check.json"));
  const std::string prompt = read_file((run / "candidates" / "c0001" / "prompt.md").string());
  EXPECT_NE(prompt.find("# In the model"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("% of the layer time"), std::string::npos) << prompt;
  int checked = 1;  // the seeds' layer
  const json summary = json::parse(read_file((run / "summary.json").string()));
  for (const auto& c : summary["candidates"]) {
    const std::string id = c["id"];
    if (id == "c0000") continue;
    const json rec = record(run, id);
    SCOPED_TRACE(rec.dump(2));
    if (rec["model_check"].is_object()) {
      ++checked;
      EXPECT_EQ(rec["status"], "PASSED");  // only a kernel verdict that would promote is checked
      EXPECT_NE(rec["note"].get<std::string>().find("model-check"), std::string::npos);
      if (rec["promoted"].get<bool>()) {
        EXPECT_TRUE(rec["model_check"]["passed"].get<bool>());
        EXPECT_GT(rec["model_check"]["layer_speedup"].get<double>(), 0.0);
      }
    } else {
      EXPECT_FALSE(rec["promoted"].get<bool>()) << "promoted without a model-check";
    }
  }
  EXPECT_EQ(summary["in_model"]["model_checks"], checked);
  EXPECT_EQ(summary["in_model"]["model"], "llama-3.1-8b");
  EXPECT_NE(r.out.find("In the model (llama-3.1-8b decode, 2 layers, objective kernel)"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace kharness
