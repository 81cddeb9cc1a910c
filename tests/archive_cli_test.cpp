// The archive from the command line (verdict cache, runs, show, report --html) and the report
// formats checked against their schemas: JUnit XSD, the score JSON schema, FlashInfer-Bench's
// Trace fields, well-formed HTML with its charts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kharness/archive.hpp"
#include "kharness/report.hpp"
#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Verdict cache through the CLI (compile-only: no GPU needed)

TEST(VerdictCacheCli, HitMissAndNoCache) {
  testing::TempDir tmp;
  fs::path arc = tmp.path() / "arc";
  fs::path solution = tmp.path() / "k.cu";
  fs::copy_file(testing::fixture("good/rmsnorm_simple.cu"), solution);
  std::string validate =
      "--archive " + quote(arc) + " validate " + quote(solution) + " --compile-only";

  auto first = testing::kharness(validate);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_FALSE(has(first.out, "cached")) << first.out;

  auto second = testing::kharness(validate);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_TRUE(has(second.out, "cached: verdict of candidate")) << second.out;
  EXPECT_TRUE(has(second.out, "PASSED")) << second.out;

  auto forced = testing::kharness(validate + " --no-cache");
  EXPECT_FALSE(has(forced.out, "cached")) << forced.out;

  // Another option, another key.
  auto other_arch = testing::kharness(validate + " --arch sm_100a");
  EXPECT_FALSE(has(other_arch.out, "cached")) << other_arch.out;
  // Another mode (check would need a GPU; bench/validate differ by timing options, which
  // compile-only ignores): score --compile-only shares validate --compile-only's verdicts.
  auto score = testing::kharness("--archive " + quote(arc) + " score " + quote(solution) +
                                 " --compile-only");
  EXPECT_EQ(score.exit_code, 0) << score.out;
  EXPECT_TRUE(has(score.out, "(cached: verdict of candidate")) << score.out;

  // A changed source is a miss; KHARNESS_ARCHIVE names the archive as well as --archive.
  write_file_atomic(solution.string(), read_file(solution.string()) + "\n// changed\n");
  auto changed = testing::run_command("KHARNESS_ARCHIVE=" + quote(arc) + " '" + KHARNESS_BINARY +
                                      "' validate " + quote(solution) + " --compile-only 2>&1");
  EXPECT_EQ(changed.exit_code, 0) << changed.out;
  EXPECT_FALSE(has(changed.out, "cached")) << changed.out;

  // --json carries the candidate id and where a cached verdict came from.
  auto js = testing::run_command("'" + std::string(KHARNESS_BINARY) + "' --archive " + quote(arc) +
                                 " validate " + quote(solution) + " --compile-only --json");
  json j = json::parse(js.out);
  EXPECT_TRUE(j.contains("candidate")) << js.out;
  EXPECT_TRUE(j.contains("cached_from")) << js.out;

  // Every invocation is a run; every evaluation a candidate.
  archive::Archive a(arc);
  EXPECT_EQ(a.runs().size(), 7u);
  EXPECT_EQ(a.candidates().size(), 7u);
  for (const auto& c : a.candidates()) EXPECT_EQ(c.status, "PASSED");
  auto stored = a.load(a.candidates().front().id);
  EXPECT_FALSE(stored.record.ptx.empty());
  EXPECT_FALSE(stored.record.compile_log.empty() && stored.record.cubin.empty());
  EXPECT_TRUE(fs::exists(stored.summary.dir / "source.cu"));
}

TEST(VerdictCacheCli, UnwritableArchiveWarnsAndEvaluates) {
  testing::TempDir tmp;
  fs::path blocker = tmp.path() / "file";
  std::ofstream(blocker) << "not a folder";
  auto r = testing::kharness("--archive " + quote(blocker / "arc") + " validate " +
                             quote(testing::fixture("good/rmsnorm_simple.cu")) + " --compile-only");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "not archiving")) << r.out;
}

// ---------------------------------------------------------------------------------------------
// runs, show, report

Verdict timed(const std::string& name, double s1, double s2) {
  Verdict v;
  v.solution = name;
  v.definition = "rmsnorm_h4096";
  v.environment = {{"gpu", "NVIDIA H200"}, {"driver", "570.1"}};
  int i = 0;
  for (double s : {s1, s2}) {
    WorkloadVerdict w;
    w.uuid = i == 0 ? "99179b18-6c1f-4261-aab0-0860eb7770a1" : "made-up-uuid";
    w.axes = {{"batch_size", i == 0 ? 1 : 64}};
    w.timing = timing_from_json({{"candidate", {{"latency", 1e-5 / s}}},
                                 {"baseline", {{"latency", 1e-5}}},
                                 {"speedup", s},
                                 {"sol", {{"fraction", 0.3 * s}}}});
    v.workloads.push_back(w);
    ++i;
  }
  v.score =
      score_from_json({{"mean_speedup", (s1 + s2) / 2}, {"geomean_speedup", std::sqrt(s1 * s2)}});
  return v;
}

TEST(ReportCli, RunsShowAndHtml) {
  testing::TempDir tmp;
  fs::path arc = tmp.path() / "arc";
  std::string parent_id, child_id, run;
  {
    archive::Archive a(arc);
    run = a.begin_run({{"command", "run"}, {"operator", "rmsnorm_h4096"}});
    archive::CandidateRecord p;
    p.name = "seed";
    p.operator_name = "rmsnorm_h4096";
    p.sources = {{"k.cu", "line one\nline two\nline three\n"}};
    p.verdict = timed("seed", 1.0, 1.2);
    p.operator_speedup = archive::OperatorSpeedup{1.1, std::sqrt(1.2), false};
    parent_id = a.add_candidate(run, p);
    archive::CandidateRecord bad = p;
    bad.name = "broken";
    bad.verdict->status = Status::kIncorrectNumerical;
    bad.verdict->failure = Failure{"tolerance", "max abs error 3", {}};
    bad.verdict->score = Score{};
    a.add_candidate(run, bad);
    archive::CandidateRecord c = p;
    c.name = "faster";
    c.parent_id = parent_id;
    c.sources = {{"k.cu", "line one\nline 2\nline three\n"}};
    c.verdict = timed("faster", 2.0, 3.0);  // over its incumbent, the seed
    c.verdict->score.speedups_over = "seed.cu";
    c.operator_speedup = archive::OperatorSpeedup{2.75, 2.69, true};
    child_id = a.add_candidate(run, c);
    a.finish_run(run);
  }
  std::string global = "--archive " + quote(arc) + " ";

  auto runs = testing::kharness(global + "runs");
  EXPECT_EQ(runs.exit_code, 0) << runs.out;
  EXPECT_TRUE(has(runs.out, run)) << runs.out;
  EXPECT_TRUE(has(runs.out, "2.750x")) << runs.out;  // ranked by the operator speedup

  auto show = testing::kharness(global + "show " + child_id.substr(0, 5));
  EXPECT_EQ(show.exit_code, 0) << show.out;
  EXPECT_TRUE(has(show.out, "parent    " + parent_id)) << show.out;
  EXPECT_TRUE(has(show.out, "-line two\n+line 2\n")) << show.out;
  EXPECT_TRUE(has(show.out, "@@ -1,3 +1,3 @@")) << show.out;
  EXPECT_TRUE(has(show.out, "3.000x")) << show.out;
  EXPECT_TRUE(has(show.out, "2.500x mean, 2.449x geomean over seed.cu")) << show.out;
  EXPECT_TRUE(has(show.out, "2.750x over the operator's baseline, estimated")) << show.out;
  EXPECT_EQ(testing::kharness(global + "show ffffffffffff").exit_code, 2);

  fs::path html = tmp.path() / "report.html";
  auto report = testing::kharness(global + "report --all --html " + quote(html));
  EXPECT_EQ(report.exit_code, 0) << report.out;
  EXPECT_TRUE(has(report.out, "best per operator")) << report.out;
  EXPECT_TRUE(has(report.out, child_id)) << report.out;
  EXPECT_TRUE(has(report.out, "INCORRECT_NUMERICAL")) << report.out;
  EXPECT_TRUE(has(report.out, "~2.750x")) << report.out;  // an estimate is marked
  EXPECT_TRUE(has(report.out, " 1.100x")) << report.out;
  std::string page = read_file(html.string());
  // To look at it (headless Chromium screenshot): KHARNESS_TEST_KEEP_HTML=/tmp/report.html.
  if (const char* keep = std::getenv("KHARNESS_TEST_KEEP_HTML")) write_file_atomic(keep, page);
  EXPECT_TRUE(has(page, "aria-label=\"speedup over candidate index, run " + run + "\""));
  EXPECT_TRUE(has(page, "aria-label=\"per-workload speedup of " + child_id + "\""));
  EXPECT_TRUE(has(page, "aria-label=\"roofline\""));
  // The roofline has the H200's roof and a point for the workload the operator knows.
  EXPECT_TRUE(has(page, "class=\"roof\"")) << page.substr(0, 3000);
  EXPECT_FALSE(has(page, "no timed workloads with FLOP and byte counts"));
  EXPECT_FALSE(has(page, "http://") && has(page, "<script")) << "self-contained";
  EXPECT_FALSE(has(page, "<script"));
  EXPECT_FALSE(has(page, "<link"));

  auto none = testing::kharness("--archive " + quote(tmp.path() / "empty") + " runs");
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_TRUE(has(none.out, "no archive here")) << none.out;
}

// ---------------------------------------------------------------------------------------------
// Report formats against their schemas

std::vector<Verdict> sample_verdicts() {
  std::vector<Verdict> out;
  out.push_back(timed("fast <&> \"one\"", 1.5, 2.5));
  Verdict wrong = timed("wrong", 1.0, 1.0);
  wrong.status = Status::kIncorrectNumerical;
  wrong.failure = Failure{"tolerance", "max abs error 3 > 1e-3", {{"max_abs_error", 3}}};
  wrong.workloads[1].status = Status::kIncorrectNumerical;
  wrong.workloads[1].failure = wrong.failure;
  wrong.workloads[1].timing = TimingResult{};
  TrialResult t;
  Comparison c;
  c.tensor = "output";
  c.elements = 100;
  c.mismatches = 7;
  c.max_abs_error = 3;
  c.max_rel_error = 0.5;
  c.matched_ratio = 0.93;
  t.status = Status::kIncorrectNumerical;
  t.comparisons.push_back(c);
  wrong.workloads[1].trials.push_back(t);
  wrong.score = Score{};
  out.push_back(wrong);
  Verdict broken;
  broken.solution = "broken";
  broken.definition = "rmsnorm_h4096";
  broken.status = Status::kCompileError;
  broken.failure = Failure{"compile_error", "identifier \"x\" is undefined", {}};
  out.push_back(broken);
  Verdict compiled;
  compiled.solution = "compile_only";
  compiled.definition = "rmsnorm_h4096";
  out.push_back(compiled);
  return out;
}

TEST(ReportSchemas, JUnitValidatesAgainstTheXsd) {
  if (testing::run_command("xmllint --version >/dev/null 2>&1").exit_code != 0)
    GTEST_SKIP() << "xmllint not installed (Debian: libxml2-utils)";
  testing::TempDir tmp;
  fs::path xml = tmp.path() / "r.xml";
  write_file_atomic(xml.string(), report::to_junit(sample_verdicts(), "kharness"));
  auto r = testing::run_command("xmllint --noout --schema " +
                                quote(testing::fixture("schemas/junit.xsd")) + " " + quote(xml) +
                                " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out << read_file(xml.string());
  // The compile-only solution shows as a passing testcase.
  EXPECT_TRUE(has(read_file(xml.string()), "classname=\"compile_only\" name=\"compile\""));
}

TEST(ReportSchemas, ScoreJsonValidatesAgainstItsSchema) {
  if (testing::run_command("python3 -c 'import jsonschema' 2>/dev/null").exit_code != 0)
    GTEST_SKIP() << "python3 jsonschema not installed (Debian: python3-jsonschema)";
  testing::TempDir tmp;
  fs::path js = tmp.path() / "r.json";
  write_file_atomic(js.string(), report::to_report_json(sample_verdicts()).dump(2));
  auto r = testing::run_command(
      "python3 -c 'import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
      "jsonschema.Draft7Validator.check_schema(s); "
      "jsonschema.validate(json.load(open(sys.argv[2])), "
      "s); print(\"valid\")' " +
      quote(testing::fixture("schemas/score.schema.json")) + " " + quote(js) + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "valid\n");
}

// FlashInfer-Bench's Trace (flashinfer_bench/data/trace.py): field names, and which of
// correctness / performance each status carries.
TEST(ReportSchemas, TracesUseFlashInferBenchFields) {
  report::TraceOptions options;
  options.timestamp = "2026-01-01T00:00:00Z";
  options.workloads.push_back({{"definition", "rmsnorm_h4096"},
                               {"workload",
                                {{"uuid", "99179b18-6c1f-4261-aab0-0860eb7770a1"},
                                 {"axes", {{"batch_size", 1}}},
                                 {"inputs", json::object()}}}});
  std::string lines = report::to_traces_jsonl(sample_verdicts(), options);
  const std::set<std::string> trace_keys = {"definition", "workload", "solution", "evaluation"};
  const std::set<std::string> workload_keys = {"uuid", "axes", "inputs"};
  const std::set<std::string> evaluation_keys = {"status", "environment", "timestamp",
                                                 "log",    "correctness", "performance"};
  const std::set<std::string> statuses = {
      "PASSED",        "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE", "RUNTIME_ERROR",
      "COMPILE_ERROR", "TIMEOUT"};
  auto subset = [](const json& obj, const std::set<std::string>& allowed) {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!allowed.count(it.key())) return it.key();
    return std::string();
  };
  std::istringstream in(lines);
  int count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    json t = json::parse(line);
    EXPECT_EQ(subset(t, trace_keys), "") << line;
    ASSERT_TRUE(t["definition"].is_string() && !t["definition"].get<std::string>().empty());
    EXPECT_EQ(subset(t["workload"], workload_keys), "") << line;
    EXPECT_TRUE(t["workload"]["uuid"].is_string());
    EXPECT_TRUE(t["workload"]["axes"].is_object());
    EXPECT_TRUE(t["workload"]["inputs"].is_object());
    EXPECT_TRUE(t["solution"].is_string());
    const json& e = t["evaluation"];
    EXPECT_EQ(subset(e, evaluation_keys), "") << line;
    std::string status = e["status"];
    EXPECT_TRUE(statuses.count(status)) << status;
    EXPECT_TRUE(e["environment"]["hardware"].is_string());
    EXPECT_FALSE(e["environment"]["hardware"].get<std::string>().empty()) << line;
    EXPECT_TRUE(e["environment"].value("libs", json::object()).is_object());
    EXPECT_FALSE(e["timestamp"].get<std::string>().empty());
    bool has_c = e.contains("correctness") && !e["correctness"].is_null();
    bool has_p = e.contains("performance") && !e["performance"].is_null();
    if (status == "PASSED") {
      EXPECT_TRUE(has_c && has_p) << line;
    } else if (status == "INCORRECT_NUMERICAL") {
      EXPECT_TRUE(has_c && !has_p) << line;
    } else {
      EXPECT_TRUE(!has_c && !has_p) << line;
    }
    if (has_c) {
      EXPECT_EQ(subset(e["correctness"], {"max_relative_error", "max_absolute_error", "extra"}), "")
          << line;
    }
    if (has_p) {
      EXPECT_EQ(subset(e["performance"],
                       {"latency_ms", "reference_latency_ms", "speedup_factor", "profile"}),
                "")
          << line;
      for (const char* k : {"latency_ms", "reference_latency_ms", "speedup_factor"})
        EXPECT_GE(e["performance"].value(k, 0.0), 0.0) << k;
    }
  }
  EXPECT_GE(count, 5);  // 2 + 2 + the compile error against the known workload
}

TEST(HtmlReport, WellFormedWithTheThreeCharts) {
  report::HtmlReport data;
  data.title = "kharness <report> & more";
  data.generated_at = "2026-01-01T00:00:00Z";
  report::HtmlRun run{
      "20260101-000000-abcd", "2026-01-01T00:00:00Z", "finished", "run", "gemm", {}};
  for (int i = 1; i <= 12; ++i)
    run.candidates.push_back({"c" + std::to_string(i), i, "cand<" + std::to_string(i) + ">",
                              i % 4 == 0 ? "COMPILE_ERROR" : "PASSED", 0.5 + 0.2 * i, i == 3});
  data.runs.push_back(run);
  report::HtmlBest best{"gemm", "c11", "cand11", "NVIDIA H200", 2.7, {}};
  best.workloads.push_back({"w1 M=128", 2.0, 0.4, 1e-5, 2e9, 1e7});
  best.workloads.push_back({"w2 M=4096", 3.4, 0.7, 1e-4, 7e10, 3e7});
  data.best.push_back(best);
  data.roofs.push_back({"H200", 989e12, "bfloat16", 4.8e12});
  std::string page = report::to_html(data);
  testing::TempDir tmp;
  fs::path file = tmp.path() / "r.html";
  write_file_atomic(file.string(), page);
  if (testing::run_command("python3 -c 'import xml.dom.minidom' 2>/dev/null").exit_code == 0) {
    auto r = testing::run_command(
        "python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
        "print(len(d.getElementsByTagName(\"svg\")), len(d.getElementsByTagName(\"circle\")), "
        "len(d.getElementsByTagName(\"rect\")))' " +
        quote(file) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    // 3 charts; 9 passed candidates + 2 roofline points as circles; 2 bars.
    EXPECT_EQ(r.out, "3 11 2\n") << page;
  }
  if (testing::run_command("xmllint --version >/dev/null 2>&1").exit_code == 0) {
    EXPECT_EQ(testing::run_command("xmllint --noout " + quote(file) + " 2>&1").exit_code, 0);
  }
  EXPECT_TRUE(has(page, "kharness &lt;report&gt; &amp; more"));
  EXPECT_TRUE(has(page, "class=\"best\""));  // the running-best line
  EXPECT_TRUE(has(page, "class=\"roof\""));
  EXPECT_TRUE(has(page, "989 TFLOP/s"));
  EXPECT_FALSE(has(page, "<script"));
}

}  // namespace
}  // namespace kharness
