// Every fixture of tests/fixtures/cheats (the timing-integrity cheats and their honest twins,
// docs/correctness.md#checked-iterations) compiled with the real NVRTC against the operator its
// plan names, the rules included (no GPU needed): a fixture that rots (a plan field kharness no
// longer accepts, a kernel whose parameters drifted from its args, code that no longer compiles)
// fails here, not on the next device run. Each must also say on its first line what it is and what
// it must get ("// fixture: ...").
//
// The plan's "definition" names the operator: a built-in one, the test definition beside the
// fixtures (top_k_top_p_sampling_from_probs_v4096.json), or a FlashInfer-Bench definition from the
// snapshot at KHARNESS_FIB_DIR (a fixture naming one is skipped where the snapshot is absent).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {
namespace fs = std::filesystem;

fs::path cheats_dir() { return testing::fixture("cheats"); }
fs::path fib_dir() { return fs::path(KHARNESS_FIB_DIR); }
bool have_fib() { return fs::exists(fib_dir() / "definitions"); }

// The fixtures' file names (sorted), read when the test binary starts.
std::vector<std::string> fixture_names() {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(cheats_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".cu") out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The operators a fixture may name: the test definitions beside the fixtures, the snapshot's
// (where it is), the built-in ones.
OperatorRegistry fixture_registry() {
  std::vector<fs::path> dirs = {cheats_dir()};
  if (have_fib()) dirs.push_back(fib_dir());
  return OperatorRegistry::from_environment(dirs);
}

TEST(CheatFixtures, TheFolderHoldsThem) {
  const std::vector<std::string> names = fixture_names();
  EXPECT_GE(names.size(), 29u) << "tests/fixtures/cheats lost its fixtures?";
  // The issue-31 set (tests/fixtures/README.md, scripts/device-test.sh's cheats table).
  for (const char* name :
       {"gemm_fp8_fnscope_global_cache.cu", "rmsnorm_constant_cache.cu", "rmsnorm_local_cache.cu",
        "rmsnorm_slack_cache.cu", "sampler_tells_checked.cu", "sampler_replay.cu",
        "rmsnorm_partial_when_timed.cu", "gemm_fp8_partial_when_timed.cu", "honest_persistent.cu",
        "honest_cooperative.cu", "honest_pdl.cu", "honest_cluster.cu", "honest_work_queue.cu",
        "honest_splitk_atomics.cu", "honest_rng_offset.cu"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

// Every fixture is listed in tests/fixtures/README.md.
TEST(CheatFixtures, EachIsDocumented) {
  const std::string readme = read_text(testing::fixture("README.md"));
  for (const auto& name : fixture_names()) {
    EXPECT_NE(readme.find(name + "`"), std::string::npos)
        << name << " is not in tests/fixtures/README.md";
  }
}

class CheatFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CheatFixture, CompilesAndPassesTheRules) {
  const fs::path path = cheats_dir() / GetParam();
  const std::string text = read_text(path);
  EXPECT_EQ(text.rfind("// fixture: ", 0), 0u)
      << "the first line says what the fixture is and what it must get (\"// fixture: ...\")";

  Solution solution = load_solution(path.string());
  const std::string definition = solution.plan.definition;
  ASSERT_FALSE(definition.empty()) << "the plan names no \"definition\"";
  std::unique_ptr<Operator> op;
  try {
    op = std::make_unique<Operator>(fixture_registry().load(definition));
  } catch (const Error& e) {
    if (!have_fib())
      GTEST_SKIP() << definition << ": no FlashInfer-Bench snapshot at " << fib_dir();
    FAIL() << definition << ": " << e.what();
  }
  CompileOptions options;
  options.arch = "sm_90a";  // every fixture's target: the H200 (clusters, PDL, fp8 conversions)
  const CompileResult r = compile_solution(solution, &op->definition, &op->workloads, options);
  std::string why;
  for (const auto& v : r.violations) why += v.rule + ": " + v.message + "\n";
  ASSERT_TRUE(r.ok()) << GetParam() << " against " << definition << "\n" << why << r.log;
  EXPECT_TRUE(r.violations.empty()) << why;
  for (const auto& launch : solution.plan.launches) {
    EXPECT_NE(r.find_kernel(launch.kernel), nullptr) << launch.kernel;
  }
}

INSTANTIATE_TEST_SUITE_P(Cheats, CheatFixture, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kharness
