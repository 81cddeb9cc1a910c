// kharness score end to end on the CPU: solutions that fail before the GPU (compile errors,
// rejected plans, malformed files) and --compile-only, with every report file written.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

TEST(ScoreCli, FailuresBeforeTheGpuAreScoredAndEveryReportIsWritten) {
  testing::TempDir dir;
  fs::path subs = dir.path() / "submissions";
  fs::create_directories(subs);
  // Names chosen so the stable (sorted) order is a, b, c.
  fs::copy_file(testing::fixture("bad/syntax_error_line37.cu"), subs / "a_syntax.cu");
  fs::copy_file(testing::fixture("bad/host_code.cu"), subs / "b_host.cu");
  fs::copy_file(testing::fixture("bad/broken_plan_json.cu"), subs / "c_broken.cu");
  fs::path out = dir.path() / "out";
  auto r = testing::kharness(
      "score '" + subs.string() + "' --operator rmsnorm_h4096 --no-cache --json '" +
      (out / "r.json").string() + "' --junit '" + (out / "r.xml").string() + "' --markdown '" +
      (out / "r.md").string() + "' --traces '" + (out / "t.jsonl").string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto json = nlohmann::json::parse(read_file((out / "r.json").string()));
  ASSERT_EQ(json["solutions"].size(), 3u) << json.dump(2);
  EXPECT_EQ(json["solutions"][0]["status"], "COMPILE_ERROR");
  EXPECT_EQ(json["solutions"][1]["status"], "REJECTED");
  EXPECT_EQ(json["solutions"][2]["status"], "REJECTED");
  EXPECT_EQ(json["solutions"][2]["failure"]["kind"], "bad_input");
  std::string junit = read_file((out / "r.xml").string());
  EXPECT_NE(junit.find("<testsuite"), std::string::npos);
  EXPECT_NE(junit.find("COMPILE_ERROR"), std::string::npos) << junit;
  EXPECT_NE(junit.find("host_code"), std::string::npos) << junit;
  std::string md = read_file((out / "r.md").string());
  EXPECT_NE(md.find("a_syntax"), std::string::npos) << md;
  // Every solution failed before any workload ran: one trace line per solution and workload of the
  // operator (16), each a FlashInfer-Bench Trace with a failed status.
  std::string traces = read_file((out / "t.jsonl").string());
  EXPECT_EQ(std::count(traces.begin(), traces.end(), '\n'), 3 * 16) << traces.substr(0, 2000);
  auto first = nlohmann::json::parse(traces.substr(0, traces.find('\n')));
  EXPECT_EQ(first["definition"], "rmsnorm_h4096");
  EXPECT_EQ(first["evaluation"]["status"], "COMPILE_ERROR");
  // Progress goes to stderr as plain lines when not on a terminal.
  EXPECT_NE(r.out.find("[1/3]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[3/3]"), std::string::npos) << r.out;
}

TEST(ScoreCli, CompileOnlyNeedsNoGpu) {
  auto r = testing::kharness("score '" + testing::fixture("good/rmsnorm_simple.cu").string() +
                             "' '" + testing::fixture("good/folder_solution").string() +
                             "' --compile-only --no-cache");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  auto v = testing::kharness("validate '" + testing::fixture("good/rmsnorm_simple.cu").string() +
                             "' --compile-only");
  EXPECT_EQ(v.exit_code, 0) << v.out;
  EXPECT_NE(v.out.find("PASSED"), std::string::npos) << v.out;
  EXPECT_EQ(testing::kharness("score /nonexistent/dir").exit_code, 2);
}

}  // namespace
}  // namespace kharness
