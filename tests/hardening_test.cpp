// Untrusted input never crashes kharness: the JSON entry point (nesting, numbers out of
// range, invalid UTF-8 on the way out), tampered archives and run folders, a tune space too large
// to enumerate, and the messages of operators list/check. Each is an input error of one line
// (exit 2), a REJECTED verdict, or — for the verdict cache — a warning and an evaluation.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "archive/sqlite.hpp"
#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "kharness/tune.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kharness;
using testing::TempDir;

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

long lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

std::string deep_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// The rmsnorm plan of tests/fixtures/good/rmsnorm_simple.cu with `plan` in place of its own.
std::string with_plan(const std::string& plan) {
  std::string text = read_file(testing::fixture("good/rmsnorm_simple.cu").string());
  auto start = text.find("/* kharness");
  auto end = text.find("*/", start);
  return text.substr(0, start) + "/* kharness " + plan + " */" + text.substr(end + 2);
}

const char* const kPlan =
    R"({"launches": [{"kernel": "rmsnorm_kernel", "grid": ["batch_size", 1, 1],
        "block": [256, 1, 1], "args": ["hidden_states", "weight", "output", "batch_size", {"float32": 1e-5}]}]})";

// ---------------------------------------------------------------------------------------------
// The JSON entry point

TEST(JsonEntryPoint, DeepNestingIsAnInputErrorOfOneLine) {
  for (const std::string& text : {deep_arrays(100000), deep_arrays(257),
                                  std::string(100000, '{') + "}" /* unbalanced too */}) {
    try {
      json_util::parse_text<json>(text, "deep.json");
      ADD_FAILURE() << "accepted " << text.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_TRUE(has(e.message(), "deep.json")) << e.message();
      EXPECT_FALSE(has(e.message(), "\n"));
      EXPECT_LT(e.message().size(), 600u) << e.message();
    }
  }
  EXPECT_TRUE(has(
      [] {
        try {
          json_util::parse_text<json>(deep_arrays(300), "d.json");
        } catch (const Error& e) {
          return e.message();
        }
        return std::string();
      }(),
      "nested deeper than 256 levels"));
  // 256 levels are fine; the lenient parser discards what is deeper.
  EXPECT_NO_THROW(json_util::parse_text<json>(deep_arrays(256), "ok.json"));
  EXPECT_TRUE(json_util::parse_or_discarded(deep_arrays(100000)).is_discarded());
  testing::expect_input_error(
      [] { json_util::parse_text<json>(R"({"a": {"b": )" + deep_arrays(300) + "}}", "p.json"); },
      "p.json: a.b", "nested deeper");
}

TEST(JsonEntryPoint, NumbersBeyondADoubleAreInputErrorsWithTheirLine) {
  testing::expect_input_error([] { json_util::parse_text<json>("{\n  \"x\": 1e400\n}", "n.json"); },
                              "n.json:2:", "1e400");
  testing::expect_input_error([] { json_util::parse_text<json>("[-1e999]", "n.json"); }, "n.json",
                              "-1e999");
  testing::expect_input_error(
      [] { json_util::parse_text<nlohmann::ordered_json>("{\"x\": 1e400}", "n.json", 40); },
      "n.json:40:", "beyond the range of a double");
  EXPECT_TRUE(json_util::parse_or_discarded("[1e400]").is_discarded());
}

TEST(JsonEntryPoint, DumpReplacesBytesThatAreNotUtf8) {
  json j = {{"message", std::string("bad \xff byte \xc3")}};
  std::string text = json_util::dump(j);
  EXPECT_TRUE(has(text, "bad \xef\xbf\xbd byte")) << text;
  EXPECT_NO_THROW(json::parse(text));
}

TEST(JsonEntryPoint, WrongTypesThatNoCheckCaughtAreInputErrors) {
  json j = {{"n", "seven"}};
  testing::expect_input_error(
      [&] { json_util::reading("x.json", [&] { return j.at("n").get<int>(); }); }, "x.json",
      "wrong type");
}

TEST(JsonEntryPoint, MessagesBoundWhatTheyQuote) {
  std::string name(100000, 'k');
  std::string bounded_text = bounded(name, 200);
  EXPECT_LT(bounded_text.size(), 230u);
  EXPECT_TRUE(has(bounded_text, "(100000 bytes)"));
  // Never split a UTF-8 character.
  std::string accents;
  for (int i = 0; i < 200; ++i) accents += "\xc3\xa9";
  std::string cut = bounded(accents, 201);
  EXPECT_EQ(cut.substr(0, 200), accents.substr(0, 200));
  EXPECT_EQ(printable_line(cut), cut);
}

// ---------------------------------------------------------------------------------------------
// Plans, definitions, providers files from the command line

TEST(HardenedCli, DeepPlanDefinitionAndProvidersFileAreOneLineExit2) {
  TempDir tmp;
  fs::path plan = tmp.path() / "deep.cu";
  write_file_atomic(plan.string(), with_plan(R"({"launches": )" + deep_arrays(100000) + "}"));
  auto r = kharness("validate " + quote(plan) + " --operator rmsnorm_h4096 --compile-only");
  EXPECT_EQ(r.exit_code, 2) << r.out.substr(0, 2000);
  EXPECT_EQ(lines(r.out), 1) << r.out.substr(0, 2000);
  EXPECT_TRUE(has(r.out, "nested deeper than 256")) << r.out.substr(0, 2000);

  fs::path ops = tmp.path() / "ops";
  fs::create_directories(ops / "deep");
  write_file_atomic((ops / "deep" / "definition.json").string(),
                    R"({"name": "deep", "axes": )" + deep_arrays(100000) + "}");
  r = kharness("--operators-dir " + quote(ops) + " operators show deep");
  EXPECT_EQ(r.exit_code, 2) << r.out.substr(0, 2000);
  EXPECT_EQ(lines(r.out), 1) << r.out.substr(0, 2000);
  EXPECT_TRUE(has(r.out, "definition.json")) << r.out.substr(0, 2000);

  fs::path providers = tmp.path() / "providers.json";
  write_file_atomic(providers.string(), R"({"providers": )" + deep_arrays(100000) + "}");
  r = kharness("--archive " + quote(tmp.path() / "arc") +
               " run --operator rmsnorm_h4096 --budget 1 --provider replay --responses " +
               quote(testing::fixture("replay/rmsnorm")) + " --compile-only --run-dir " +
               quote(tmp.path() / "run") + " --providers-config " + quote(providers));
  EXPECT_EQ(r.exit_code, 2) << r.out.substr(0, 2000);
  EXPECT_TRUE(has(r.out, "providers.json")) << r.out.substr(0, 2000);
  EXPECT_TRUE(has(r.out, "nested deeper")) << r.out.substr(0, 2000);
}

TEST(HardenedCli, NumberOutOfRangeInAPlanIsOneLineExit2) {
  TempDir tmp;
  fs::path plan = tmp.path() / "big.cu";
  std::string p = kPlan;
  p.replace(p.find("[256, 1, 1]"), 11, "[1e400, 1, 1]");
  write_file_atomic(plan.string(), with_plan(p));
  auto r = kharness("validate " + quote(plan) + " --operator rmsnorm_h4096 --compile-only");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "big.cu:")) << r.out;
  EXPECT_TRUE(has(r.out, "1e400")) << r.out;
}

TEST(HardenedCli, LongUserStringsAreCutInErrorLines) {
  TempDir tmp;
  fs::path plan = tmp.path() / "long.cu";
  std::string p = kPlan;
  p.insert(1, "\"" + std::string(100000, 'x') + "\": 1, ");
  write_file_atomic(plan.string(), with_plan(p));
  auto r = kharness("validate " + quote(plan) + " --operator rmsnorm_h4096 --compile-only");
  EXPECT_EQ(r.exit_code, 2) << r.out.substr(0, 3000);
  EXPECT_EQ(lines(r.out), 1);
  EXPECT_LT(r.out.size(), 2200u) << r.out.substr(0, 3000);
}

// Invalid UTF-8 in one plan of a folder under score: that submission is REJECTED (its message
// sanitised in every report), the others are judged, the reports are valid JSON and XML.
TEST(HardenedCli, InvalidUtf8InAPlanRejectsThatSubmissionOnly) {
  TempDir tmp;
  fs::path subs = tmp.path() / "subs";
  fs::create_directories(subs);
  fs::copy_file(testing::fixture("good/rmsnorm_simple.cu"), subs / "a_good.cu");
  std::string p = kPlan;
  p.replace(p.find("rmsnorm_kernel"), 14, "rmsnorm_\xff\xfe_kernel");
  write_file_atomic((subs / "b_bad_utf8.cu").string(), with_plan(p));
  // A plan whose name holds a byte that is not UTF-8 escaped as JSON cannot be; one in the
  // source (the compile log quotes it) must reach the reports replaced.
  std::string source = read_file(testing::fixture("good/rmsnorm_simple.cu").string());
  write_file_atomic((subs / "c_log.cu").string(), source + "\n#error bad \xff byte\n");
  fs::path out = tmp.path() / "out";
  auto r = kharness("--archive " + quote(tmp.path() / "arc") + " score " + quote(subs) +
                    " --operator rmsnorm_h4096 --compile-only --no-cache --json " +
                    quote(out / "r.json") + " --junit " + quote(out / "r.xml"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  json report = json::parse(read_file((out / "r.json").string()));
  ASSERT_EQ(report["solutions"].size(), 3u) << report.dump(2);
  EXPECT_EQ(report["solutions"][0]["status"], "PASSED");
  EXPECT_EQ(report["solutions"][1]["status"], "REJECTED");
  EXPECT_EQ(report["solutions"][2]["status"], "COMPILE_ERROR");
  std::string junit = read_file((out / "r.xml").string());
  EXPECT_FALSE(has(junit, "\xff"));
}

// ---------------------------------------------------------------------------------------------
// Tampered archives

// The verdict.json of every archived candidate.
std::vector<fs::path> verdict_files(const fs::path& archive) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(archive / "candidates"))
    if (fs::exists(e.path() / "verdict.json")) out.push_back(e.path() / "verdict.json");
  return out;
}

TEST(TamperedArchive, BadCachedVerdictWarnsAndIsEvaluatedAgain) {
  TempDir tmp;
  fs::path arc = tmp.path() / "arc";
  fs::path solution = tmp.path() / "k.cu";
  fs::copy_file(testing::fixture("good/rmsnorm_simple.cu"), solution);
  std::string validate =
      "--archive " + quote(arc) + " validate " + quote(solution) + " --compile-only";
  ASSERT_EQ(kharness(validate).exit_code, 0);
  ASSERT_TRUE(has(kharness(validate).out, "cached: verdict of candidate"));

  for (const std::string& bad :
       {std::string(R"({"status": 7, "workloads": "all"})"), std::string("{\"status\": "),
        std::string(R"({"status": "PASSED", "score": {"mean_speedup": "fast"}})"),
        deep_arrays(100000), std::string("fifo")}) {
    for (const auto& f : verdict_files(arc)) {
      fs::remove(f);
      if (bad == "fifo") {
        ASSERT_EQ(::mkfifo(f.c_str(), 0644), 0);
      } else {
        write_file_atomic(f.string(), bad);
      }
    }
    auto r = kharness(validate);
    EXPECT_EQ(r.exit_code, 0) << bad.substr(0, 60) << ": " << r.out;
    EXPECT_TRUE(has(r.out, "verdict cache:")) << bad.substr(0, 60) << ": " << r.out;
    EXPECT_TRUE(has(r.out, "verdict.json")) << r.out;
    EXPECT_FALSE(has(r.out, "cached: verdict of candidate")) << r.out;
    EXPECT_TRUE(has(r.out, "PASSED")) << r.out;
    // The verdict evaluated again is the one the next lookup finds.
    auto again = kharness(validate);
    EXPECT_EQ(again.exit_code, 0) << again.out;
    EXPECT_TRUE(has(again.out, "cached: verdict of candidate")) << bad.substr(0, 60) << again.out;
  }
}

TEST(TamperedArchive, ShowOfADamagedCandidateNamesTheFile) {
  TempDir tmp;
  fs::path arc = tmp.path() / "arc";
  auto r = kharness("--archive " + quote(arc) + " validate " +
                    quote(testing::fixture("good/rmsnorm_simple.cu")) + " --compile-only");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  fs::path dir = fs::directory_iterator(arc / "candidates")->path();
  std::string id = dir.filename().string();
  const json original = json::parse(read_file((dir / "record.json").string()));
  json record = original;
  record["entry"] = "first";
  write_file_atomic((dir / "record.json").string(), record.dump());
  r = kharness("--archive " + quote(arc) + " show " + id);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "record.json: entry")) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;

  record["entry"] = 0;
  record["sources"] = json::array({"../../../../etc/passwd"});
  write_file_atomic((dir / "record.json").string(), record.dump());
  r = kharness("--archive " + quote(arc) + " show " + id);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "record.json: sources[0]")) << r.out;

  write_file_atomic((dir / "record.json").string(), original.dump());
  fs::remove(dir / "compile.log");
  ASSERT_EQ(::mkfifo((dir / "compile.log").c_str(), 0644), 0);
  r = kharness("--archive " + quote(arc) + " show " + id);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "compile.log: is a FIFO")) << r.out;
}

TEST(TamperedArchive, CorruptOrForeignIndexNamesTheFile) {
  TempDir tmp;
  fs::path arc = tmp.path() / "arc";
  fs::create_directories(arc);
  write_file_atomic((arc / "index.sqlite").string(), std::string(8192, 'x'));
  auto r = kharness("--archive " + quote(arc) + " runs");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "index.sqlite")) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;

  fs::remove(arc / "index.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((arc / "index.sqlite").c_str(), &db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE candidates (x INTEGER)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  r = kharness("--archive " + quote(arc) + " runs");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "index.sqlite: not a kharness archive index")) << r.out;
  // score goes on without the archive (a warning), one verdict per submission.
  r = kharness("--archive " + quote(arc) + " score " +
               quote(testing::fixture("good/rmsnorm_simple.cu")) + " --compile-only");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "not archiving")) << r.out;

  fs::remove(arc / "index.sqlite");
  ASSERT_EQ(::mkfifo((arc / "index.sqlite").c_str(), 0644), 0);
  r = kharness("--archive " + quote(arc) + " runs");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "index.sqlite: not a regular file")) << r.out;
}

// ---------------------------------------------------------------------------------------------
// Tampered run folders (--resume)

TEST(TamperedRun, ResumeNamesTheDamagedFile) {
  TempDir tmp;
  fs::path run = tmp.path() / "run";
  auto start = kharness("--archive " + quote(tmp.path() / "arc") +
                        " run --operator rmsnorm_h4096 --budget 1 --provider replay --responses " +
                        quote(testing::fixture("replay/rmsnorm")) +
                        " --compile-only --arch sm_90a --seed 1 --run-dir " + quote(run));
  ASSERT_EQ(start.exit_code, 0) << start.out;
  fs::path c1 = run / "candidates" / "c0001";
  std::string record = read_file((c1 / "record.json").string());
  struct Case {
    fs::path file;
    std::string content;
    std::string expected;
  };
  const Case cases[] = {
      {c1 / "verdict.json", R"({"status": "PASSED", "workloads": "all"})", "c0001/verdict.json"},
      {c1 / "verdict.json", "[1, 2", "c0001/verdict.json:1:"},
      {c1 / "record.json", deep_arrays(100000), "nested deeper"},
      {c1 / "record.json", R"({"id": "c00x1", "status": "PASSED"})", "record.json: id"},
      {run / "run.json", R"({"budget": 1e400})", "run.json:1:"},
  };
  for (const auto& c : cases) {
    std::string saved = fs::exists(c.file) ? read_file(c.file.string()) : "";
    write_file_atomic(c.file.string(), c.content);
    auto r = kharness("--archive " + quote(tmp.path() / "arc") + " run --resume " + quote(run) +
                      " --budget 2 --responses " + quote(testing::fixture("replay/rmsnorm")));
    EXPECT_EQ(r.exit_code, 2) << c.content.substr(0, 60) << ": " << r.out.substr(0, 2000);
    EXPECT_TRUE(has(r.out, c.expected)) << c.expected << ": " << r.out.substr(0, 2000);
    EXPECT_EQ(lines(r.out), 1) << r.out.substr(0, 2000);
    if (saved.empty()) {
      fs::remove(c.file);
    } else {
      write_file_atomic(c.file.string(), saved);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bounded work: the tune space

TEST(TuneSpaceBound, ASpaceTooCostlyToEnumerateIsRefusedAtOnce) {
  // 1,000,000 configurations (at the product cap), a long constraint over an axis, 32 workloads.
  tune::TuneSpace space;
  space.source = "tune.json";
  for (const char* name : {"A", "B", "C"}) {
    tune::Knob k;
    k.name = name;
    for (int v = 1; v <= 100; ++v) k.values.push_back(v);
    space.knobs.push_back(k);
  }
  std::string text = "A * B * C";
  for (int i = 0; i < 60; ++i) text += " + (A % 7) * hidden_size";
  text += " > 0";
  space.constraints.push_back({Expr::parse(text), "tune.json: constraints[0]"});
  std::vector<Bindings> axes(32, Bindings{{"hidden_size", 4096}});
  auto started = std::chrono::steady_clock::now();
  testing::expect_input_error([&] { tune::valid_configs(space, axes); }, "tune.json: knobs",
                              "too much work");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 1.0);
  // A space near the bound is enumerated within a few seconds.
  space.constraints = {{Expr::parse("A * B * C % 3 == 0 && hidden_size % A == 0"), "c"}};
  started = std::chrono::steady_clock::now();
  auto valid =
      tune::valid_configs(space, std::vector<Bindings>(8, Bindings{{"hidden_size", 4096}}));
  EXPECT_GT(valid.size(), 0u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 5.0);
}

TEST(TuneSpaceBound, TuneSpaceOfANearCapFileAnswersWithinSeconds) {
  TempDir tmp;
  // Two files of about 1.6 KB: a million configurations each, a long constraint over an axis
  // (checked for each of the 16 workloads) or over the knobs only (checked once).
  std::string over_axis = "hidden_size % (THREADS * VEC) == 0";
  for (int i = 0; i < 40; ++i) over_axis += " && hidden_size / THREADS <= 64 + VEC";
  std::string knobs_only = "THREADS * VEC > 0";
  for (int i = 0; i < 68; ++i) knobs_only += " && THREADS * VEC > 0";
  for (const std::string& constraint : {over_axis, knobs_only}) {
    json tune = {{"knobs",
                  {{"THREADS", {{"range", {1, 1000}}, {"default", 256}}},
                   {"VEC", {{"range", {1, 1000}}, {"default", 8}}}}},
                 {"constraints", {constraint}},
                 {"launches", {{{"block", {"THREADS", 1, 1}}}}}};
    fs::path file = tmp.path() / "tune.json";
    write_file_atomic(file.string(), tune.dump());
    EXPECT_LT(tune.dump().size(), 2000u);
    auto started = std::chrono::steady_clock::now();
    auto r = kharness("tune-space rmsnorm_h4096 --tune-file " + quote(file) + " --sample 2");
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(has(r.out, "too much work")) << r.out;
    EXPECT_LT(seconds, 5.0) << r.out;
  }
}

// ---------------------------------------------------------------------------------------------
// Messages

TEST(OperatorMessages, ListAndCheckSayWhyTheyExit2) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "broken");
  write_file_atomic((tmp.path() / "broken" / "definition.json").string(),
                    R"({"name": "broken", "op_type": "rmsnorm", "axes": {},
                        "inputs": {"x": {"shape": ["zzz"], "dtype": "float32"}},
                        "outputs": {"y": {"shape": ["zzz"], "dtype": "float32"}}})");
  std::string dir = "--operators-dir " + quote(tmp.path());
  auto list = kharness(dir + " operators list");
  EXPECT_EQ(list.exit_code, 2) << list.out;
  EXPECT_TRUE(has(list.out, "kharness: error: ")) << list.out;
  EXPECT_TRUE(has(list.out, "unknown axis 'zzz'")) << list.out;
  auto check = kharness(dir + " operators check broken");
  EXPECT_EQ(check.exit_code, 2) << check.out;
  EXPECT_TRUE(has(check.out, "kharness: error: ")) << check.out;
  // "axes", not "axiss".
  EXPECT_TRUE(has(check.out, "(axes: none)")) << check.out;
  EXPECT_FALSE(has(check.out, "axiss")) << check.out;
}

}  // namespace
}  // namespace kharness
