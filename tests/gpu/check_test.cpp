// The correctness stage end to end on a real GPU: `kharness check` (the built binary) on the
// fixtures of tests/fixtures/check/, each a rmsnorm_h4096 solution with one known defect (or
// none). Every test but the compile check of the fixtures skips without a GPU.
//
// Time: the good fixtures run every workload with 2 trials; the defective ones only the
// workloads with batch sizes 1, 7 and 1531 (each defect shows on all of them), and the 20-in-a-row
// and seed tests only batch 1 and 7, so the file stays under about 110 s on an H200, 10 s of
// which are infinite_loop's 5 s timeout, twice, 10 s hang_first_launch's launch watchdog and 5 s
// slow_launch's two 2.5 s launches (one trial, one workload).
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::TempDir;

const char* const kOperator = "rmsnorm_h4096";

std::string check_fixture(const std::string& name) {
  return testing::fixture("check/" + name).string();
}

// The operator's workloads in file order: {uuid, batch_size}.
struct WorkloadLine {
  std::string uuid;
  std::int64_t batch_size = 0;
};

const std::vector<WorkloadLine>& workload_lines() {
  static const std::vector<WorkloadLine> lines = [] {
    std::vector<WorkloadLine> out;
    std::ifstream in(testing::source_dir() / "operators" / kOperator / "workloads.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j = json::parse(line);
      out.push_back(
          {j.at("uuid").get<std::string>(), j.at("axes").at("batch_size").get<std::int64_t>()});
    }
    return out;
  }();
  return lines;
}

std::string uuid_for_batch(std::int64_t batch) {
  for (const auto& w : workload_lines()) {
    if (w.batch_size == batch) return w.uuid;
  }
  ADD_FAILURE() << "no workload of " << kOperator << " with batch_size " << batch;
  return "";
}

// --workloads for the defective fixtures: batch sizes 1, 7 and 1531.
std::string small_workloads() {
  return "--workloads " + uuid_for_batch(1) + "," + uuid_for_batch(7) + "," + uuid_for_batch(1531);
}

struct CheckRun {
  int exit_code = -1;
  json verdicts;  // an object for one solution, an array for several; discarded when not JSON
  std::string out;
  std::string err;
  double seconds = 0;

  std::string describe() const {
    std::string e = err.size() > 4000 ? "..." + err.substr(err.size() - 4000) : err;
    std::string o = out.size() > 4000 ? out.substr(0, 4000) + "..." : out;
    return "exit " + std::to_string(exit_code) + ", " + std::to_string(seconds) + " s\nstdout:\n" +
           o + "\nstderr:\n" + e;
  }
};

// `kharness check FILES... --operator rmsnorm_h4096 ARGS --json`, stdout parsed as JSON.
CheckRun run_check(const std::vector<std::string>& files, const std::string& args) {
  TempDir tmp;
  const auto err_file = tmp.path() / "stderr.txt";
  std::string command = std::string("'") + KHARNESS_BINARY + "' check";
  for (const auto& f : files) command += " '" + f + "'";
  command += std::string(" --operator ") + kOperator + " " + args + " --json 2>'" +
             err_file.string() + "'";
  const auto start = std::chrono::steady_clock::now();
  testing::CommandResult r = testing::run_command(command);
  CheckRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.exit_code = r.exit_code;
  run.out = r.out;
  std::ifstream in(err_file);
  run.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  run.verdicts = json::parse(r.out, nullptr, false);
  return run;
}

std::string kind_of(const json& verdict) {
  const json& f = verdict.value("failure", json(nullptr));
  return f.is_object() ? f.value("kind", "") : "";
}

std::string failure_text(const json& verdict) {
  const json& f = verdict.value("failure", json(nullptr));
  std::string s = f.is_object() ? f.dump() : "no failure";
  const std::string stderr_tail = verdict.value("worker_stderr", "");
  if (!stderr_tail.empty()) s += "\nworker stderr: " + stderr_tail.substr(0, 2000);
  return s;
}

// ---------------------------------------------------------------------------------------------
// One fixture, one expected verdict. The defective fixtures run the workloads with batch sizes
// 1, 7 and 1531 in that order, so the verdict's failure is the batch-1 workload's.

struct FixtureCase {
  std::string file;
  std::string status;
  std::set<std::string> kinds;        // acceptable failure kinds; empty: PASSED or "any non-empty"
  bool all_workloads = false;         // run every workload (else batch 1, 7 and 1531)
  bool every_workload_fails = false;  // each selected workload must fail too, not only one
  double timeout = 10;
  // More checks on the verdict: the evidence that shows the defect.
  std::function<void(const json& verdict)> evidence;
  // When set: replaces "--trials 2" and the workload selection (a fixture too slow for them).
  std::function<std::string()> args;
};

std::ostream& operator<<(std::ostream& os, const FixtureCase& c) { return os << c.file; }

json evidence_of(const json& v) {
  if (!v.is_object() || !v.contains("failure")) return json::object();
  const json& f = v.at("failure");
  if (!f.is_object() || !f.contains("evidence") || !f.at("evidence").is_object())
    return json::object();
  return f.at("evidence");
}

const std::vector<FixtureCase>& fixture_cases() {
  static const std::vector<FixtureCase> cases = {
      {"good_simple.cu", "PASSED", {}, true, false},
      {"good_vectorized.cu", "PASSED", {}, true, false},
      {"dispatch_by_batch.cu", "PASSED", {}, true, false},
      {"writes_nothing.cu",
       "INCORRECT_NUMERICAL",
       {"output_not_written"},
       false,
       true,
       10,
       [](const json& v) {
         EXPECT_EQ(evidence_of(v).value("tensor", ""), "output");
         EXPECT_EQ(evidence_of(v).value("unwritten", 0ll), 4096);  // all of batch 1
         EXPECT_EQ(evidence_of(v).value("first_bad_index", -1), 0);
       }},
      {"half_rows.cu",
       "INCORRECT_NUMERICAL",
       {"output_not_written"},
       false,
       true,
       10,
       [](const json& v) {
         // batch 7: rows 0..2 written, 3..6 not.
         const json& w = v.at("workloads")[1];
         ASSERT_EQ(w.at("axes").value("batch_size", 0), 7);
         const json& e = w.at("failure").at("evidence");
         EXPECT_EQ(e.value("unwritten", 0ll), 4 * 4096);
         EXPECT_EQ(e.value("first_bad_index", -1), 3 * 4096);
       }},
      {"one_past_end.cu",
       "RUNTIME_ERROR",
       {"out_of_bounds_write"},
       false,
       true,
       10,
       [](const json& v) {
         EXPECT_EQ(evidence_of(v).value("tensor", ""), "output");
         EXPECT_EQ(evidence_of(v).value("guard_offset", -1ll), 4096 * 2)
             << "the first byte past the end";
       }},
      {"modifies_input.cu",
       "INCORRECT_NUMERICAL",
       {"input_modified"},
       false,
       true,
       10,
       [](const json& v) { EXPECT_EQ(evidence_of(v).value("tensor", ""), "hidden_states"); }},
      {"one_nan.cu",
       "INCORRECT_NUMERICAL",
       {"nan_or_inf"},
       false,
       true,
       10,
       [](const json& v) {
         EXPECT_EQ(evidence_of(v).value("tensor", ""), "output");
         EXPECT_EQ(evidence_of(v).value("first_bad_index", -1), 5);
         EXPECT_EQ(evidence_of(v).value("count", 0), 1);
       }},
      {"forgets_weight.cu",
       "INCORRECT_NUMERICAL",
       {"tolerance"},
       false,
       true,
       10,
       [](const json& v) { EXPECT_LT(evidence_of(v).value("matched_ratio", 1.0), 0.5); }},
      {"smem_race.cu",
       "INCORRECT_NUMERICAL",
       {"tolerance", "output_not_written", "nondeterministic"},
       false,
       false},
      {"first_batch_only.cu",
       "INCORRECT_NUMERICAL",
       {"output_not_written"},
       false,
       false,
       10,
       [](const json& v) {
         // The fixture hard-codes the batch size of the first workload line: that one passes.
         ASSERT_EQ(workload_lines().front().batch_size, 1)
             << "first_batch_only.cu hard-codes 1; update it";
         ASSERT_EQ(v.at("workloads").size(), 3u);
         for (const auto& w : v.at("workloads")) {
           const std::int64_t batch = w.at("axes").value("batch_size", std::int64_t{-1});
           if (batch == 1) {
             EXPECT_EQ(w.value("status", ""), "PASSED") << w.dump();
             EXPECT_EQ(w.at("trials").size(), 2u);
             continue;
           }
           EXPECT_EQ(w.value("status", ""), "INCORRECT_NUMERICAL") << w.dump();
           ASSERT_TRUE(w.at("failure").is_object());
           EXPECT_EQ(w.at("failure").value("kind", ""), "output_not_written");
           // Row 0 is right, every row from 1 on is missing.
           EXPECT_EQ(w.at("failure").at("evidence").value("first_bad_index", -1), 4096);
           EXPECT_EQ(w.at("failure").at("evidence").value("unwritten", 0ll), (batch - 1) * 4096);
         }
       }},
      {"first_launch_only.cu",
       "INCORRECT_NUMERICAL",
       {"output_not_written", "stale_output", "nondeterministic"},
       false,
       true},
      {"infinite_loop.cu", "TIMEOUT", {"timeout"}, false, false, 5},
      // The launch watchdog (--launch-timeout, default 10 s) ends it long before --timeout 60.
      {"hang_first_launch.cu",
       "TIMEOUT",
       {"timeout"},
       false,
       false,
       60,
       [](const json& v) {
         const json e = evidence_of(v);
         EXPECT_EQ(e.value("watchdog", false), true) << failure_text(v);
         EXPECT_EQ(e.value("launch_timeout_seconds", 0.0), 10.0);
         EXPECT_EQ(e.value("workload", ""), uuid_for_batch(1));
         const std::string label = e.value("label", "");
         EXPECT_NE(label.find("candidate"), std::string::npos) << label;
         EXPECT_NE(label.find("rmsnorm_kernel"), std::string::npos) << label;
         EXPECT_LT(v.value("seconds", 1e9), 15.0) << "the worker ran past the launch watchdog";
       }},
      // Each launch takes 2.5 s: 2 launches (the run and the determinism rerun) of one trial on
      // one workload, each its own wait, so the 10 s launch watchdog never fires.
      {"slow_launch.cu",
       "PASSED",
       {},
       false,
       false,
       60,
       [](const json& v) {
         EXPECT_GE(v.value("seconds", 0.0), 5.0) << "the fixture did not spin: it tests nothing";
       },
       [] { return "--trials 1 --launch-timeout 10 --workloads " + uuid_for_batch(1); }},
      {"null_write.cu",
       "RUNTIME_ERROR",
       {"illegal_address"},
       false,
       false,
       10,
       [](const json& v) {
         EXPECT_EQ(evidence_of(v).value("cuda_error", ""), "CUDA_ERROR_ILLEGAL_ADDRESS");
       }},
      {"trap.cu",
       "RUNTIME_ERROR",
       {},
       false,
       false,
       10,
       [](const json& v) {
         const std::string kind = kind_of(v);
         EXPECT_NE(kind, "worker_crashed") << failure_text(v);
         const std::string cuda_error = evidence_of(v).value("cuda_error", "");
         EXPECT_EQ(cuda_error.rfind("CUDA_ERROR_", 0), 0u) << failure_text(v);
         std::cout << "__trap() is reported as " << kind << " (" << cuda_error << ")\n";
       }},
      {"too_much_smem.cu",
       "RUNTIME_ERROR",
       {"launch_failed"},
       false,
       true,
       10,
       [](const json& v) {
         EXPECT_NE(v.at("failure").value("message", "").find("CUDA_ERROR_"), std::string::npos)
             << failure_text(v);
         EXPECT_FALSE(evidence_of(v).value("cuda_error", "").empty()) << failure_text(v);
       }},
  };
  return cases;
}

class CheckFixture : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(CheckFixture, VerdictAndFailureKind) {
  SKIP_WITHOUT_GPU();
  const FixtureCase& c = GetParam();
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", c.timeout);
  std::string args = std::string("--seed 1 --timeout ") + timeout;
  if (c.args) {
    args += " " + c.args();
  } else {
    args += " --trials 2";
    if (!c.all_workloads) args += " " + small_workloads();
  }
  const CheckRun run = run_check({check_fixture(c.file)}, args);
  std::cout << c.file << ": exit " << run.exit_code << " in " << run.seconds << " s\n";
  ASSERT_TRUE(run.verdicts.is_object()) << run.describe();
  const json& v = run.verdicts;
  const std::string kind = kind_of(v);

  EXPECT_EQ(run.exit_code, c.status == "PASSED" ? 0 : 1) << run.describe();
  ASSERT_EQ(v.value("status", ""), c.status) << failure_text(v);
  EXPECT_EQ(v.value("definition", ""), kOperator);
  EXPECT_EQ(v.value("seed", 0ull), 1u);
  const json& workloads = v.at("workloads");

  if (c.status == "PASSED" && c.args) {  // its own selection: every workload run passed
    EXPECT_TRUE(v.at("failure").is_null()) << failure_text(v);
    EXPECT_FALSE(workloads.empty());
    for (const auto& w : workloads) EXPECT_EQ(w.value("status", ""), "PASSED") << w.dump();
    if (c.evidence) c.evidence(v);
    return;
  }
  if (c.status == "PASSED") {
    EXPECT_TRUE(v.at("failure").is_null()) << failure_text(v);
    // Every workload of the operator, every one PASSED with both trials.
    EXPECT_EQ(workloads.size(), workload_lines().size());
    std::set<std::int64_t> batches;
    for (const auto& w : workloads) {
      batches.insert(w.at("axes").value("batch_size", std::int64_t{-1}));
      EXPECT_EQ(w.value("status", ""), "PASSED") << w.dump();
      EXPECT_EQ(w.at("trials").size(), 2u) << w.value("uuid", "");
      for (const auto& t : w.at("trials")) {
        EXPECT_EQ(t.value("status", ""), "PASSED");
        ASSERT_FALSE(t.at("comparisons").empty());
        EXPECT_EQ(t.at("comparisons")[0].value("matched_ratio", 0.0), 1.0);
      }
    }
    for (std::int64_t b : {1, 7, 1531, 16384})
      EXPECT_TRUE(batches.count(b)) << "batch_size " << b << " not run";
    return;
  }

  // A failed verdict names why.
  ASSERT_TRUE(v.at("failure").is_object()) << run.describe();
  EXPECT_FALSE(v.at("failure").value("message", "").empty());
  if (c.kinds.empty()) {
    EXPECT_FALSE(kind.empty()) << failure_text(v);
  } else {
    EXPECT_TRUE(c.kinds.count(kind)) << "kind '" << kind << "'\n" << failure_text(v);
  }
  if (c.status == "TIMEOUT") EXPECT_LT(run.seconds, c.timeout + 15) << "the hang was not cut off";
  ASSERT_FALSE(workloads.empty()) << run.describe();
  if (c.every_workload_fails) {
    ASSERT_EQ(workloads.size(), 3u) << run.describe();
    for (const auto& w : workloads) {
      EXPECT_EQ(w.value("status", ""), c.status) << w.dump();
      const json& wf = w.value("failure", json(nullptr));
      ASSERT_TRUE(wf.is_object()) << w.dump();
      EXPECT_TRUE(c.kinds.count(wf.value("kind", ""))) << w.dump();
    }
  }
  if (c.evidence) {
    try {
      c.evidence(v);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "checking the evidence threw: " << e.what() << "\n"
                    << v.dump(2).substr(0, 4000);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckFixture, ::testing::ValuesIn(fixture_cases()),
                         [](const ::testing::TestParamInfo<FixtureCase>& info) {
                           std::string name = info.param.file.substr(0, info.param.file.find('.'));
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// Without a GPU too: every fixture passes the compile stage (each fails, if at all, only when
// run), says what it is on its first line, and has a row in the table above.
TEST(CheckFixtures, EveryFixtureCompilesAndIsInTheTable) {
  const Operator op = OperatorRegistry::from_environment({}).load(kOperator);
  std::set<std::string> in_table;
  for (const auto& c : fixture_cases()) in_table.insert(c.file);
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::directory_iterator(testing::fixture("check"))) {
    if (e.path().extension() != ".cu") continue;
    const std::string file = e.path().filename().string();
    on_disk.insert(file);
    SCOPED_TRACE(file);
    std::ifstream in(e.path());
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first.rfind("// fixture: ", 0), 0u) << first;
    EXPECT_NE(first.find("expect "), std::string::npos) << first;
    const Solution solution = load_solution(e.path());
    CompileOptions options;
    options.arch = "sm_90a";
    options.use_cache = false;
    const CompileResult r = compile_solution(solution, &op.definition, &op.workloads, options);
    EXPECT_EQ(r.status, Status::kPassed)
        << r.log << (r.violations.empty() ? "" : r.violations[0].message);
  }
  EXPECT_EQ(on_disk, in_table);
}

// A dispatching plan: every workload of the operator runs the variant its batch size selects,
// passes, and its verdict names that variant (the same label the plan gives it).
TEST(CheckVariants, DispatchingSolutionPassesEveryWorkloadAndNamesItsVariant) {
  SKIP_WITHOUT_GPU();
  const CheckRun run = run_check({check_fixture("dispatch_by_batch.cu")}, "--seed 3 --trials 2");
  ASSERT_TRUE(run.verdicts.is_object()) << run.describe();
  const json& v = run.verdicts;
  EXPECT_EQ(run.exit_code, 0) << run.describe();
  EXPECT_EQ(v.value("status", ""), "PASSED") << failure_text(v);
  const json& workloads = v.at("workloads");
  ASSERT_EQ(workloads.size(), workload_lines().size()) << run.describe();
  std::set<std::string> variants;
  for (const auto& w : workloads) {
    const std::int64_t batch = w.at("axes").value("batch_size", std::int64_t{-1});
    const std::string want = batch <= 8     ? "0 (batch_size <= 8)"
                             : batch <= 512 ? "1 (batch_size <= 512)"
                                            : "2 (otherwise)";
    EXPECT_EQ(w.value("status", ""), "PASSED") << w.dump();
    EXPECT_EQ(w.value("variant", ""), want) << "batch_size " << batch;
    variants.insert(w.value("variant", ""));
  }
  EXPECT_EQ(variants.size(), 3u) << "every variant served some workload";
}

json single_verdict(const std::string& file, const std::string& args) {
  const CheckRun run = run_check({check_fixture(file)}, args);
  EXPECT_TRUE(run.verdicts.is_object()) << run.describe();
  return run.verdicts.is_object() ? run.verdicts : json::object();
}

// ---------------------------------------------------------------------------------------------
// 20 solutions in one process: every verdict arrives, in order, with its own status. Crashes,
// a trap and a hang are each followed by a good solution, which must still pass.

TEST(CheckMany, TwentyInARowKeepTheirOrderAndVerdicts) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::string, std::string>> plan = {
      {"good_simple.cu", "PASSED"},
      {"null_write.cu", "RUNTIME_ERROR"},
      {"good_vectorized.cu", "PASSED"},
      {"trap.cu", "RUNTIME_ERROR"},
      {"good_simple.cu", "PASSED"},
      {"infinite_loop.cu", "TIMEOUT"},
      {"good_simple.cu", "PASSED"},
      {"writes_nothing.cu", "INCORRECT_NUMERICAL"},
      {"one_past_end.cu", "RUNTIME_ERROR"},
      {"modifies_input.cu", "INCORRECT_NUMERICAL"},
      {"one_nan.cu", "INCORRECT_NUMERICAL"},
      {"forgets_weight.cu", "INCORRECT_NUMERICAL"},
      {"smem_race.cu", "INCORRECT_NUMERICAL"},
      {"first_batch_only.cu", "INCORRECT_NUMERICAL"},
      {"first_launch_only.cu", "INCORRECT_NUMERICAL"},
      {"too_much_smem.cu", "RUNTIME_ERROR"},
      {"half_rows.cu", "INCORRECT_NUMERICAL"},
      {"trap.cu", "RUNTIME_ERROR"},
      {"null_write.cu", "RUNTIME_ERROR"},
      {"good_vectorized.cu", "PASSED"},
  };
  ASSERT_EQ(plan.size(), 20u);
  std::vector<std::string> files;
  for (const auto& [file, status] : plan) files.push_back(check_fixture(file));
  const CheckRun run = run_check(files, "--timeout 5 --trials 1 --seed 3 --workloads " +
                                            uuid_for_batch(1) + "," + uuid_for_batch(7));
  std::cout << "20 solutions in " << run.seconds << " s\n";
  EXPECT_EQ(run.exit_code, 1) << run.describe();
  ASSERT_TRUE(run.verdicts.is_array()) << run.describe();
  ASSERT_EQ(run.verdicts.size(), 20u) << run.describe();
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const json& v = run.verdicts[i];
    const std::string source = v.value("source", "");
    const std::string& file = plan[i].first;
    EXPECT_TRUE(source.size() >= file.size() &&
                source.compare(source.size() - file.size(), file.size(), file) == 0)
        << "verdict " << i << " is for " << source << ", expected " << file;
    EXPECT_EQ(v.value("status", ""), plan[i].second)
        << "verdict " << i << " (" << file << "): " << failure_text(v);
    EXPECT_EQ(v.value("seed", 0ull), 3u);
  }
}

// ---------------------------------------------------------------------------------------------
// Seeds: --seed replays the same per-trial seeds (and so the same inputs); another seed differs.

std::vector<std::uint64_t> trial_seeds(const json& verdict) {
  std::vector<std::uint64_t> seeds;
  for (const auto& w : verdict.value("workloads", json::array())) {
    for (const auto& t : w.value("trials", json::array())) seeds.push_back(t.value("seed", 0ull));
  }
  return seeds;
}

TEST(CheckSeeds, SameSeedReplaysDifferentSeedDiffers) {
  SKIP_WITHOUT_GPU();
  const std::string workloads = " --workloads " + uuid_for_batch(1) + "," + uuid_for_batch(7);
  const json a = single_verdict("good_simple.cu", "--trials 2 --seed 7 --timeout 10" + workloads);
  const json b = single_verdict("good_simple.cu", "--trials 2 --seed 7 --timeout 10" + workloads);
  const json c = single_verdict("good_simple.cu", "--trials 2 --seed 8 --timeout 10" + workloads);
  for (const json* v : {&a, &b, &c})
    ASSERT_EQ(v->value("status", ""), "PASSED") << failure_text(*v);
  EXPECT_EQ(a.value("seed", 0ull), 7u);
  EXPECT_EQ(c.value("seed", 0ull), 8u);

  const auto sa = trial_seeds(a), sb = trial_seeds(b), sc = trial_seeds(c);
  ASSERT_EQ(sa.size(), 4u);  // 2 workloads x 2 trials
  EXPECT_EQ(sa, sb);
  ASSERT_EQ(sc.size(), sa.size());
  for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_NE(sa[i], sc[i]) << "trial " << i;
  // Every trial of a run has its own seed (fresh inputs per trial and per workload).
  EXPECT_EQ(std::set<std::uint64_t>(sa.begin(), sa.end()).size(), sa.size());

  // The same seed reproduces a failure exactly: same element, same expected and got values.
  const std::string one = " --workloads " + uuid_for_batch(7);
  const json f1 = single_verdict("forgets_weight.cu", "--trials 1 --seed 7 --timeout 10" + one);
  const json f2 = single_verdict("forgets_weight.cu", "--trials 1 --seed 7 --timeout 10" + one);
  ASSERT_EQ(kind_of(f1), "tolerance") << failure_text(f1);
  ASSERT_EQ(kind_of(f2), "tolerance") << failure_text(f2);
  EXPECT_EQ(f1.at("failure").at("evidence"), f2.at("failure").at("evidence"));
}

// ---------------------------------------------------------------------------------------------
// Elementwise outputs are compared on the device (no download of a passing trial's
// outputs); KHARNESS_HOST_COMPARE=1 downloads them and compares on the host. Both must
// give the same verdict, bit for bit in everything but times: status, failure (kind, message,
// evidence) and, per trial, its seed, status, failure, bitwise_deterministic and comparisons (max
// errors, matched ratio, first bad index, expected, got). Passing and failing rmsnorm fixtures
// (tolerance, nan_or_inf, output_not_written, a failure on the determinism rerun), and operator
// seeds with float32 outputs and with two outputs. Prints each run's phases, where the gain shows
// ("reference" without its download, "compare" for "download" + "compare", "determinism").

// The verdict without what differs from run to run (times, the environment, worker output).
json verdict_content(const json& v) {
  json out = {{"status", v.value("status", "")},
              {"failure", v.value("failure", json(nullptr))},
              {"suspect", v.value("suspect", json(nullptr))},
              {"seed", v.value("seed", 0ull)}};
  json workloads = json::array();
  for (const auto& w : v.value("workloads", json::array())) {
    json trials = json::array();
    for (json t : w.value("trials", json::array())) {
      t.erase("seconds");
      trials.push_back(t);
    }
    workloads.push_back({{"uuid", w.value("uuid", "")},
                         {"status", w.value("status", "")},
                         {"failure", w.value("failure", json(nullptr))},
                         {"trials", trials}});
  }
  out["workloads"] = workloads;
  return out;
}

// The first `n` workload uuids of an operator, comma-separated.
std::string first_workloads(const std::string& op, std::size_t n) {
  std::ifstream in(testing::source_dir() / "operators" / op / "workloads.jsonl");
  std::string line, out;
  for (std::size_t i = 0; i < n && std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out += (out.empty() ? "" : ",") + json::parse(line).at("uuid").get<std::string>();
    ++i;
  }
  return out;
}

TEST(CheckDeviceCompare, VerdictsEqualTheHostComparisonsBitForBit) {
  SKIP_WITHOUT_GPU();
  struct Case {
    std::string file, op, workloads, status;
  };
  const std::string rmsnorm =
      uuid_for_batch(1) + "," + uuid_for_batch(7) + "," + uuid_for_batch(1531);
  auto seed = [](const std::string& op) {
    return (testing::source_dir() / "operators" / op / "seed.cu").string();
  };
  const std::vector<Case> cases = {
      {check_fixture("good_simple.cu"), kOperator, rmsnorm, "PASSED"},
      {check_fixture("forgets_weight.cu"), kOperator, rmsnorm, "INCORRECT_NUMERICAL"},
      {check_fixture("one_nan.cu"), kOperator, rmsnorm, "INCORRECT_NUMERICAL"},
      {check_fixture("half_rows.cu"), kOperator, rmsnorm, "INCORRECT_NUMERICAL"},
      {check_fixture("first_launch_only.cu"), kOperator, rmsnorm, "INCORRECT_NUMERICAL"},
      {seed("copy_f32"), "copy_f32", first_workloads("copy_f32", 2), "PASSED"},
      {seed("gdn_decode_qk4_v8_d128_k_last"), "gdn_decode_qk4_v8_d128_k_last",
       first_workloads("gdn_decode_qk4_v8_d128_k_last", 2), "PASSED"},
      {seed("rope_with_cos_sin_cache_neox_style_d128_rd64"),
       "rope_with_cos_sin_cache_neox_style_d128_rd64",
       first_workloads("rope_with_cos_sin_cache_neox_style_d128_rd64", 2), "PASSED"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file + " on " + c.op);
    json verdicts[2];
    for (int host = 0; host < 2; ++host) {
      TempDir tmp;
      const std::string command = std::string(host ? "KHARNESS_HOST_COMPARE=1 " : "") + "'" +
                                  KHARNESS_BINARY + "' check '" + c.file + "' --operator " + c.op +
                                  " --workloads " + c.workloads +
                                  " --trials 2 --seed 11 --timeout 60 --no-cache --json 2>'" +
                                  (tmp.path() / "err").string() + "'";
      const testing::CommandResult r = testing::run_command(command);
      verdicts[host] = json::parse(r.out, nullptr, false);
      ASSERT_TRUE(verdicts[host].is_object()) << command << "\n" << r.out.substr(0, 3000);
      EXPECT_EQ(verdicts[host].value("status", ""), c.status)
          << (host ? "host" : "device") << " comparison: " << failure_text(verdicts[host]);
      std::cout << c.op << " " << std::filesystem::path(c.file).filename().string() << " ("
                << (host ? "host" : "device") << "): " << verdicts[host].value("status", "")
                << ", phases " << verdicts[host].value("phases", json::object()).dump() << "\n";
    }
    const json device = verdict_content(verdicts[0]);
    const json host = verdict_content(verdicts[1]);
    EXPECT_EQ(device, host) << "device:\n"
                            << device.dump(1).substr(0, 6000) << "\nhost:\n"
                            << host.dump(1).substr(0, 6000);
  }
}

}  // namespace
}  // namespace kharness
