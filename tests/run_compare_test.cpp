// `kharness compare` (run to run, noise-aware) and the CSV report: the library on fixture verdicts
// and the built binary on tests/fixtures/compare/ (score JSON files), its CSV read back by
// Python's csv module.
#include "kharness/run_compare.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kharness/verdict.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::TempDir;

std::string compare_fixture(const std::string& name) {
  return testing::fixture("compare/" + name).string();
}

std::vector<Verdict> load(const std::string& name) {
  std::ifstream in(compare_fixture(name));
  json j = json::parse(in);
  std::vector<Verdict> out;
  for (const auto& v : j["solutions"]) out.push_back(verdict_from_json(v));
  return out;
}

std::map<std::string, std::string> calls(const report::CompareResult& r) {
  std::map<std::string, std::string> out;
  for (const auto& row : r.rows) out[row.solution + "/" + row.workload.substr(0, 8)] = row.call;
  return out;
}

TEST(CompareCall, BandAndNoiseLimit) {
  report::CompareOptions o;
  report::TimedSide a{"PASSED", 1e-5, 0.002, 100}, b = a;
  double ratio = 0, noise = 0;
  EXPECT_EQ(report::compare_call(a, b, o, &ratio, &noise), "same");
  EXPECT_DOUBLE_EQ(ratio, 1.0);
  b.latency = 1.1e-5;
  EXPECT_EQ(report::compare_call(a, b, o, &ratio, &noise), "slower");
  b.latency = 0.9e-5;
  EXPECT_EQ(report::compare_call(a, b, o, &ratio, &noise), "faster");
  // 10% apart but each side ±10%: nothing can be said.
  a.noise = b.noise = 0.1;
  b.latency = 1.1e-5;
  EXPECT_EQ(report::compare_call(a, b, o, &ratio, &noise), "unclear");
  // Unknown noise on one side (too few samples): unclear, never same.
  a.noise = 0.002;
  b.noise = -1;
  b.latency = 1e-5;
  EXPECT_EQ(report::compare_call(a, b, o, &ratio, &noise), "unclear");
}

TEST(CompareRuns, EqualRunsAreAllSame) {
  report::CompareOptions o;
  o.fail_percent = 2;
  auto r = report::compare_verdicts(load("base.json"), load("rerun.json"), o);
  ASSERT_EQ(r.rows.size(), 4u);
  for (const auto& row : r.rows) EXPECT_EQ(row.call, "same") << row.solution << " " << row.workload;
  EXPECT_FALSE(r.regression);
}

TEST(CompareRuns, TenPercentSlowerIsARegression) {
  report::CompareOptions o;
  o.fail_percent = 2;
  auto r = report::compare_verdicts(load("base.json"), load("slower.json"), o);
  auto c = calls(r);
  EXPECT_EQ(c["beta/99179b18"], "slower");
  EXPECT_EQ(c["beta/4c9a829f"], "same");
  EXPECT_EQ(c["alpha/99179b18"], "same");
  EXPECT_TRUE(r.regression);
  o.fail_percent = 20;  // slower, but within what the gate allows
  EXPECT_FALSE(report::compare_verdicts(load("base.json"), load("slower.json"), o).regression);
}

TEST(CompareRuns, NoisyRunsAreUnclearNotSlower) {
  report::CompareOptions o;
  o.fail_percent = 2;
  auto r = report::compare_verdicts(load("base.json"), load("noisy.json"), o);
  for (const auto& row : r.rows) EXPECT_EQ(row.call, "unclear") << row.solution;
  EXPECT_FALSE(r.regression);
}

TEST(CompareRuns, AddedRemovedAndFailed) {
  auto olds = load("base.json");
  auto news = load("rerun.json");
  news[0].solution = "gamma";  // alpha removed, gamma added
  news[1].workloads[0].status = Status::kIncorrectNumerical;
  news[1].workloads[0].timing = TimingResult{};
  report::CompareOptions o;
  o.fail_percent = 2;
  auto r = report::compare_verdicts(olds, news, o);
  auto c = calls(r);
  EXPECT_EQ(c["gamma/99179b18"], "added");
  EXPECT_EQ(c["alpha/99179b18"], "removed");
  EXPECT_EQ(c["beta/99179b18"], "failed");
  EXPECT_TRUE(r.regression);  // a workload that passed and now fails
}

TEST(CompareCli, EqualSlowerNoisyExitCodesAndJson) {
  TempDir dir;
  std::string out = (dir.path() / "c.json").string();
  auto same = testing::kharness("compare '" + compare_fixture("base.json") + "' '" +
                                compare_fixture("rerun.json") + "' --fail-on-regression 2");
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_NE(same.out.find("| alpha | rmsnorm_h4096 |"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("4 same"), std::string::npos) << same.out;

  auto slower = testing::kharness("compare '" + compare_fixture("base.json") + "' '" +
                                  compare_fixture("slower.json") +
                                  "' --fail-on-regression 2 --json '" + out + "'");
  EXPECT_EQ(slower.exit_code, 1) << slower.out;
  std::ifstream in(out);
  json j = json::parse(in);
  EXPECT_EQ(j["schema"], "kharness.compare/1");
  EXPECT_EQ(j["regression"], true);
  EXPECT_EQ(j["summary"]["slower"], 1);
  EXPECT_EQ(j["summary"]["same"], 3);
  bool found = false;
  for (const auto& row : j["rows"]) {
    if (row["call"] == "slower") {
      found = true;
      EXPECT_EQ(row["solution"], "beta");
      EXPECT_NEAR(row["ratio"].get<double>(), 1.1, 1e-9);
      EXPECT_TRUE(row["regression"].get<bool>());
    }
  }
  EXPECT_TRUE(found);
  // Without the gate the comparison itself succeeded.
  auto nogate = testing::kharness("compare '" + compare_fixture("base.json") + "' '" +
                                  compare_fixture("slower.json") + "'");
  EXPECT_EQ(nogate.exit_code, 0) << nogate.out;

  auto noisy = testing::kharness("compare '" + compare_fixture("base.json") + "' '" +
                                 compare_fixture("noisy.json") + "' --fail-on-regression 2");
  EXPECT_EQ(noisy.exit_code, 0) << noisy.out;
  EXPECT_NE(noisy.out.find("4 unclear"), std::string::npos) << noisy.out;
  EXPECT_EQ(noisy.out.find("slower"), std::string::npos) << noisy.out;
}

TEST(CompareCli, BadInputIsExit2) {
  TempDir dir;
  std::string bad = (dir.path() / "x.json").string();
  std::ofstream(bad) << "{\"hello\": 1}";
  auto r = testing::kharness("compare '" + bad + "' '" + compare_fixture("base.json") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("x.json"), std::string::npos) << r.out;
  auto missing =
      testing::kharness("--archive '" + dir.path().string() + "/none' compare no-such-run '" +
                        compare_fixture("base.json") + "'");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
}

TEST(Csv, FieldQuoting) {
  EXPECT_EQ(report::csv_field("plain"), "plain");
  EXPECT_EQ(report::csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(report::csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(report::csv_field("two\nlines"), "\"two\nlines\"");
}

TEST(Csv, PythonCsvModuleReadsIt) {
  if (testing::run_command("python3 -c 'import csv' 2>&1").exit_code != 0)
    GTEST_SKIP() << "no python3";
  std::vector<Verdict> verdicts = load("base.json");
  // A failure message with every character RFC 4180 quotes, and a solution with no workload.
  verdicts[1].workloads[1].status = Status::kIncorrectNumerical;
  verdicts[1].workloads[1].failure =
      Failure{"tolerance", "max error 0.5, \"expected\" 1\nat index 3", json::object()};
  Verdict rejected;
  rejected.solution = "gamma, the third";
  rejected.definition = "rmsnorm_h4096";
  rejected.status = Status::kRejected;
  rejected.failure = Failure{"host_code", "main() found", json::object()};
  verdicts.push_back(rejected);
  TempDir dir;
  std::string file = (dir.path() / "r.csv").string();
  std::ofstream(file, std::ios::binary) << report::to_csv(verdicts);
  auto r = testing::run_command(
      "python3 -c \"import csv,json,sys; rows=list(csv.DictReader(open(sys.argv[1], "
      "newline=''))); print(json.dumps(rows))\" '" +
      file + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json rows = json::parse(r.out);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0]["solution"], "alpha");
  EXPECT_EQ(rows[0]["workload"], "99179b18-6c1f-4261-aab0-0860eb7770a1");
  EXPECT_EQ(rows[0]["axes"], "batch_size=1");
  EXPECT_DOUBLE_EQ(std::stod(rows[0]["latency_s"].get<std::string>()), 4.0e-6);
  EXPECT_EQ(rows[0]["speedup"], "1.5");
  EXPECT_EQ(rows[3]["workload_status"], "INCORRECT_NUMERICAL");
  // Control characters in a cell are made visible (the sanitiser): one line a cell.
  EXPECT_EQ(rows[3]["failure_message"], "max error 0.5, \"expected\" 1\\nat index 3");
  EXPECT_EQ(rows[4]["solution"], "gamma, the third");
  EXPECT_EQ(rows[4]["status"], "REJECTED");
  EXPECT_EQ(rows[4]["workload"], "");
}

TEST(Csv, ScoreCompileOnlyWritesCsv) {
  TempDir dir;
  std::string file = (dir.path() / "r.csv").string();
  auto r = testing::kharness("--archive '" + dir.path().string() + "/a' score --compile-only '" +
                             testing::fixture("good/rmsnorm_simple.cu").string() + "' --csv '" +
                             file + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("solution,source,definition,status,", 0), 0u) << text.str();
  EXPECT_NE(text.str().find("rmsnorm_simple"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace kharness
