// Every knob configuration a tune.json declares valid must be correct, not only compile: the
// configurations `kharness tune-space` lists are written out and checked with `kharness check`
// (the built binary) on the GPU. rmsnorm, gqa decode and MLA decode: every valid configuration on
// every workload; the GEMM family: the first 12 configurations the tune provider proposes on the
// gemm_n6144_k4096 workloads up to M = 2053 (ragged M and every tile shape of the sample);
// gemm_fp8: the first 12 configurations on its workloads with M = 1, 16, 33, 64 and 512. Also
// composed (dispatching) candidates of rmsnorm and the sm_90a gemm_fp8 seed on every workload,
// and every valid configuration of both sm_90a GEMM seeds on small workloads. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/tune.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// Writes the listed configurations of `op` (`which`: "--all" or "--sample N", and any other
// tune-space flags) into a folder and checks them all; every one must pass. With `shards` > 1
// only the configurations i with i % shards == shard are checked.
void expect_configurations_pass(const std::string& op, const std::string& which,
                                const std::string& check_args, std::size_t shard = 0,
                                std::size_t shards = 1) {
  testing::TempDir dir;
  auto listed = testing::kharness("tune-space " + op + " " + which + " --json --out '" +
                                  dir.path().string() + "'");
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  json space = json::parse(listed.out.substr(listed.out.find('{')));
  json sample = json::array();
  for (std::size_t i = shard; i < space["sample"].size(); i += shards)
    sample.push_back(space["sample"][i]);
  std::string files;
  for (const auto& row : sample) files += " '" + row["file"].get<std::string>() + "'";
  ASSERT_FALSE(files.empty());
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY + "' check" + files +
                                " --operator " + op + " " + check_args + " --json 2>/dev/null");
  json verdicts = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(verdicts.is_array() || verdicts.is_object()) << r.out.substr(0, 4000);
  if (verdicts.is_object()) verdicts = json::array({verdicts});
  ASSERT_EQ(verdicts.size(), sample.size());
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    EXPECT_EQ(verdicts[i].value("status", ""), "PASSED")
        << op << " " << sample[i]["config"].dump() << ": "
        << verdicts[i].value("failure", json(nullptr)).dump();
  }
  EXPECT_EQ(r.exit_code, 0);
}

TEST(TuneConfigurations, EveryRmsnormConfigurationPasses) {
  SKIP_WITHOUT_GPU();
  expect_configurations_pass("rmsnorm_h4096", "--all", "--trials 2");
}

TEST(TuneConfigurations, EveryGqaDecodeConfigurationPasses) {
  SKIP_WITHOUT_GPU();
  expect_configurations_pass("gqa_paged_decode_h32_kv8_d128_ps1", "--all", "--trials 2");
}

TEST(TuneConfigurations, EveryMlaDecodeConfigurationPasses) {
  SKIP_WITHOUT_GPU();
  expect_configurations_pass("mla_paged_decode_h16_ckv512_kpe64_ps1", "--all", "--trials 2");
}

TEST(TuneConfigurations, GemmSamplePasses) {
  SKIP_WITHOUT_GPU();
  // Workloads M = 1, 7, 16, 64, 128, 256, 972, 2048, 2053 of gemm_n6144_k4096.
  expect_configurations_pass(
      "gemm_n6144_k4096", "--sample 12",
      "--trials 1 --workloads c6a8dede-c0fe-400a-af50-b5308a04e21e,"
      "d10fa672-b209-4591-a42f-5b617490436d,9bf55724-9894-46dd-b029-5d80d94811f8,"
      "4d778432-d0f7-4b3e-98fa-36d3c4901b26,332ac347-b430-43bb-a1f6-c8c6a10f91e9,"
      "9b6b5bfc-05a4-48e3-b0cf-1e746c5bd81f,77618ad8-a734-4817-a965-304b74430ff1,"
      "215393d4-ba56-47ac-b2c0-615a431de57c,acc3751e-d0f7-4cee-ac04-f198039d4f79");
}

TEST(TuneConfigurations, GemmFp8SamplePasses) {
  SKIP_WITHOUT_GPU();
  // Workloads (M, N, K) = (1, 2112, 7168), (16, 24576, 1536), (33, 4096, 7168), (64, 32768, 512),
  // (512, 7168, 2048).
  expect_configurations_pass(
      "gemm_fp8", "--sample 12",
      "--trials 1 --workloads d8ea2ff1-a0dc-558d-a531-2c202427b4cb,"
      "55a1cb77-1950-5b67-92d2-b78dedd71006,deae70b3-fbcd-528d-85b3-918d752b4640,"
      "defa8080-ef3d-5b6e-ad99-44df53233252,acaeb4c2-149c-50e3-9264-18aae9e778bc");
}

// Every valid configuration of the sm_90a GEMM seeds' knob spaces (split-K, BN = 192 and 256,
// tiles, stages, tile order, persistent grid) passes on the small workloads that reach every
// path: fp8 M = 1 (N = 2112: the last, half-filled block of B_scale), 16, 33 (ragged M), 64
// (K = 512: with SPLIT_K = 8 half the blocks of a cluster sum no K block) and 512 (several tile
// rows, GROUP_M); fp16 M = 1, 7, 64, 128 and 256 (split-K up to SPLIT_M = 64 or 256) and 972
// (ragged, unsplit). Each space is checked in kGemmShards parts, one test each, so that a part
// takes a few minutes.
constexpr std::size_t kGemmShards = 4;

struct GemmSpacePart {
  std::string op;
  std::string workloads;
  std::size_t shard;
};

class Sm90aGemmSpace : public ::testing::TestWithParam<GemmSpacePart> {};

TEST_P(Sm90aGemmSpace, EveryConfigurationPasses) {
  SKIP_WITHOUT_GPU();
  const GemmSpacePart& part = GetParam();
  expect_configurations_pass(part.op, "--all --arch sm_90a",
                             "--trials 1 --workloads " + part.workloads, part.shard, kGemmShards);
}

std::vector<GemmSpacePart> gemm_space_parts() {
  const std::string fp8 =
      "d8ea2ff1-a0dc-558d-a531-2c202427b4cb,55a1cb77-1950-5b67-92d2-b78dedd71006,"
      "deae70b3-fbcd-528d-85b3-918d752b4640,defa8080-ef3d-5b6e-ad99-44df53233252,"
      "acaeb4c2-149c-50e3-9264-18aae9e778bc";
  const std::string fp16 =
      "c6a8dede-c0fe-400a-af50-b5308a04e21e,d10fa672-b209-4591-a42f-5b617490436d,"
      "4d778432-d0f7-4b3e-98fa-36d3c4901b26,332ac347-b430-43bb-a1f6-c8c6a10f91e9,"
      "9b6b5bfc-05a4-48e3-b0cf-1e746c5bd81f,77618ad8-a734-4817-a965-304b74430ff1";
  std::vector<GemmSpacePart> parts;
  for (std::size_t shard = 0; shard < kGemmShards; ++shard) {
    parts.push_back({"gemm_fp8", fp8, shard});
    parts.push_back({"gemm_n6144_k4096", fp16, shard});
  }
  return parts;
}

INSTANTIATE_TEST_SUITE_P(Knobs, Sm90aGemmSpace, ::testing::ValuesIn(gemm_space_parts()),
                         [](const ::testing::TestParamInfo<GemmSpacePart>& info) {
                           return info.param.op + "_part" + std::to_string(info.param.shard);
                         });

// A composed candidate of the tune provider (one copy of the seed per configuration, chosen by
// the plan's variants) passes every workload of its operator, and the verdict names the variant
// each workload ran, the one its shape's bucket condition picks.
void expect_composition_passes(const std::string& op_name, const std::string& arch,
                               std::size_t copies, const std::string& check_args) {
  Operator op = OperatorRegistry::from_environment({}).load(op_name);
  std::optional<std::filesystem::path> seed = seed_for(op, arch);
  ASSERT_TRUE(seed.has_value());
  tune::TuneProblem p = tune::load_tune_problem(op, *seed);
  std::vector<tune::ShapeBucket> buckets = tune::shape_buckets(op.definition, op.workloads);
  ASSERT_GE(buckets.size(), copies);
  // The first configurations the provider proposes, one per bucket (the last bucket takes the
  // rest of the shapes).
  tune::Search search(p.space, p.valid, {0, 8});
  std::vector<tune::Config> configs;
  std::vector<std::string> conditions;
  for (std::size_t b = 0; b < copies; ++b) {
    configs.push_back(p.valid[*search.next()]);
    conditions.push_back(b + 1 < copies ? buckets[b].when : "");
  }
  testing::TempDir dir;
  const std::filesystem::path file = dir.path() / "composed.cu";
  write_file_atomic(file.string(),
                    tune::compose(p.seed_text, p.seed_path.string(), p.space, configs, conditions));
  auto r =
      testing::run_command(std::string("'") + KHARNESS_BINARY + "' check '" + file.string() +
                           "' --operator " + op_name + " " + check_args + " --json 2>/dev/null");
  json verdict = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(verdict.is_object()) << r.out.substr(0, 4000);
  EXPECT_EQ(verdict.value("status", ""), "PASSED") << verdict.value("failure", json()).dump();
  EXPECT_EQ(r.exit_code, 0);
  Solution sol = parse_single_file_solution(read_file(file.string()), "composed.cu");
  ASSERT_FALSE(verdict["workloads"].empty());
  for (const auto& w : verdict["workloads"]) {
    const Workload* workload = nullptr;
    for (const auto& x : op.workloads)
      if (x.uuid == w["uuid"]) workload = &x;
    ASSERT_NE(workload, nullptr);
    const std::size_t v = sol.plan.variant_for(workload->bindings(op.definition));
    EXPECT_EQ(w.value("variant", json()), json(sol.plan.variant_label(v))) << w["uuid"];
  }
}

TEST(TuneConfigurations, ComposedRmsnormPassesEveryWorkloadWithItsVariant) {
  SKIP_WITHOUT_GPU();
  expect_composition_passes("rmsnorm_h4096", "sm_90a", 3, "--trials 2");
}

TEST(TuneConfigurations, ComposedGemmFp8Sm90aPassesEveryWorkloadWithItsVariant) {
  SKIP_WITHOUT_GPU();
  expect_composition_passes("gemm_fp8", "sm_90a", 3, "--trials 1");
}

}  // namespace
}  // namespace kharness
