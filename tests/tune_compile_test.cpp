// Every knob configuration a seed's tune.json declares valid must compile: NVRTC for sm_90a
// through the compile stage (no GPU needed), for every valid configuration of the small spaces and
// for the first configurations the tune provider proposes plus the largest values of the GEMM
// spaces, and for one configuration per code path of the sm_90a GEMM seeds. Also the
// `kharness tune-space` command end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <utility>

#include "kharness/compile.hpp"
#include "kharness/export.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/tune.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using tune::Config;

Operator load_operator(const std::string& name) {
  return OperatorRegistry({{testing::source_dir() / "operators", "builtin"}}).load(name);
}

// Compiles `configs` of the operator's seed; every one must pass.
void expect_all_compile(const Operator& op, const tune::TuneProblem& p,
                        const std::vector<Config>& configs) {
  CompileOptions options;
  options.arch = "sm_90a";
  options.use_cache = false;
  for (const Config& c : configs) {
    std::string text = tune::instantiate(p.seed_text, p.seed_path.string(), p.space, c);
    Solution sol = parse_single_file_solution(text, "candidate.cu");
    CompileResult r = compile_solution(sol, &op.definition, &op.workloads, options);
    EXPECT_TRUE(r.ok()) << op.definition.name << " " << tune::config_text(p.space, c) << ": "
                        << status_name(r.status) << "\n"
                        << r.log;
    const KernelInfo* k =
        sol.plan.launches.empty() ? nullptr : r.find_kernel(sol.plan.launches[0].kernel);
    if (r.ok()) {
      EXPECT_NE(k, nullptr);
    }
  }
}

TEST(TuneCompile, EveryRmsnormConfiguration) {
  Operator op = load_operator("rmsnorm_h4096");
  tune::TuneProblem p = tune::load_tune_problem(op);
  ASSERT_EQ(p.valid.size(), 19u);
  expect_all_compile(op, p, p.valid);
}

TEST(TuneCompile, EveryGqaDecodeConfiguration) {
  Operator op = load_operator("gqa_paged_decode_h32_kv8_d128_ps1");
  tune::TuneProblem p = tune::load_tune_problem(op);
  ASSERT_EQ(p.valid.size(), 18u);
  expect_all_compile(op, p, p.valid);
}

TEST(TuneCompile, EveryMlaDecodeConfiguration) {
  Operator op = load_operator("mla_paged_decode_h16_ckv512_kpe64_ps1");
  tune::TuneProblem p = tune::load_tune_problem(op);
  ASSERT_EQ(p.valid.size(), 9u);  // GROUP x WARPS within 48 KiB of static shared memory
  expect_all_compile(op, p, p.valid);
}

// The first `n` configurations the provider proposes (the defaults, a space-filling sample, then
// neighbours), and for each knob the first and last valid configurations with its largest value
// (the largest tiles, warp tiles and stages: the most registers and shared memory).
std::vector<Config> sample_and_largest(const tune::TuneProblem& p, int n) {
  tune::Search search(p.space, p.valid, {0, n});
  std::vector<Config> configs;
  auto add = [&](const Config& c) {
    if (std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(c);
  };
  for (int i = 0; i < n; ++i) {
    if (auto next = search.next()) add(p.valid[*next]);
  }
  for (std::size_t k = 0; k < p.space.knobs.size(); ++k) {
    std::size_t largest = p.space.knobs[k].values.size() - 1;
    auto has_it = [&](const Config& c) { return c[k] == largest; };
    auto first = std::find_if(p.valid.begin(), p.valid.end(), has_it);
    auto last = std::find_if(p.valid.rbegin(), p.valid.rend(), has_it);
    if (first != p.valid.end()) add(*first);
    if (last != p.valid.rend()) add(*last);
  }
  return configs;
}

// The GEMM space has hundreds of configurations at about a second each.
TEST(TuneCompile, GemmSampleAndLargestValues) {
  Operator op = load_operator("gemm_n4096_k14336");
  tune::TuneProblem p = tune::load_tune_problem(op);
  std::vector<Config> configs = sample_and_largest(p, 4);
  EXPECT_GE(configs.size(), 8u);
  expect_all_compile(op, p, configs);
}

TEST(TuneCompile, GemmFp8SampleAndLargestValues) {
  Operator op = load_operator("gemm_fp8");
  tune::TuneProblem p = tune::load_tune_problem(op);
  EXPECT_EQ(p.valid.size(), 233u);
  std::vector<Config> configs = sample_and_largest(p, 16);
  EXPECT_GE(configs.size(), 20u);
  expect_all_compile(op, p, configs);
}

// The sm_90a GEMM seeds: every combination of the knobs that change the kernel's code (BM, BN,
// and gemm_fp8's SPLIT_K, a cluster reduction) compiles for sm_90a, each with its most stages
// (the most shared memory, the static_assert's edge); STAGES, GROUP_M, CTAS and SPLIT_M change
// only a constant or the plan. Every configuration compiles with
// `kharness tune-space OP --arch sm_90a --all --compile-only`, which takes minutes.
std::vector<Config> code_paths(const tune::TuneProblem& p,
                               const std::vector<std::string>& shaping) {
  std::vector<std::size_t> knobs;
  std::size_t stages = 0;
  for (std::size_t k = 0; k < p.space.knobs.size(); ++k) {
    if (std::find(shaping.begin(), shaping.end(), p.space.knobs[k].name) != shaping.end())
      knobs.push_back(k);
    if (p.space.knobs[k].name == "STAGES") stages = k;
  }
  std::map<std::vector<std::size_t>, Config> most_stages;
  for (const Config& c : p.valid) {
    std::vector<std::size_t> key;
    for (std::size_t k : knobs) key.push_back(c[k]);
    auto [it, fresh] = most_stages.emplace(key, c);
    if (!fresh && c[stages] > it->second[stages]) it->second = c;
  }
  std::vector<Config> configs;
  for (const auto& [key, c] : most_stages) configs.push_back(c);
  return configs;
}

TEST(TuneCompile, Sm90aGemmFp8CodePaths) {
  Operator op = load_operator("gemm_fp8");
  tune::TuneProblem p = tune::load_tune_problem(op, *seed_for(op, "sm_90a"));
  EXPECT_EQ(p.valid.size(), 175u);
  std::vector<Config> configs = code_paths(p, {"BM", "BN", "SPLIT_K"});
  EXPECT_EQ(configs.size(), 29u);  // 2 x 4 x 4 but BM = 128, BN = 256 with split-K (smem)
  expect_all_compile(op, p, configs);
}

TEST(TuneCompile, Sm90aGemmCodePaths) {
  Operator op = load_operator("gemm_n6144_k4096");
  tune::TuneProblem p = tune::load_tune_problem(op, *seed_for(op, "sm_90a"));
  EXPECT_EQ(p.valid.size(), 224u);
  std::vector<Config> configs = code_paths(p, {"BM", "BN"});
  EXPECT_EQ(configs.size(), 8u);
  expect_all_compile(op, p, configs);
}

// A composed candidate (one copy of the seed per configuration, each in its own namespace with
// its own kernel names) compiles with NVRTC and passes the plan rules on every workload; the
// copies' kernels are all in the module. The rmsnorm seed, and the sm_90a GEMM seed with its TMA
// maps, cluster-free wgmma pipeline and knob-dependent shared memory.
// Returns the composed solution and its compiled kernels (for the export test below).
std::pair<Solution, std::vector<KernelInfo>> expect_composition_compiles(
    const Operator& op, const tune::TuneProblem& p, const std::vector<Config>& configs,
    const std::vector<std::string>& conditions) {
  std::string text = tune::compose(p.seed_text, p.seed_path.string(), p.space, configs, conditions);
  Solution sol = parse_single_file_solution(text, "composed.cu");
  EXPECT_EQ(sol.plan.variants.size(), configs.size());
  CompileOptions options;
  options.arch = "sm_90a";
  options.use_cache = false;
  CompileResult r = compile_solution(sol, &op.definition, &op.workloads, options);
  EXPECT_TRUE(r.ok()) << op.definition.name << ": " << status_name(r.status) << "\n" << r.log;
  for (const auto& variant : sol.plan.variants) {
    for (const auto& launch : variant.launches)
      EXPECT_NE(r.find_kernel(launch.kernel), nullptr) << launch.kernel;
  }
  return {sol, r.kernels};
}

TEST(TuneCompile, ComposedRmsnormSeed) {
  Operator op = load_operator("rmsnorm_h4096");
  tune::TuneProblem p = tune::load_tune_problem(op);
  ASSERT_GE(p.valid.size(), 3u);
  expect_composition_compiles(op, p, {p.valid.front(), p.valid[p.valid.size() / 2], p.valid.back()},
                              {"batch_size <= 8", "batch_size <= 256", ""});
}

TEST(TuneCompile, ComposedGemmFp8Sm90aSeed) {
  Operator op = load_operator("gemm_fp8");
  std::optional<std::filesystem::path> seed = seed_for(op, "sm_90a");
  ASSERT_TRUE(seed.has_value());
  tune::TuneProblem p = tune::load_tune_problem(op, *seed);
  std::vector<Config> configs = sample_and_largest(p, 3);
  configs.resize(std::min<std::size_t>(configs.size(), 3));
  ASSERT_GE(configs.size(), 2u);
  std::vector<std::string> conditions = {"M <= 64", "M <= 1024", ""};
  conditions.erase(conditions.begin(),
                   conditions.end() - static_cast<std::ptrdiff_t>(configs.size()));
  expect_composition_compiles(op, p, configs, conditions);
}

// What tune proposes can be submitted: the composed sm_90a gemm_fp8 candidate exports to
// FlashInfer-Bench with a launcher that dispatches by M, each branch encoding its own copy's tensor
// maps for its own kernel, and the exported sources build as FlashInfer-Bench's builder builds
// them (tests/fib_export_nvcc.sh; skipped without nvcc and tvm-ffi).
TEST(TuneCompile, ComposedGemmFp8Sm90aSeedExports) {
  Operator op = load_operator("gemm_fp8");
  tune::TuneProblem p = tune::load_tune_problem(op, *seed_for(op, "sm_90a"));
  std::vector<Config> configs = sample_and_largest(p, 3);
  configs.resize(std::min<std::size_t>(configs.size(), 3));
  ASSERT_EQ(configs.size(), 3u);
  auto [sol, kernels] = expect_composition_compiles(op, p, configs, {"M <= 64", "M <= 1024", ""});
  exchange::FibExportOptions o;
  o.arch_specific = "sm_90a";
  exchange::FibExport e = exchange::export_fib_solution(sol, op.definition, kernels, o);
  std::string launcher;
  for (const auto& f : e.solution["sources"])
    if (f["path"] == exchange::kFibLauncherFile) launcher = f["content"];
  std::size_t at = 0;
  const std::vector<std::string> branches = {
      "  if ((ax_M <= INT64_C(64))) {  // variant 0: M <= 64\n",
      "  } else if ((ax_M <= INT64_C(1024))) {  // variant 1: M <= 1024\n",
      "  } else {  // variant 2: otherwise\n"};
  for (std::size_t v = 0; v < branches.size(); ++v) {
    std::size_t next = launcher.find(branches[v], at);
    ASSERT_NE(next, std::string::npos) << branches[v] << launcher;
    at = next;
    // The branch launches its own copy's kernel with its own tensor maps.
    const std::string& kernel = sol.plan.variants[v].launches.at(0).kernel;
    EXPECT_NE(kernel.find("_v" + std::to_string(v)), std::string::npos) << kernel;
    std::size_t end = v + 1 < branches.size() ? launcher.find(branches[v + 1]) : launcher.size();
    std::string branch = launcher.substr(at, end - at);
    EXPECT_NE(branch.find("tensor_map(  // \"a_map\""), std::string::npos) << branch;
    EXPECT_NE(branch.find("\"" + kernel + "\""), std::string::npos) << branch;
  }
  testing::TempDir dir;
  std::string json = (dir.path() / "composed.json").string();
  std::ofstream(json) << e.solution.dump(2);
  auto r = testing::run_command(
      "bash '" + (testing::source_dir() / "tests/fib_export_nvcc.sh").string() + "' '" +
      KHARNESS_BINARY + "' '" + testing::source_dir().string() + "' 'json:" + json + "' 2>&1");
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(TuneSpaceCli, ListsKnobsAndCountsValidConfigurations) {
  auto r = testing::kharness("tune-space rmsnorm_h4096");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("THREADS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hidden_size % (THREADS * VEC) == 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("19 valid configurations of 20"), std::string::npos) << r.out;
  auto bad = testing::kharness("tune-space copy_f32");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("tune.json"), std::string::npos) << bad.out;
}

// What `kharness run --operator gemm_fp8 --budget 8 --compile-only` does with the tune provider.
TEST(TuneSpaceCli, GemmFp8SampleOfEightCompiles) {
  auto r = testing::kharness("tune-space gemm_fp8 --sample 8 --compile-only --arch sm_90a");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("8 of 8 configurations compile for sm_90a"), std::string::npos) << r.out;
}

TEST(TuneSpaceCli, SampleCompilesDistinctConfigurations) {
  testing::TempDir dir;
  auto r = testing::kharness(
      "tune-space gqa_paged_decode_h32_kv8_d128_ps1 --sample 4 "
      "--compile-only --no-cache --arch sm_90a --json --out '" +
      dir.path().string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["sample"].size(), 4u);
  std::set<std::string> configs;
  for (const auto& row : j["sample"]) {
    EXPECT_EQ(row["status"], "PASSED") << row.dump();
    configs.insert(row["config"].dump());
    EXPECT_TRUE(std::filesystem::exists(row["file"].get<std::string>()));
  }
  EXPECT_EQ(configs.size(), 4u);
  EXPECT_EQ(j["sample"][0]["config"],
            (nlohmann::json{{"THREADS", 128}, {"UNROLL", 1}, {"VEC", 8}}));
  // A written candidate compiles on its own through `kharness compile`.
  auto c = testing::kharness("compile '" + j["sample"][1]["file"].get<std::string>() +
                             "' --arch sm_90a --no-cache");
  EXPECT_EQ(c.exit_code, 0) << c.out;
}

}  // namespace
}  // namespace kharness
