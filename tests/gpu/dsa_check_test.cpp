// The DSA operators end to end on a real GPU with `kharness check` (the built binary): the seed
// and baseline of each pass every workload (2 trials), and variants of the seeds made here by text
// substitution show what the comparison accepts and rejects:
//  - indexer ids written in reverse order: PASSED (top-k indices are compared as sets);
//  - indexer without the per-head ReLU, or without the per-token key scale: INCORRECT_NUMERICAL
//    (tolerance: the selections change);
//  - indexer that writes -1 instead of its last selected id: INCORRECT_NUMERICAL;
//  - sparse attention with a natural-log lse: INCORRECT_NUMERICAL (tolerance on lse).
// The variants run the first three workloads only. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

using nlohmann::json;

constexpr const char* kAttention = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64";
constexpr const char* kIndexer = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64";

std::filesystem::path operator_dir(const std::string& name) {
  return testing::source_dir() / "operators" / name;
}

std::string read(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first `n` workload uuids of an operator, comma-separated.
std::string first_workloads(const std::string& name, int n) {
  std::ifstream in(operator_dir(name) / "workloads.jsonl");
  std::string line, out;
  for (int i = 0; i < n && std::getline(in, line); ++i) {
    out += (out.empty() ? "" : ",") + json::parse(line).at("uuid").get<std::string>();
  }
  return out;
}

struct CheckRun {
  int exit_code = -1;
  json verdict;
  std::string out;
};

CheckRun check(const std::filesystem::path& file, const std::string& op, const std::string& args) {
  const std::string command = std::string("'") + KHARNESS_BINARY + "' check '" + file.string() +
                              "' --operator " + op + " --seed 1 --timeout 300 --json " + args +
                              " 2>/dev/null";
  const testing::CommandResult r = testing::run_command(command);
  CheckRun run;
  run.exit_code = r.exit_code;
  run.out = r.out;
  run.verdict = json::parse(r.out, nullptr, false);
  return run;
}

// `text` with every `from` replaced by `to`; fails the test when `from` is absent.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no '" << from << "' to replace";
  while (at != std::string::npos) {
    text.replace(at, from.size(), to);
    at = text.find(from, at + to.size());
  }
  return text;
}

std::string kind_of(const json& v) {
  const json& f = v.value("failure", json(nullptr));
  return f.is_object() ? f.value("kind", "") : "";
}

void expect_passes_every_workload(const std::filesystem::path& file, const std::string& op) {
  const CheckRun run = check(file, op, "--trials 2");
  ASSERT_TRUE(run.verdict.is_object()) << run.out.substr(0, 4000);
  EXPECT_EQ(run.exit_code, 0) << run.verdict.value("failure", json(nullptr)).dump();
  EXPECT_EQ(run.verdict.value("status", ""), "PASSED")
      << run.verdict.value("failure", json(nullptr)).dump();
  std::ifstream in(operator_dir(op) / "workloads.jsonl");
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) lines += !line.empty();
  EXPECT_EQ(run.verdict.at("workloads").size(), lines);
}

TEST(DsaCheck, SeedsAndBaselinesPassEveryWorkload) {
  SKIP_WITHOUT_GPU();
  for (const char* op : {kAttention, kIndexer}) {
    SCOPED_TRACE(op);
    expect_passes_every_workload(operator_dir(op) / "seed.cu", op);
    expect_passes_every_workload(operator_dir(op) / "baseline" / "solution.cu", op);
  }
}

TEST(DsaCheck, IndexerComparisonIsBySetAndCatchesSemanticErrors) {
  SKIP_WITHOUT_GPU();
  const std::string seed = read(operator_dir(kIndexer) / "seed.cu");
  const std::string workloads = "--trials 1 --workloads " + first_workloads(kIndexer, 3);
  testing::TempDir dir;
  struct Variant {
    std::string name, source, status;
  };
  const std::vector<Variant> variants = {
      {"reversed",
       replaced(replaced(seed, "out[taken_above + r_gt]", "out[kTopk - 1 - (taken_above + r_gt)]"),
                "out[above + taken_ties + r_eq]", "out[kTopk - 1 - (above + taken_ties + r_eq)]"),
       "PASSED"},
      {"no_relu", replaced(seed, "fmaxf(dot[h] * scale, 0.0f)", "dot[h] * scale"),
       "INCORRECT_NUMERICAL"},
      {"no_scale", replaced(seed, "fmaxf(dot[h] * scale, 0.0f)", "fmaxf(dot[h], 0.0f)"),
       "INCORRECT_NUMERICAL"},
      {"drops_last",
       replaced(seed, "out[above + taken_ties + r_eq] = token;",
                "out[above + taken_ties + r_eq] = taken_ties + r_eq == ties - 1 ? -1 : token;"),
       "INCORRECT_NUMERICAL"},
  };
  for (const auto& v : variants) {
    SCOPED_TRACE(v.name);
    const auto file = dir.path() / (v.name + ".cu");
    std::ofstream(file) << v.source;
    const CheckRun run = check(file, kIndexer, workloads);
    ASSERT_TRUE(run.verdict.is_object()) << run.out.substr(0, 4000);
    EXPECT_EQ(run.verdict.value("status", ""), v.status)
        << run.verdict.value("failure", json(nullptr)).dump();
    if (v.status != "PASSED") {
      // drops_last leaves a -1 (a written value): a set difference, not an unwritten entry.
      EXPECT_EQ(kind_of(run.verdict), "tolerance") << run.verdict.dump().substr(0, 2000);
    }
  }
}

TEST(DsaCheck, SparseAttentionLseIsBaseTwo) {
  SKIP_WITHOUT_GPU();
  const std::string seed = read(operator_dir(kAttention) / "seed.cu");
  testing::TempDir dir;
  const auto file = dir.path() / "natural_lse.cu";
  std::ofstream(file) << replaced(seed, "(big + logf(total)) * 1.4426950408889634f",
                                  "(big + logf(total))");
  const CheckRun run =
      check(file, kAttention, "--trials 1 --workloads " + first_workloads(kAttention, 2));
  ASSERT_TRUE(run.verdict.is_object()) << run.out.substr(0, 4000);
  EXPECT_EQ(run.verdict.value("status", ""), "INCORRECT_NUMERICAL");
  EXPECT_EQ(kind_of(run.verdict), "tolerance");
  EXPECT_NE(run.verdict.at("failure").value("message", "").find("lse"), std::string::npos)
      << run.verdict.at("failure").dump();
}

}  // namespace
}  // namespace kharness
