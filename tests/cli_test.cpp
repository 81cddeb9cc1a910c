// End-to-end: the real binary, its exit codes and its one-line errors
// (docs/verdicts.md#exit-codes).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using testing::fixture;
using testing::kharness;

std::string fx(const std::string& relative) { return "'" + fixture(relative).string() + "'"; }

// Exit code 2 and exactly one line of output that names `where`.
void expect_usage_error(const std::string& args, const std::string& where) {
  auto r = kharness(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
  EXPECT_EQ(r.out.rfind("kharness: error: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(where), std::string::npos) << args << "\n" << r.out;
}

TEST(Cli, HelpListsEveryCommandAndVersionHasCommit) {
  auto help = kharness("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* cmd : {"compile", "doctor", "operators"}) {
    EXPECT_NE(help.out.find(cmd), std::string::npos) << cmd;
  }
  auto version = kharness("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("kharness 0."), std::string::npos) << version.out;
  EXPECT_NE(version.out.find("commit"), std::string::npos) << version.out;
}

TEST(Cli, BadUsageIsOneLineAndExitTwo) {
  expect_usage_error("--frobnicate", "--frobnicate");
  expect_usage_error("compil x.cu", "did you mean 'compile'");
  expect_usage_error("nosuch --help", "unknown command 'nosuch'");
  expect_usage_error("compile " + fx("good/rmsnorm_simple.cu") + " --bogus", "--bogus");
  expect_usage_error("compile", "solution");
  expect_usage_error("compile " + fx("good/rmsnorm_simple.cu") + " --arch sm_77", "--arch");
  expect_usage_error("compile " + fx("good/rmsnorm_simple.cu") + " --operator rmsnorm_h4097",
                     "did you mean rmsnorm_h4096");
  expect_usage_error("compile /nonexistent/k.cu", "/nonexistent/k.cu");
  expect_usage_error("compile " + fx("bad/no_kharness_comment.cu"), "no_kharness_comment.cu");
  expect_usage_error("compile " + fx("bad/broken_plan_json.cu"), "broken_plan_json.cu:11:");
  expect_usage_error("compile " + fx("bad/empty.cu"), "empty source");
  expect_usage_error("compile " + fx("bad/duplicate_key_plan.cu"),
                     "duplicate_key_plan.cu: launches[0].block: given twice");
  expect_usage_error("operators show nope_h1", "operators show: name: unknown operator");
  expect_usage_error("operators show " + fx("defs/not_json.json"), "not_json.json:1:");
  expect_usage_error("operators show " + fx("defs/wrong_type.json"), "wrong_type.json: axes");
  expect_usage_error("operators show " + fx("defs/unknown_dtype.json"), "inputs.weight.dtype");
  expect_usage_error("operators show " + fx("defs/unknown_axis_in_shape.json"),
                     "outputs.output.shape");
  expect_usage_error("--operators-dir /nonexistent operators list", "--operators-dir");
  // An empty value is a mistake (a variable that expanded to nothing), not the option left out.
  expect_usage_error("compile " + fx("good/rmsnorm_simple.cu") + " --operator ''",
                     "--operator: empty value");
  expect_usage_error("compile ''", "empty value");
  expect_usage_error("run --operator rmsnorm_h4096 --compile-only --arch ''",
                     "--arch: empty value");
}

// Seeds are unsigned 64-bit integers written without a sign: stoull would wrap "-5" and stop at
// "5abc"; every command that takes one says so, exit 2, before looking for a GPU.
TEST(Cli, SeedFlagsRefuseSignsTrailingCharactersAndOverflow) {
  const std::string seed = "operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 ";
  const std::string src = (testing::source_dir() / seed).string();
  expect_usage_error("check " + src + "--seed -5", "--seed: '-5' is not an unsigned");
  expect_usage_error("validate " + src + "--seed 0x", "--seed: '0x'");
  expect_usage_error("profile " + src + "--seed 18446744073709551616", "--seed");
  expect_usage_error("run --operator rmsnorm_h4096 --compile-only --arch sm_90a --seed 5abc",
                     "--seed: '5abc'");
  expect_usage_error("tune-space rmsnorm_h4096 --sample 2 --rng-seed -1", "--rng-seed: '-1'");
  auto ok = testing::kharness("tune-space rmsnorm_h4096 --sample 2 --rng-seed 0x10");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

TEST(Cli, CompilePrintsResourcesForSm100a) {
  auto r =
      kharness("compile '" + (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string() +
               "' --operator rmsnorm_h4096 --arch sm_100a --no-cache");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PASSED for sm_100a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("registers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("spill"), std::string::npos) << r.out;
}

TEST(Cli, SyntaxErrorReportedAtLine37OfTheFile) {
  auto r = kharness("compile " + fx("bad/syntax_error_line37.cu") + " --no-cache");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("COMPILE_ERROR"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("syntax_error_line37.cu:37: error"), std::string::npos) << r.out;
}

TEST(Cli, RuleViolationsAreRejectedWithExitOne) {
  struct Case {
    const char* file;
    const char* rule;
  };
  for (const Case& c :
       {Case{"bad/host_code.cu", "host_code"}, Case{"bad/host_launch.cu", "host"},
        Case{"bad/include_absolute.cu", "include"}, Case{"bad/include_parent.cu", "include"},
        Case{"bad/unknown_kernel.cu", "unknown_kernel"},
        Case{"bad/param_count.cu", "param_mismatch"}, Case{"bad/param_size.cu", "param_mismatch"},
        Case{"bad/unknown_axis.cu", "unknown_axis"}, Case{"bad/div_zero.cu", "division_by_zero"},
        Case{"bad/tma_map_outside_tensor.cu", "may not reach outside its tensor"},
        Case{"bad/tma_box_too_large.cu", "tensor map 'a_map' box[0]: 512 is above 256"}}) {
    auto r = kharness("compile " + fx(c.file) + " --no-cache");
    EXPECT_EQ(r.exit_code, 1) << c.file << "\n" << r.out;
    EXPECT_NE(r.out.find("REJECTED"), std::string::npos) << c.file << "\n" << r.out;
    EXPECT_NE(r.out.find(c.rule), std::string::npos) << c.file << "\n" << r.out;
  }
}

TEST(Cli, CompileJsonAndArtifacts) {
  testing::TempDir out;
  auto r = kharness("compile " + fx("good/folder_solution") +
                    " --json --no-cache --arch sm_90a --out '" + out.path().string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  auto start = r.out.find('{');
  ASSERT_NE(start, std::string::npos) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(start));
  EXPECT_EQ(j["status"], "PASSED");
  EXPECT_EQ(j["schema"], "kharness.compile/1");
  EXPECT_EQ(j["kernels"][0]["params"].size(), 5u);
  for (const char* f : {"kernel.ptx", "kernel.cubin", "compile.log", "compile.json"}) {
    EXPECT_TRUE(std::filesystem::exists(out.path() / f)) << f;
  }
}

TEST(Cli, OperatorsListShowAndCheck) {
  auto list = kharness("operators list --json");
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_NE(list.out.find("rmsnorm_h4096"), std::string::npos);
  auto show = kharness("operators show rmsnorm_h4096");
  EXPECT_EQ(show.exit_code, 0) << show.out;
  for (const char* s : {"hidden_states", "weight", "output", "batch_size", "4096", "bfloat16",
                        "atol", "4 * batch_size * hidden_size", "workloads"}) {
    EXPECT_NE(show.out.find(s), std::string::npos) << s;
  }
  auto check = kharness("operators check rmsnorm_h4096 --arch sm_90a");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("reference"), std::string::npos);
  EXPECT_NE(check.out.find("baseline"), std::string::npos);
}

// Every shipped operator's reference, seed and baseline compile for Hopper and Blackwell: CI
// compiles them all for sm_90a and sm_100a.
TEST(Cli, EveryShippedOperatorCompilesForHopperAndBlackwell) {
  auto list = kharness("operators list --json");
  ASSERT_EQ(list.exit_code, 0) << list.out;
  const auto ops = nlohmann::json::parse(list.out);
  ASSERT_GE(ops.size(), 17u);
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    auto check = kharness(std::string("operators check --arch ") + arch);
    EXPECT_EQ(check.exit_code, 0) << arch << "\n" << check.out;
    for (const auto& op : ops) {
      const std::string name = op["name"];
      EXPECT_NE(check.out.find(name), std::string::npos) << arch << ": " << name << " not checked";
    }
    EXPECT_EQ(check.out.find("FAIL"), std::string::npos) << arch << "\n" << check.out;
  }
}

TEST(Cli, OperatorsImportSaysWhatRunsAndWritesOperatorFolders) {
  testing::TempDir out;
  auto r = kharness("operators import " + fx("defs/fib_layout") + " --into '" +
                    out.path().string() + "' --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["definitions"].size(), 1u) << r.out;
  EXPECT_EQ(j["definitions"][0]["name"], "gemm_n64_k128");
  EXPECT_TRUE(j["definitions"][0]["runnable"].get<bool>()) << r.out;  // the gemm family's reference
  EXPECT_TRUE(std::filesystem::exists(out.path() / "gemm_n64_k128/definition.json"));
  EXPECT_TRUE(std::filesystem::exists(out.path() / "gemm_n64_k128/workloads.jsonl"));
  // The written folder is an operator kharness loads and whose reference compiles.
  auto check = kharness("--operators-dir '" + out.path().string() +
                        "' operators check gemm_n64_k128 --arch sm_90a");
  EXPECT_NE(check.out.find("reference    PASSED"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("seed.sm_90a  PASSED"), std::string::npos) << check.out;
  auto missing = kharness("operators import /nonexistent/fib");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
}

// Every FlashInfer-Bench definition of the snapshot beside the repository: runnable, or a reason.
TEST(Cli, OperatorsImportOfTheFlashInferBenchSnapshot) {
  std::filesystem::path fib(KHARNESS_FIB_DIR);
  if (!std::filesystem::exists(fib / "definitions"))
    GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib;
  auto r = kharness("operators import '" + fib.string() + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 2000);
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_GE(j["definitions"].size(), 150u);
  for (const auto& d : j["definitions"]) {
    std::string name = d["name"];
    bool runnable = d["runnable"];
    EXPECT_TRUE(runnable || !d["reason"].get<std::string>().empty()) << name;
    // Every gemm and rmsnorm definition that has workloads here runs as it is.
    bool family = name.rfind("gemm_", 0) == 0 || name.rfind("rmsnorm_", 0) == 0 ||
                  name.rfind("fused_add_rmsnorm_", 0) == 0;
    if (family && d["reason"] != "no workloads")
      EXPECT_TRUE(runnable) << name << ": " << d["reason"];
  }
}

// Bad input found by feeding the CLI what a careless user or a broken model would; each one was
// a crash or exit 4 (or exit 3 before the bad number was noticed).
TEST(Cli, HostileInputIsOneLineAndExitTwo) {
  testing::TempDir tmp;
  const std::string good = fx("good/rmsnorm_simple.cu");
  // A plan expression nested 100000 deep: the recursive parser overflowed the stack (SIGSEGV).
  std::string text = read_file(fixture("good/rmsnorm_simple.cu").string());
  std::string deep = std::string(100000, '(') + "batch_size" + std::string(100000, ')');
  auto grid = text.find("\"batch_size\"");
  ASSERT_NE(grid, std::string::npos);
  text.replace(grid, 12, "\"" + deep + "\"");
  std::filesystem::path deep_file = tmp.path() / "deep.cu";
  write_file_atomic(deep_file.string(), text);
  expect_usage_error("compile '" + deep_file.string() + "' --operator rmsnorm_h4096",
                     "launches[0].grid[0]");
  // score makes it that submission's REJECTED (exit 1), and goes on.
  auto score =
      kharness("score '" + deep_file.string() + "' --compile-only --operator rmsnorm_h4096");
  EXPECT_EQ(score.exit_code, 1) << score.out;
  EXPECT_NE(score.out.find("REJECTED"), std::string::npos) << score.out;
  // Bytes that are not UTF-8 and a NUL, quoted back by the message: escaped, not raw (the NUL
  // cut the line short).
  std::filesystem::path bytes_file = tmp.path() / "bytes.cu";
  write_file_atomic(
      bytes_file.string(),
      std::string("/* kharness {\"launches\": [{\"kernel\": \"k\", \"grid\": [\"1\\u0000") +
          "\"], \"block\": [1], \"args\": []}]} */\n__global__ void k() {}\n");
  auto nul = kharness("compile '" + bytes_file.string() + "'");
  EXPECT_EQ(nul.exit_code, 2) << nul.out;
  EXPECT_NE(nul.out.find("in expression \"1\\x00\" at column 2"), std::string::npos) << nul.out;
  write_file_atomic(bytes_file.string(),
                    "/* kharness {\"launches\": [{\"kernel\": \"\xff\xfe\", \"grid\": [1]}]} */\n");
  auto raw = kharness("compile '" + bytes_file.string() + "'");
  EXPECT_EQ(raw.exit_code, 2) << raw.out;
  EXPECT_EQ(raw.out.find('\xff'), std::string::npos) << raw.out;
  EXPECT_NE(raw.out.find("\\xff"), std::string::npos) << raw.out;
  EXPECT_EQ(std::count(raw.out.begin(), raw.out.end(), '\n'), 1) << raw.out;
  // A device is not a solution (/dev/zero was read until memory ran out).
  expect_usage_error("compile /dev/zero --operator rmsnorm_h4096", "/dev/zero: is a device");
  // Output paths that cannot be written: exit 2 naming the option, not "internal error" (4).
  expect_usage_error("compile " + good + " --arch sm_90a --out " + good, "--out");
  expect_usage_error("score " + good + " --compile-only --json '" + tmp.path().string() + "'",
                     "--json: '" + tmp.path().string() + "' is a folder");
  expect_usage_error("tune-space rmsnorm_h4096 --sample 1 --out " + good, "--out");
  expect_usage_error("tune-space rmsnorm_h4096 --sample 0", "--sample");
  // Numbers no evaluation can use are bad usage before the GPU is looked for (they were exit 3).
  for (const char* flags : {"--timeout -1", "--timeout 0", "--atol -0.5", "--rtol nan",
                            "--required-matched-ratio 2", "--required-matched-ratio 0"}) {
    std::string flag(flags, std::string(flags).find(' '));
    expect_usage_error("check " + good + " --operator rmsnorm_h4096 " + flags, flag);
  }
  for (const char* flags :
       {"--max-time 0", "--warmup-runs -1", "--iterations 0", "--num-trials 0"}) {
    std::string flag(flags, std::string(flags).find(' '));
    expect_usage_error("bench " + good + " --operator rmsnorm_h4096 " + flags, flag);
  }
}

// --launch-timeout on every command that runs a worker: shown in --help, and a value no watchdog
// can use is bad usage (one line, exit 2) on any machine, before the GPU is looked for.
TEST(Cli, LaunchTimeoutIsOnEveryWorkerCommandAndMustBePositive) {
  const std::string good = fx("good/rmsnorm_simple.cu");
  for (const char* command : {"check", "validate", "bench", "score", "profile", "run"}) {
    auto help = kharness(std::string(command) + " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_NE(help.out.find("--launch-timeout"), std::string::npos) << command << "\n" << help.out;
  }
  for (const char* value : {"0", "-1", "nan", "-inf"}) {
    for (const char* command : {"check", "validate", "bench", "score", "profile"}) {
      expect_usage_error(std::string(command) + " " + good + " --operator rmsnorm_h4096 " +
                             "--launch-timeout " + value,
                         "--launch-timeout: must be > 0 seconds");
    }
    testing::TempDir tmp;
    expect_usage_error("--archive '" + tmp.path().string() +
                           "' run --operator rmsnorm_h4096 --provider tune --compile-only "
                           "--arch sm_90a --run-dir '" +
                           (tmp.path() / "run").string() + "' --launch-timeout " + value,
                       "--launch-timeout: must be > 0 seconds");
  }
  expect_usage_error("check " + good + " --launch-timeout soon", "--launch-timeout");
}

TEST(Cli, DoctorWithoutDriverSaysSoAndExitsThree) {
  auto probe = kharness("doctor --json");
  auto j = nlohmann::json::parse(probe.out.substr(probe.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << probe.out;
  if (j["driver"]["available"].get<bool>()) GTEST_SKIP() << "this machine has a driver";
  auto r = kharness("doctor");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("driver         none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVRTC"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness
