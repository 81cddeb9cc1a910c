// CuTe and CUTLASS headers in solutions, on the CPU: where the CUTLASS root is found, what the
// rules allow from it, that the compile sandbox lets NVRTC read only its cute/ and cutlass/
// folders, and the CuTe fixtures compiled through the real NVRTC for sm_90a (cold, then from the
// compile cache). The compiles need a real CUTLASS release (KHARNESS_CUTLASS, as .ci/run sets it,
// or an installed nvidia-cutlass wheel) and skip, saying so, without one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compile/compile_internal.hpp"
#include "device/module_globals.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/rules.hpp"
#include "kharness/solution.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {
namespace fs = std::filesystem;
using testing::fixture;
using testing::kharness;
using testing::TempDir;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

using testing::ScopedEnv;

// A small CUTLASS-shaped include folder: cutlass/version.h of release `version`, one CuTe header,
// and a folder beside them that is not CuTe or CUTLASS.
fs::path make_fake_root(const fs::path& dir, const std::string& major, const std::string& minor,
                        const std::string& patch) {
  write(dir / "cutlass" / "version.h",
        "#pragma once\n#define CUTLASS_MAJOR " + major + "\n#define CUTLASS_MINOR " + minor +
            "\n#define CUTLASS_PATCH " + patch + "\n#define CUTLASS_MAJOR_SUFFIX 7\n");
  write(dir / "cute" / "config.hpp", "#pragma once\n#define FAKE_CUTE_CONFIG 1\n");
  write(dir / "secret" / "key.h", "#define FAKE_SECRET sk-ant-fake-key\n");
  return dir;
}

Operator load_operator(const std::string& name) {
  return OperatorRegistry({{testing::source_dir() / "operators", "builtin"}}).load(name);
}

// ---- finding the root ----------------------------------------------------------------------

TEST(CutlassRoot, FromTheEnvironmentWithItsVersion) {
  TempDir tmp;
  make_fake_root(tmp.path() / "include", "9", "8", "7");
  // A checkout (its include/ folder holds the headers) and the include folder itself.
  for (const fs::path& given : {tmp.path(), tmp.path() / "include"}) {
    ScopedEnv env("KHARNESS_CUTLASS", given.string());
    std::optional<CutlassRoot> root = find_cutlass();
    ASSERT_TRUE(root.has_value());
    EXPECT_EQ(root->version, "9.8.7");
    EXPECT_EQ(root->include_dir, fs::canonical(tmp.path() / "include"));
    EXPECT_EQ(root->origin, "KHARNESS_CUTLASS");
  }
}

TEST(CutlassRoot, FromAnInstalledWheelWithoutRunningPip) {
  TempDir tmp;
  const fs::path site = tmp.path() / "lib" / "python3.11" / "site-packages";
  make_fake_root(site / "cutlass_library" / "source" / "include", "4", "2", "0");
  ScopedEnv no_setting("KHARNESS_CUTLASS", std::nullopt);
  ScopedEnv venv("VIRTUAL_ENV", tmp.path().string());
  std::optional<CutlassRoot> root = find_cutlass();
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->version, "4.2.0");
  EXPECT_EQ(root->origin, "nvidia-cutlass wheel");
  EXPECT_EQ(root->include_dir, fs::canonical(site / "cutlass_library" / "source" / "include"));
}

TEST(CutlassRoot, AFolderWithoutCutlassIsBadUsageNamingTheSetting) {
  TempDir tmp;
  ScopedEnv env("KHARNESS_CUTLASS", tmp.path().string());
  testing::expect_input_error([] { find_cutlass(); }, "KHARNESS_CUTLASS", "cutlass/version.h");
  ScopedEnv none("KHARNESS_CUTLASS", "none");
  EXPECT_FALSE(find_cutlass().has_value());

  // The CLI checks --cutlass once, before the command: one line, exit 2.
  auto r = kharness("--cutlass '" + tmp.path().string() + "' doctor");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--cutlass"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(CutlassRoot, DoctorReportsTheVersion) {
  TempDir tmp;
  make_fake_root(tmp.path(), "4", "2", "0");
  auto r = kharness("--cutlass '" + tmp.path().string() + "' doctor --json");
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["cutlass"]["version"], "4.2.0") << r.out;
  EXPECT_EQ(j["cutlass"]["include_dir"], fs::canonical(tmp.path()).string()) << r.out;
  r = kharness("--cutlass '" + tmp.path().string() + "' doctor");
  EXPECT_NE(r.out.find("CUTLASS        4.2.0 in "), std::string::npos) << r.out;
}

// ---- rules -----------------------------------------------------------------------------------

Solution cute_solution(const std::string& includes) {
  return parse_single_file_solution(
      "/* kharness {\"launches\":[{\"kernel\":\"k\",\"grid\":[1],\"block\":[32],\"args\":[]}]} "
      "*/\n" +
          includes + "extern \"C\" __global__ void k() {}\n",
      "k.cu");
}

std::vector<RuleViolation> rules_with_root(const Solution& s, const fs::path& root) {
  SourceRules rules;
  rules.system_include_dirs = {default_cuda_include_dir()};
  rules.cutlass_include_dir = root;
  return check_source_rules(s, rules);
}

TEST(CutlassRules, HeadersOfTheRootOnly) {
  TempDir tmp;
  const fs::path root = make_fake_root(tmp.path(), "4", "2", "0");
  EXPECT_TRUE(rules_with_root(cute_solution("#include <cute/config.hpp>\n#include "
                                            "\"cutlass/version.h\"\n#include <cuda_fp16.h>\n"),
                              root)
                  .empty());
  for (const char* bad : {"#include <cute/missing.hpp>\n", "#include <secret/key.h>\n",
                          "#include <cutlass/../secret/key.h>\n",
                          "#include <cutlass/../../../../etc/passwd>\n", "#include <stdio.h>\n"}) {
    auto v =
        rules_with_root(cute_solution(std::string("#include <cute/config.hpp>\n") + bad), root);
    ASSERT_EQ(v.size(), 1U) << bad;
    EXPECT_EQ(v[0].rule, "include_path") << bad;
    EXPECT_EQ(v[0].line, 3) << bad;
  }
}

TEST(CutlassRules, WithoutARootTheRefusalSaysHowToProvideOne) {
  auto v = rules_with_root(cute_solution("#include <cute/tensor.hpp>\n"), "");
  ASSERT_EQ(v.size(), 1U);
  EXPECT_EQ(v[0].rule, "include_path");
  EXPECT_NE(v[0].message.find("--cutlass DIR"), std::string::npos) << v[0].message;
  EXPECT_NE(v[0].message.find("KHARNESS_CUTLASS"), std::string::npos) << v[0].message;
  EXPECT_NE(v[0].message.find("pip install nvidia-cutlass"), std::string::npos) << v[0].message;

  // End to end: one line on the verdict, exit 1 (REJECTED), whatever this machine has installed.
  auto r = testing::run_command("KHARNESS_CUTLASS=none '" + std::string(KHARNESS_BINARY) +
                                "' compile '" + fixture("cute/rmsnorm_h4096.cu").string() +
                                "' --no-cache 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("REJECTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pip install nvidia-cutlass"), std::string::npos) << r.out;
}

TEST(CutlassRules, HostIncludesOfACuteKernelAreRejected) {
  TempDir tmp;
  const fs::path root = make_fake_root(tmp.path(), "4", "2", "0");
  auto r = kharness("--cutlass '" + root.string() + "' compile '" +
                    fixture("cute/host_include.cu").string() + "' --no-cache --json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["status"], "REJECTED") << r.out;
  std::string messages;
  for (const auto& v : j["violations"]) messages += v["message"].get<std::string>() + "\n";
  EXPECT_NE(messages.find("etc/passwd>: '..' path components are not allowed"), std::string::npos)
      << messages;
  EXPECT_NE(messages.find("<stdio.h>: not a CUDA toolkit header"), std::string::npos) << messages;
  // cute/tensor.hpp is not in the fake root: refused as well, naming the root.
  EXPECT_NE(messages.find("<cute/tensor.hpp>: not a header of the CUTLASS release"),
            std::string::npos)
      << messages;
}

// ---- the compile sandbox --------------------------------------------------------------------

TEST(CutlassSandbox, NvrtcReadsCuteAndCutlassOfTheRootOnly) {
  TempDir tmp;
  const fs::path root_dir = make_fake_root(tmp.path() / "root", "4", "2", "0");
  fs::create_symlink("/etc/passwd", root_dir / "cutlass" / "passwd.h");
  const CutlassRoot root = cutlass_root_at(root_dir, "test");
  const fs::path include = default_cuda_include_dir();
  std::vector<fs::path> dirs = {include, include / "cccl"};
  for (const auto& d : cutlass_read_dirs(root)) dirs.push_back(d);
  auto compile = [&](const std::string& includes) {
    std::string limit;
    return sandboxed_nvrtc_compile(
        includes + "extern \"C\" __global__ void k(int* y) { *y = 1; }\n", "k.cu", {},
        {"--gpu-architecture=sm_90a", "-std=c++17", "-I" + include.string(),
         "-I" + (include / "cccl").string(), "-I" + root.include_dir.string(), "-default-device"},
        dirs, CompileLimits{}, limit);
  };
  NvrtcOutput good = compile("#include <cutlass/version.h>\n#include <cute/config.hpp>\n");
  EXPECT_EQ(good.result, NVRTC_SUCCESS) << good.log;
  // Below the rules: the root's other folders, a symlink out of it and host files stay unreadable.
  for (const char* bad : {"#include <secret/key.h>\n", "#include <cutlass/passwd.h>\n",
                          "#include \"/etc/hostname\"\n"}) {
    NvrtcOutput out = compile(bad);
    EXPECT_NE(out.result, NVRTC_SUCCESS) << bad;
    EXPECT_NE(out.log.find("cannot open source file"), std::string::npos) << out.log;
    EXPECT_EQ(out.log.find("sk-ant-fake-key"), std::string::npos) << out.log;
    EXPECT_EQ(out.log.find("root:"), std::string::npos) << out.log;
  }
}

// ---- the CuTe fixtures through the real compile stage ---------------------------------------

// The CUTLASS root of this machine, or nullopt (the test then skips, saying how to get one).
std::optional<CutlassRoot> real_root() {
  try {
    return find_cutlass();
  } catch (const Error&) {
    return std::nullopt;
  }
}

// CuTe compiles take tens of seconds on a loaded CI machine: a wide limit, so that these tests
// fail on a wrong answer, not on a slow machine.
CompileOptions cute_options(const fs::path& cache) {
  CompileOptions o;
  o.arch = "sm_90a";
  o.cache_dir = cache;
  o.limits.timeout_seconds = 900;
  return o;
}

// Under -default-device the module keeps thousands of constants (cuda::std and cute traits) as
// globals, which every timed iteration restores (docs/correctness.md#state-reset): every one has
// its place in the cubin, so that where the driver keeps the layout (checked on the GPU) the
// restore is one copy per section, not one per variable.
void expect_state_restored_by_one_copy_per_section(const std::string& fixture_name,
                                                   const CompileResult& r) {
  const device::StatePlan plan = device::plan_state_reset(r.ptx, r.cubin);
  EXPECT_TRUE(plan.reload_reason.empty()) << plan.reload_reason;
  std::map<std::string, CUdeviceptr> bases;  // a made-up base per section, as a driver may load it
  std::vector<device::PlacedVar> placed;
  std::uint64_t bytes = 0;
  for (const auto& v : plan.vars) {
    ASSERT_TRUE(v.offset.has_value()) << v.name << ": not in the cubin's symbol table";
    auto base = bases.emplace(v.section, (bases.size() + 1) << 32).first->second;
    placed.push_back(device::PlacedVar{base + *v.offset, v.size, v.section, v.offset, base});
    bytes += v.size;
  }
  const std::vector<device::CopySpan> spans = device::restore_spans(placed);
  EXPECT_EQ(spans.size(), bases.size());
  std::uint64_t copied = 0;
  for (const auto& span : spans) copied += span.size;
  std::printf(
      "[ measured ] %s: module state %zu variables (%llu bytes) in %zu sections: %zu "
      "copies (%llu bytes) per timed iteration\n",
      fixture_name.c_str(), plan.vars.size(), static_cast<unsigned long long>(bytes), bases.size(),
      spans.size(), static_cast<unsigned long long>(copied));
}

void expect_compiles_then_hits_the_cache(const fs::path& file, const std::string& op_name,
                                         const std::vector<std::string>& kernels) {
  std::optional<CutlassRoot> root = real_root();
  if (!root) {
    GTEST_SKIP() << "no CUTLASS root on this machine (" << cutlass_missing_hint() << ")";
  }
  Operator op = load_operator(op_name);
  Solution s = load_solution(file);
  TempDir cache;
  CompileResult cold =
      compile_solution(s, &op.definition, &op.workloads, cute_options(cache.path()));
  ASSERT_TRUE(cold.ok()) << status_name(cold.status) << "\n"
                         << (cold.violations.empty() ? "" : cold.violations[0].message) << "\n"
                         << cold.log;
  EXPECT_FALSE(cold.cache_hit);
  EXPECT_EQ(cold.cutlass_version, root->version);
  EXPECT_EQ(cold.cutlass_include_dir, root->include_dir.string());
  for (const auto& name : kernels) {
    const KernelInfo* k = cold.find_kernel(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->spill_store_bytes, 0) << name;  // no local-memory spills in the main loops
  }
  CompileResult warm =
      compile_solution(s, &op.definition, &op.workloads, cute_options(cache.path()));
  ASSERT_TRUE(warm.ok());
  EXPECT_TRUE(warm.cache_hit);
  EXPECT_EQ(warm.cache_key, cold.cache_key);
  EXPECT_EQ(warm.cubin, cold.cubin);
  EXPECT_LT(warm.seconds, 1.0) << "a cached compile costs milliseconds, not " << warm.seconds;
  std::printf("[ measured ] %s: NVRTC cold %.2f s, from the compile cache %.4f s (CUTLASS %s)\n",
              file.filename().c_str(), cold.seconds, warm.seconds, root->version.c_str());
  expect_state_restored_by_one_copy_per_section(file.filename().string(), cold);

  // The CUTLASS version is part of the cache key and of the compile record.
  CompileOptions other = cute_options(cache.path());
  other.cutlass = *root;
  other.cutlass->version = root->version + "-other";
  CompileResult another = compile_solution(s, &op.definition, &op.workloads, other);
  EXPECT_NE(another.cache_key, cold.cache_key);
  EXPECT_EQ(to_json(cold)["cutlass"]["version"], root->version);
}

TEST(CuteFixtures, RmsnormCompilesForSm90a) {
  expect_compiles_then_hits_the_cache(fixture("cute/rmsnorm_h4096.cu"), "rmsnorm_h4096",
                                      {"cute_rmsnorm"});
}

TEST(CuteFixtures, HopperGemmCompilesForSm90a) {
  // The gemm family's CuTe seed (run offers it beside seed.sm_90a.cu).
  expect_compiles_then_hits_the_cache(
      testing::source_dir() / "operators" / "_families" / "gemm" / "seed.cute.sm_90a.cu",
      "gemm_n6144_k4096", {"cute_gemm_bn128", "cute_gemm_bn192", "cute_gemm_bn256"});
}

TEST(CuteFixtures, BlockScaledFp8GemmCompilesForSm90a) {
  expect_compiles_then_hits_the_cache(fixture("cute/gemm_fp8.cu"), "gemm_fp8", {"cute_gemm_fp8"});
}

TEST(CuteFixtures, CompileCommandPassesWithTheRoot) {
  std::optional<CutlassRoot> root = real_root();
  if (!root) {
    GTEST_SKIP() << "no CUTLASS root on this machine (" << cutlass_missing_hint() << ")";
  }
  auto r = kharness("--compile-timeout 900 --cutlass '" + root->include_dir.string() +
                    "' compile '" + fixture("cute/rmsnorm_h4096.cu").string() + "' --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["status"], "PASSED") << r.out;
  EXPECT_EQ(j["cutlass"]["version"], root->version) << r.out;
}

// The CuTe example skills/general.md shows models compiles as it stands.
TEST(CuteFixtures, SkillExampleCompiles) {
  std::optional<CutlassRoot> root = real_root();
  if (!root) {
    GTEST_SKIP() << "no CUTLASS root on this machine (" << cutlass_missing_hint() << ")";
  }
  std::ifstream in(testing::source_dir() / "skills" / "general.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t section = text.find("## CuTe and CUTLASS");
  ASSERT_NE(section, std::string::npos);
  const std::size_t open = text.find("```cuda\n", section);
  ASSERT_NE(open, std::string::npos);
  const std::size_t close = text.find("```", open + 8);
  ASSERT_NE(close, std::string::npos);
  const std::string code = text.substr(open + 8, close - open - 8);
  Solution s = parse_single_file_solution(
      R"(/* kharness {"launches":[{"kernel":"scale_rows","grid":[1],"block":[256],)"
      R"("args":["x","y","rows"]}]} */)"
      "\n" +
          code,
      "scale_rows.cu");
  CompileOptions o = cute_options("");
  o.use_cache = false;
  CompileResult r = compile_solution(s, nullptr, nullptr, o);
  ASSERT_TRUE(r.ok()) << status_name(r.status) << "\n" << r.log;
  EXPECT_NE(r.find_kernel("scale_rows"), nullptr);
}

// FlashInfer-Bench's builder gets no include path from a Solution: the export says where the
// runner's nvcc finds the headers.
TEST(CuteFixtures, ExportSaysWhereTheRunnerFindsTheHeaders) {
  std::optional<CutlassRoot> root = real_root();
  if (!root) {
    GTEST_SKIP() << "no CUTLASS root on this machine (" << cutlass_missing_hint() << ")";
  }
  TempDir out;
  const fs::path fib = out.path() / "cute_rmsnorm.json";
  auto r = kharness("--compile-timeout 900 --cutlass '" + root->include_dir.string() +
                    "' export '" + fixture("cute/rmsnorm_h4096.cu").string() + "' --fib '" +
                    fib.string() + "' --arch sm_90a");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("CPATH=\"" + root->include_dir.string() + "\""), std::string::npos) << r.out;
  std::ifstream in(fib);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_NE(j["description"].get<std::string>().find("CUTLASS " + root->version), std::string::npos)
      << j["description"];
}

}  // namespace
}  // namespace kharness
