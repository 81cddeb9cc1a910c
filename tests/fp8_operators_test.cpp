// The FP8 operators (gemm_fp8 and the DeepSeek-V3-routed fp8 MoE of the FlashInfer contest):
// their definitions, workloads and families load; the MoE's names, axes and dtypes are
// FlashInfer-Bench's; every reference, seed and baseline compiles for Hopper and Blackwell; the
// gemm_fp8 seed's tuning macros compile when overridden with -D. No GPU needed (the numerical
// checks are in tests/gpu/fp8_reference_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "kharness/definition.hpp"
#include "kharness/operators.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using testing::kharness;

constexpr const char* kMoe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048";

std::int64_t axis(const Workload& w, const char* name) { return w.axes.at(name); }

TEST(Fp8Operators, GemmFp8LoadsWithRealShapesAndConsistentBlockAxes) {
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_fp8");
  const Definition& d = op.definition;
  EXPECT_EQ(d.family(), "gemm_fp8");
  ASSERT_TRUE(op.reference && op.seed && op.baseline);
  EXPECT_EQ(op.reference->parent_path().filename(), "gemm_fp8");
  EXPECT_EQ(d.find_input("A")->dtype, DType::kFloat8E4M3);
  EXPECT_EQ(d.find_input("A_scale")->dtype, DType::kFloat32);
  EXPECT_EQ(d.find_input("B")->dtype, DType::kFloat8E4M3);
  EXPECT_EQ(d.find_input("B_scale")->dtype, DType::kFloat32);
  EXPECT_EQ(d.find_output("C")->dtype, DType::kBFloat16);
  // Family defaults: tolerance, fp8 value ranges and scales, speed-of-light formulas.
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.rtol, 0.01);
  EXPECT_EQ(d.kharness.inputs.at("B_scale").distribution, "uniform");
  ASSERT_TRUE(d.kharness.flops && d.kharness.bytes);
  EXPECT_GE(op.workloads.size(), 12u);
  std::int64_t min_m = 1 << 30, max_m = 0;
  for (const Workload& w : op.workloads) {
    const std::int64_t m = axis(w, "M"), n = axis(w, "N"), k = axis(w, "K");
    EXPECT_EQ(k % 128, 0) << w.uuid;
    EXPECT_EQ(axis(w, "num_k_blocks"), k / 128) << w.uuid;
    EXPECT_EQ(axis(w, "num_n_blocks"), (n + 127) / 128) << w.uuid;
    min_m = std::min(min_m, m);
    max_m = std::max(max_m, m);
    const Bindings b = w.bindings(d);
    EXPECT_EQ(d.kharness.flops->eval(b), 2 * m * n * k);
  }
  EXPECT_EQ(min_m, 1);
  EXPECT_EQ(max_m, 16384);
}

TEST(Fp8Operators, MoeHasTheFlashInferBenchInterfaceAndContestTolerance) {
  const Operator op = OperatorRegistry::from_environment({}).load(kMoe);
  const Definition& d = op.definition;
  EXPECT_EQ(d.family(), "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4");
  ASSERT_TRUE(op.reference && op.seed && op.baseline);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.atol, 1.0);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.rtol, 0.3);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.required_matched_ratio, 0.9);
  EXPECT_GE(op.workloads.size(), 6u);
  for (const Workload& w : op.workloads) {
    const std::int64_t offset = w.inputs.at("local_expert_offset").value.get<std::int64_t>();
    EXPECT_EQ(offset % 32, 0) << w.uuid;
    EXPECT_TRUE(offset >= 0 && offset <= 224) << w.uuid;
    EXPECT_GE(axis(w, "seq_len"), 1);
    EXPECT_LE(axis(w, "seq_len"), 16384);
  }
  // Names, shapes and dtypes exactly as FlashInfer-Bench's definition, where the snapshot is here.
  const std::filesystem::path fib = std::filesystem::path(KHARNESS_FIB_DIR) / "definitions" /
                                    "moe" / (std::string(kMoe) + ".json");
  if (!std::filesystem::exists(fib)) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib;
  const Definition theirs = load_definition(fib);
  ASSERT_EQ(theirs.axes.size(), d.axes.size());
  for (std::size_t i = 0; i < d.axes.size(); ++i) {
    EXPECT_EQ(d.axes[i].name, theirs.axes[i].name);
    EXPECT_EQ(d.axes[i].is_const, theirs.axes[i].is_const);
    EXPECT_EQ(d.axes[i].value, theirs.axes[i].value);
  }
  ASSERT_EQ(theirs.inputs.size(), d.inputs.size());
  for (std::size_t i = 0; i < d.inputs.size(); ++i) {
    EXPECT_EQ(d.inputs[i].name, theirs.inputs[i].name);
    EXPECT_EQ(d.inputs[i].shape, theirs.inputs[i].shape) << d.inputs[i].name;
    EXPECT_EQ(d.inputs[i].dtype, theirs.inputs[i].dtype) << d.inputs[i].name;
  }
  ASSERT_EQ(theirs.outputs.size(), 1u);
  EXPECT_EQ(d.outputs[0].name, theirs.outputs[0].name);
  EXPECT_EQ(d.outputs[0].shape, theirs.outputs[0].shape);
  EXPECT_EQ(d.outputs[0].dtype, theirs.outputs[0].dtype);
  // Imported as it is, FlashInfer-Bench's definition finds this family by its name.
  const Operator imported = OperatorRegistry::from_environment({}).load(fib.string());
  ASSERT_TRUE(imported.reference.has_value());
  EXPECT_EQ(imported.reference->parent_path().filename(),
            "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4");
}

TEST(Fp8Operators, ReferenceSeedAndBaselineCompileForHopperAndBlackwell) {
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    auto r = kharness(std::string("operators check gemm_fp8 ") + kMoe + " --arch " + arch +
                      " --json --no-cache");
    ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 4000);
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    int compiled = 0;
    for (const auto& row : j["results"]) {
      EXPECT_EQ(row["status"], "PASSED") << row.dump();
      ++compiled;
    }
    // Reference, seed and baseline of each; on sm_90a also gemm_fp8's TMA + wgmma seed.
    EXPECT_EQ(compiled, std::string(arch) == "sm_90a" ? 7 : 6) << arch;
  }
}

// The tune provider sets the seed's tile macros through -D compile options.
TEST(Fp8Operators, GemmFp8SeedCompilesWithOtherTileMacros) {
  std::ifstream in(testing::source_dir() / "operators/_families/gemm_fp8/seed.cu");
  std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = R"("compile_options": ["-std=c++17"])";
  const auto at = source.find(from);
  ASSERT_NE(at, std::string::npos);
  source.replace(at, from.size(),
                 R"("compile_options": ["-std=c++17", "-DGEMM_FP8_BM=128", "-DGEMM_FP8_BN=64",)"
                 R"( "-DGEMM_FP8_BK=16", "-DGEMM_FP8_PAD=1"])");
  testing::TempDir dir;
  const auto file = dir.path() / "tuned.cu";
  std::ofstream(file) << source;
  auto ok = kharness("compile '" + file.string() + "' --operator gemm_fp8 --arch sm_90a");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  // A macro outside its documented range stops the compile with the static_assert's message.
  const std::string bad = source.replace(source.find("-DGEMM_FP8_BK=16"), 16, "-DGEMM_FP8_BK=48");
  std::ofstream(file) << bad;
  auto rejected = kharness("compile '" + file.string() + "' --operator gemm_fp8 --arch sm_90a");
  EXPECT_NE(rejected.exit_code, 0) << rejected.out;
  EXPECT_NE(rejected.out.find("GEMM_FP8_BK must be"), std::string::npos) << rejected.out;
  // The tensor-core variant (mma.sync e4m3, sm_89 and later) for Hopper and Blackwell.
  std::ifstream again(testing::source_dir() / "operators/_families/gemm_fp8/seed.cu");
  std::string mma((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  mma.replace(mma.find(from), from.size(),
              R"("compile_options": ["-std=c++17", "-DGEMM_FP8_MMA=1"])");
  std::ofstream(dir.path() / "mma.cu") << mma;
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    auto r = kharness("compile '" + (dir.path() / "mma.cu").string() +
                      "' --operator gemm_fp8 --arch " + arch);
    EXPECT_EQ(r.exit_code, 0) << arch << ": " << r.out;
  }
}

}  // namespace
}  // namespace kharness
