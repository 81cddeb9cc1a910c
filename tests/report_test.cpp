#include "kharness/report.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// A name and a message with every character an XML or Markdown writer must escape, a control
// character and a byte that is not UTF-8.
const std::string kNastyName = "bad<\"name\">&'|x";
const std::string kNastyMessage = "max error 3 > 1e-3 & <tol>\n\"quoted\" \x01 bell \xff ]]> end";

WorkloadVerdict timed_workload(const std::string& uuid, int m, double latency, double speedup,
                               double sol) {
  WorkloadVerdict w;
  w.uuid = uuid;
  w.axes = {{"M", m}};
  TrialResult t;
  t.seed = 7;
  t.seconds = 0.25;
  Comparison c;
  c.tensor = "out";
  c.elements = 1024;
  c.max_abs_error = 1e-4;
  c.max_rel_error = 2e-3;
  t.comparisons.push_back(c);
  w.trials.push_back(t);
  w.timing = timing_from_json(
      {{"seconds", 0.5},
       {"candidate",
        {{"latency", latency},
         {"median", latency},
         {"count", 50},
         {"noise", 0.004},
         {"noise_met", true}}},
       {"baseline", {{"latency", latency * speedup}}},
       {"speedup", speedup},
       {"sol", {{"seconds", latency * sol}, {"fraction", sol}, {"bound", "memory"}}}});
  return w;
}

Verdict passed_verdict(const std::string& name, double s1, double s2) {
  Verdict v;
  v.solution = name;
  v.source = name + ".json";
  v.definition = "rmsnorm";
  v.seconds = 3.0;
  v.environment = {{"kharness_version", "0.1.0"},
                   {"runtime_version", "12.8"},
                   {"nvrtc_version", "12.8"},
                   {"driver", {{"cuda_version", "12.8"}, {"nvidia_version", "570.1"}}},
                   {"gpus", json::array({{{"name", "NVIDIA H200"}}})}};
  v.workloads.push_back(timed_workload("w1", 128, 10e-6, s1, 0.5));
  v.workloads.push_back(timed_workload("w2", 4096, 20e-6, s2, 0.7));
  return v;
}

// Passes workload w1, fails w2 numerically.
Verdict numerical_verdict() {
  Verdict v = passed_verdict(kNastyName, 5.0, 5.0);
  v.status = Status::kIncorrectNumerical;
  WorkloadVerdict& w = v.workloads[1];
  w.status = Status::kIncorrectNumerical;
  w.timing = TimingResult{};
  Failure f{"tolerance",
            kNastyMessage,
            {{"tensor", "out"}, {"first_bad_index", 3}, {"note", kNastyMessage}}};
  w.failure = f;
  w.trials[0].status = Status::kIncorrectNumerical;
  w.trials[0].failure = f;
  w.trials[0].comparisons[0].max_abs_error = 3.0;
  w.trials[0].comparisons[0].max_rel_error = 0.5;
  v.failure = f;
  v.worker_stderr = "stderr <junk> \x02\xfe";
  return v;
}

Verdict compile_error_verdict() {
  Verdict v;
  v.solution = "broken";
  v.definition = "rmsnorm";
  v.status = Status::kCompileError;
  v.failure =
      Failure{"compile_error", "kernel.cu(3): error: expected ';' <here>", {{"log", "a]]>b"}}};
  v.seconds = 1.5;
  return v;
}

// Passed w1, then the worker was killed before w2.
Verdict timeout_verdict() {
  Verdict v = passed_verdict("slowpoke", 0.5, 0.5);
  v.workloads.pop_back();
  v.status = Status::kTimeout;
  v.failure = Failure{"timeout", "no answer within 60 s", {{"limit_s", 60}}};
  return v;
}

std::vector<Verdict> sample() {
  // Deliberately not in leaderboard order.
  return {compile_error_verdict(), passed_verdict("slow_ok", 1.5, 1.1), numerical_verdict(),
          timeout_verdict(), passed_verdict("fast", 2.0, 3.0)};
}

std::size_t count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + 1))
    ++n;
  return n;
}

TEST(ReportJUnit, CountsCasesAndFailures) {
  std::string xml = report::to_junit(sample(), "kharness <check>");
  // 2 + 2 + 2 (one failed) + compile + (1 + the timed-out solution) = 9 testcases, 3 failures.
  EXPECT_EQ(count(xml, "<testcase "), 9u) << xml;
  EXPECT_EQ(count(xml, "<failure "), 3u) << xml;
  EXPECT_NE(xml.find("tests=\"9\" failures=\"3\""), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"tolerance\""), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"compile_error\""), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"timeout\""), std::string::npos);
  EXPECT_NE(xml.find("classname=\"broken\" name=\"compile\""), std::string::npos);
  EXPECT_NE(xml.find("classname=\"slowpoke\" name=\"solution\""), std::string::npos);
  EXPECT_NE(xml.find("name=\"w2 [M=4096]\""), std::string::npos);
  // trials 0.25 s + timing 0.5 s
  EXPECT_NE(xml.find("classname=\"fast\" name=\"w1 [M=128]\" time=\"0.750000\""),
            std::string::npos);
}

TEST(ReportJUnit, EscapesEverything) {
  std::string xml = report::to_junit(sample(), "kharness <check>");
  EXPECT_NE(xml.find("classname=\"bad&lt;&quot;name&quot;&gt;&amp;&apos;|x\""), std::string::npos);
  EXPECT_NE(xml.find("name=\"kharness &lt;check&gt;\""), std::string::npos);
  // The message attribute is one line; the body keeps the newline.
  EXPECT_NE(xml.find("message=\"max error 3 &gt; 1e-3 &amp; &lt;tol&gt; &quot;quoted&quot; \\x01 "
                     "bell \xEF\xBF\xBD ]]&gt; end\""),
            std::string::npos)
      << xml;
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
  EXPECT_EQ(xml.find('\x02'), std::string::npos);
  EXPECT_EQ(xml.find('\xff'), std::string::npos);
  EXPECT_EQ(xml.find('\xfe'), std::string::npos);
  EXPECT_EQ(xml.find("]]>"), std::string::npos);
  EXPECT_EQ(xml.find("<here>"), std::string::npos);
  // Every '<' opens a tag we wrote: balanced open/close tags.
  EXPECT_EQ(count(xml, "<testsuites "), count(xml, "</testsuites>"));
  EXPECT_EQ(count(xml, "<testsuite "), count(xml, "</testsuite>"));
  EXPECT_EQ(count(xml, "<failure "), count(xml, "</failure>"));
  EXPECT_EQ(count(xml, "<system-err>"), count(xml, "</system-err>"));
  EXPECT_EQ(count(xml, "<"), count(xml, "<?xml") +
                                 2 * (count(xml, "<testsuites ") + count(xml, "<testsuite ") +
                                      count(xml, "<failure ") + count(xml, "<system-err>")) +
                                 count(xml, "<testcase ") + count(xml, "</testcase>"));
}

TEST(ReportJUnit, ParsesWithPython) {
  if (testing::run_command("python3 -c 'import xml.dom.minidom' 2>/dev/null").exit_code != 0)
    GTEST_SKIP() << "python3 with xml.dom.minidom not available";
  testing::TempDir dir;
  auto path = dir.path() / "junit.xml";
  std::ofstream(path) << report::to_junit(sample(), "kharness <check>");
  auto r = testing::run_command(
      "python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
      "print(len(d.getElementsByTagName(\"testcase\")), len(d.getElementsByTagName(\"failure\")), "
      "d.getElementsByTagName(\"testcase\")[4].getAttribute(\"classname\") == sys.argv[2])' '" +
      path.string() + "' 'bad<\"name\">&'\\''|x' 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "9 3 True\n");
}

TEST(ReportMarkdown, RanksSolutions) {
  std::string md = report::to_markdown(sample());
  auto row = [&](const std::string& cell) { return md.find("| " + cell + " |"); };
  // passed by mean speedup (fast 2.5x, slow_ok 1.3x), then failed by mean speedup
  // (numerical 5x on its passing workload, slowpoke 0.5x, broken none).
  std::vector<std::size_t> at = {row("fast"), row("slow_ok"), row("bad&lt;\"name\"&gt;&amp;'\\|x"),
                                 row("slowpoke"), row("broken")};
  for (auto p : at) ASSERT_NE(p, std::string::npos) << md;
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << md;
  EXPECT_NE(md.find("| 1 | fast | PASSED | 2/2 | 2.500x | 2.449x | 60.0% |  |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| 5 | broken | COMPILE_ERROR | 0/0 | - | - | - | compile_error |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| INCORRECT_NUMERICAL | 1/2 | 5.000x"), std::string::npos) << md;
  // Best per workload: w1 by the numerical solution's passing 5x, w2 by fast's 3x.
  EXPECT_NE(md.find("| w1 | M=128 | bad&lt;"), std::string::npos) << md;
  EXPECT_NE(md.find("| w2 | M=4096 | fast | 20.00 us | 3.000x | 70.0% | 2 |"), std::string::npos)
      << md;
}

TEST(ReportMarkdown, EmptyList) {
  std::string md = report::to_markdown({});
  EXPECT_NE(md.find("0 solutions"), std::string::npos);
  EXPECT_EQ(md.find("Best per workload"), std::string::npos);
}

TEST(ReportTraces, OneLinePerSolutionAndWorkload) {
  report::TraceOptions options;
  options.timestamp = "2025-01-31T12:00:00Z";
  options.workloads = {
      {{"definition", "rmsnorm"},
       {"workload",
        {{"uuid", "w1"}, {"axes", {{"M", 128}}}, {"inputs", {{"x", {{"type", "random"}}}}}}}},
      {{"definition", "rmsnorm"},
       {"workload", {{"uuid", "w2"}, {"axes", {{"M", 4096}}}, {"inputs", json::object()}}}},
      {{"definition", "other_op"}, {"workload", {{"uuid", "w9"}, {"axes", json::object()}}}}};
  std::string text = report::to_traces_jsonl(sample(), options);
  std::istringstream in(text);
  std::string line;
  std::vector<json> traces;
  while (std::getline(in, line)) traces.push_back(json::parse(line));  // throws if not JSON
  // broken: w1, w2 (never reached); slow_ok 2; numerical 2; slowpoke w1 + w2 (never reached);
  // fast 2.
  ASSERT_EQ(traces.size(), 10u) << text;
  std::map<std::string, json> by_key;
  for (const auto& t : traces)
    by_key[t["solution"].get<std::string>() + "/" + t["workload"]["uuid"].get<std::string>()] = t;
  ASSERT_EQ(by_key.size(), 10u);

  const json& fast = by_key["fast/w2"];
  EXPECT_EQ(fast["definition"], "rmsnorm");
  EXPECT_EQ(fast["workload"]["axes"], json({{"M", 4096}}));
  EXPECT_EQ(fast["evaluation"]["status"], "PASSED");
  EXPECT_EQ(fast["evaluation"]["timestamp"], "2025-01-31T12:00:00Z");
  EXPECT_EQ(fast["evaluation"]["environment"]["hardware"], "NVIDIA H200");
  EXPECT_EQ(fast["evaluation"]["environment"]["libs"]["nvrtc"], "12.8");
  EXPECT_NEAR(fast["evaluation"]["performance"]["latency_ms"].get<double>(), 0.02, 1e-12);
  EXPECT_NEAR(fast["evaluation"]["performance"]["reference_latency_ms"].get<double>(), 0.06, 1e-12);
  EXPECT_DOUBLE_EQ(fast["evaluation"]["performance"]["speedup_factor"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(fast["evaluation"]["correctness"]["max_relative_error"].get<double>(), 2e-3);
  EXPECT_EQ(by_key["fast/w1"]["workload"]["inputs"], json({{"x", {{"type", "random"}}}}));

  const json& bad = by_key[kNastyName + "/w2"];
  EXPECT_EQ(bad["evaluation"]["status"], "INCORRECT_NUMERICAL");
  EXPECT_TRUE(bad["evaluation"]["performance"].is_null());
  EXPECT_DOUBLE_EQ(bad["evaluation"]["correctness"]["max_absolute_error"].get<double>(), 3.0);
  EXPECT_EQ(bad["evaluation"]["log"].get<std::string>().rfind("tolerance: ", 0), 0u);

  const json& broken = by_key["broken/w2"];
  EXPECT_EQ(broken["evaluation"]["status"], "COMPILE_ERROR");
  EXPECT_TRUE(broken["evaluation"]["correctness"].is_null());
  EXPECT_TRUE(broken["evaluation"]["performance"].is_null());
  EXPECT_EQ(broken["evaluation"]["environment"]["hardware"], "unknown");

  EXPECT_EQ(by_key["slowpoke/w1"]["evaluation"]["status"], "PASSED");
  EXPECT_EQ(by_key["slowpoke/w2"]["evaluation"]["status"], "TIMEOUT");
  EXPECT_EQ(by_key.count("broken/w9"), 0u);
}

TEST(ReportTraces, RejectedIsCompileErrorAndNoKnownWorkloadsMeansNoLine) {
  Verdict v = compile_error_verdict();
  v.status = Status::kRejected;
  v.failure = Failure{"forbidden_call", "calls cudaMalloc", json::object()};
  EXPECT_EQ(report::to_traces_jsonl({v}), "");
  report::TraceOptions options;
  options.workloads = {{{"uuid", "u1"}, {"axes", {{"N", 8}}}}};  // a bare workload object
  json t = json::parse(report::to_traces_jsonl({v}, options));
  EXPECT_EQ(t["evaluation"]["status"], "COMPILE_ERROR");
  EXPECT_EQ(t["evaluation"]["log"].get<std::string>().rfind("REJECTED: forbidden_call", 0), 0u);
  EXPECT_EQ(t["workload"]["inputs"], json::object());
  EXPECT_FALSE(t["evaluation"]["timestamp"].get<std::string>().empty());
}

TEST(ReportJson, RoundTrips) {
  auto verdicts = sample();
  json j = report::to_report_json(verdicts, "2025-01-31T12:00:00Z");
  json back = json::parse(j.dump(-1, ' ', false, json::error_handler_t::replace));
  EXPECT_EQ(back["schema"], "kharness.score/1");
  EXPECT_EQ(back["generated_at"], "2025-01-31T12:00:00Z");
  EXPECT_EQ(back["summary"],
            json({{"solutions", 5}, {"passed", 2}, {"suspect", 0}, {"failed", 3}}));
  ASSERT_EQ(back["solutions"].size(), verdicts.size());
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    Verdict v = verdict_from_json(back["solutions"][i]);
    EXPECT_EQ(v.solution, verdicts[i].solution);
    EXPECT_EQ(v.status, verdicts[i].status);
    EXPECT_EQ(v.workloads.size(), verdicts[i].workloads.size());
    if (verdicts[i].worker_stderr.empty()) EXPECT_EQ(to_json(v), back["solutions"][i]);
  }
  std::string now = report::to_report_json({})["generated_at"].get<std::string>();
  EXPECT_EQ(now.size(), 20u);
  EXPECT_EQ(now.back(), 'Z');
}

}  // namespace
}  // namespace kharness
