// What a submission, a score folder or an archive points at is read beneath its folder with no
// symlink on the way (kharness/file.hpp), in the family inliner, the solution loaders, score's
// walk and archive reads; the rule scanner's lexer and __has_include; archives that hold more
// than tables and indexes. Each case: the right outcome (REJECTED, a one-line exit 2, the link
// refused), and no byte of the file outside in any output.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "archive/sqlite.hpp"
#include "compile/compile_internal.hpp"
#include "controller/recorder.hpp"
#include "kharness/file.hpp"
#include "kharness/report.hpp"
#include "kharness/rules.hpp"
#include "kharness/run_compare.hpp"
#include "kharness/sanitize.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kharness;
using testing::TempDir;

constexpr const char* kSecret = "HOST-SECRET-7f3a";

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

long lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

// Both ways of opening beneath a folder: openat2 where the kernel has it, and the O_NOFOLLOW walk.
class BeneathBothWays : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { file_testing::use_component_walk(GetParam()); }
  void TearDown() override { file_testing::use_component_walk(false); }
};

TEST_P(BeneathBothWays, RefusesLinksDotDotAndAbsolutePaths) {
  TempDir tmp;
  const fs::path root = tmp.path() / "root";
  write(root / "a" / "f.cu", "inside");
  write(tmp.path() / "outside.txt", kSecret);
  fs::create_symlink(tmp.path() / "outside.txt", root / "link.cu");
  fs::create_symlink("f.cu", root / "a" / "inner_link.cu");  // stays inside: refused all the same
  fs::create_symlink(tmp.path(), root / "up");
  fs::create_symlink("/proc/self/environ", root / "environ");
  EXPECT_EQ(read_file_beneath(root, "a/f.cu"), "inside");
  EXPECT_EQ(read_file_beneath(root, "./a//f.cu"), "inside");
  testing::expect_input_error([&] { read_file_beneath(root, "link.cu"); }, "link.cu", "symlink");
  testing::expect_input_error([&] { read_file_beneath(root, "a/inner_link.cu"); }, "inner_link",
                              "symlink");
  testing::expect_input_error([&] { read_file_beneath(root, "up/outside.txt"); }, "outside.txt",
                              "symlink");
  testing::expect_input_error([&] { read_file_beneath(root, "environ"); }, "environ", "symlink");
  testing::expect_input_error([&] { read_file_beneath(root, "../outside.txt"); }, "outside.txt",
                              "'..'");
  testing::expect_input_error([&] { read_file_beneath(root, "a/../../outside.txt"); },
                              "outside.txt", "'..'");
  testing::expect_input_error([&] { read_file_beneath(root, tmp.path() / "outside.txt"); },
                              "outside.txt", "absolute");
  testing::expect_input_error([&] { read_file_beneath(root, "a"); }, "a", "folder");
  testing::expect_input_error([&] { read_file_beneath(root, "a/f.cu", 3); }, "f.cu", "at most");
  testing::expect_input_error([&] { read_file_beneath(root, "missing.cu"); }, "missing.cu",
                              "no such file");
  std::string why;
  EXPECT_FALSE(try_read_file_nofollow(root / "link.cu", kMaxInputFileBytes, &why));
  EXPECT_TRUE(has(why, "symlink")) << why;
  EXPECT_EQ(try_read_file_nofollow(root / "a" / "f.cu").value_or(""), "inside");
}

INSTANTIATE_TEST_SUITE_P(SafeOpen, BeneathBothWays, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "walk" : "openat2"; });

TEST(SafeOpen, SaysWhetherTheKernelHasOpenat2) {
  // Informational: which of the two ways this machine's kharness takes.
  std::cout << "openat2: " << (file_testing::kernel_has_openat2() ? "yes" : "no") << "\n";
}

// ---- The family inliner --------------------------------------------------------------------

const char* const kFamilySolution =
    "/* kharness {\"launches\": [{\"kernel\": \"k\", \"grid\": [1], \"block\": [32], \"args\": "
    "[]}]} */\n#include \"../_shared/a.cuh\"\n__global__ void k() {}\n";

TEST(FamilyInliner, ASharedFileThatIsALinkIsNotRead) {
  TempDir tmp;
  const fs::path families = tmp.path() / "sub" / "_families";
  write(families / "x" / "sol.cu", kFamilySolution);
  write(tmp.path() / "host.txt", kSecret);
  fs::create_directories(families / "_shared");
  for (const fs::path& target : {tmp.path() / "host.txt", fs::path("/proc/self/environ")}) {
    fs::remove(families / "_shared" / "a.cuh");
    fs::create_symlink(target, families / "_shared" / "a.cuh");
    testing::expect_input_error([&] { load_solution(families / "x" / "sol.cu"); }, "sol.cu:2",
                                "symlink");
    auto r = kharness("compile " + quote(families / "x" / "sol.cu"));
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_FALSE(has(r.out, kSecret)) << r.out;
    EXPECT_FALSE(has(r.out, "PATH=")) << r.out;
  }
  // _shared itself a link to a host folder: refused too.
  fs::remove_all(families / "_shared");
  write(tmp.path() / "hostdir" / "a.cuh", kSecret);
  fs::create_symlink(tmp.path() / "hostdir", families / "_shared");
  testing::expect_input_error([&] { load_solution(families / "x" / "sol.cu"); }, "sol.cu:2",
                              "symlink");
  // A real shared file is inlined.
  fs::remove(families / "_shared");
  write(families / "_shared" / "a.cuh", "// shared text\n");
  Solution s = load_solution(families / "x" / "sol.cu");
  EXPECT_TRUE(has(s.entry_source().content, "// shared text")) << s.entry_source().content;
}

// ---- Folder solutions ----------------------------------------------------------------------

TEST(FolderSolution, NoLinkIsRead) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "sol";
  write(dir / "k.cu",
        "/* kharness {\"launches\": [{\"kernel\": \"k\", \"grid\": [1], \"block\": [32], "
        "\"args\": []}]} */\n__global__ void k() {}\n");
  write(tmp.path() / "plan.json", R"({"launches": []})");
  fs::create_symlink(tmp.path() / "plan.json", dir / "solution.json");
  testing::expect_input_error([&] { load_solution(dir); }, "solution.json", "symlink");
}

// ---- score's walk --------------------------------------------------------------------------

TEST(ScoreWalk, LinksAreRefusedAndLoopsEnd) {
  TempDir tmp;
  const fs::path subs = tmp.path() / "subs";
  fs::create_directories(subs / "team_b");
  fs::copy_file(testing::fixture("bad/host_code.cu"), subs / "a_host.cu");
  fs::copy_file(testing::fixture("bad/host_code.cu"), subs / "team_b" / "own.cu");
  write(tmp.path() / "host" / "secret.cu", kSecret);
  fs::create_symlink(tmp.path() / "host" / "secret.cu", subs / "b_link.cu");
  fs::create_symlink(subs / "team_b" / "own.cu", subs / "c_other_team.cu");
  fs::create_symlink(tmp.path() / "host", subs / "d_hostdir");
  fs::create_symlink(".", subs / "loop1");
  fs::create_symlink("..", subs / "team_b" / "loop2");
  fs::create_symlink("/nonexistent", subs / "dangling.txt");
  const fs::path out = tmp.path() / "r.json";
  auto r = kharness("score " + quote(subs) + " --operator rmsnorm_h4096 --no-cache --json " +
                    quote(out));
  ASSERT_EQ(r.exit_code, 1) << r.out;
  EXPECT_FALSE(has(r.out, kSecret)) << r.out;
  json report = json::parse(read_file(out.string()));
  std::map<std::string, json> by_name;
  for (const auto& v : report["solutions"]) by_name[v["solution"].get<std::string>()] = v;
  ASSERT_EQ(report["solutions"].size(), 7u) << report.dump(1);
  for (const char* link : {"b_link", "c_other_team", "d_hostdir", "loop1", "loop2"}) {
    ASSERT_TRUE(by_name.count(link)) << link << report.dump(1);
    EXPECT_EQ(by_name[link]["status"], "REJECTED") << link;
    EXPECT_TRUE(has(by_name[link]["failure"]["message"].get<std::string>(), "symlink")) << link;
  }
  EXPECT_EQ(by_name["a_host"]["status"], "REJECTED");
  EXPECT_EQ(by_name["own"]["status"], "REJECTED");
}

// ---- The rule scanner ----------------------------------------------------------------------

Solution one_file(const std::string& code) {
  Solution s;
  s.sources = {{"k.cu", code}};
  s.plan = parse_plan(
      json::parse(R"({"launches":[{"kernel":"k","grid":[1],"block":[32],"args":[]}]})"), "test");
  return s;
}

bool violates(const std::string& code, const std::string& rule) {
  SourceRules rules;
  rules.system_include_dirs = {};
  for (const auto& v : check_source_rules(one_file(code), rules)) {
    if (v.rule == rule) return true;
  }
  return false;
}

TEST(RuleLexer, AQuoteAfterADigitIsASeparatorOnlyBeforeADigitOrLetter) {
  // NVRTC reads `0' /*'` as the number 0 and the character literal ' /*': the #include is code.
  EXPECT_TRUE(violates("int x = 0' /*';\n#include \"/etc/passwd\"\n// */\n", "include_path"));
  EXPECT_TRUE(violates("int x = 0' /*';\nint main() { return 0; }\n// */\n", "host_code"));
  EXPECT_TRUE(violates("int x = 1'0' /*';\n#include_next <x.h>\n// */\n", "include_path"));
  EXPECT_TRUE(violates("auto x = 0x1'f' /*';\n#include \"/etc/passwd\"\n// */\n", "include_path"));
  // Real separators are still numbers.
  EXPECT_FALSE(
      violates("__device__ int x = 1'000'000; __device__ int y = 0x1'ff;\n"
               "__global__ void k() {}\n",
               "include_path"));
  EXPECT_FALSE(violates("__device__ float f = 1.5e+3f; __global__ void k() {}\n", "host_code"));
  // An identifier with digits (x1) followed by a literal is not a number.
  EXPECT_TRUE(violates("char x1 = 'a'; int y = x1' /*';\n#include \"/etc/passwd\"\n// */\n",
                       "include_path"));
}

TEST(RuleLexer, HasIncludeIsJudgedLikeInclude) {
  EXPECT_TRUE(violates("#if __has_include(\"/etc/passwd\")\n#endif\n__global__ void k() {}\n",
                       "include_path"));
  EXPECT_TRUE(violates("#if __has_include(<../../etc/passwd>)\n#endif\n", "include_path"));
  EXPECT_TRUE(violates("#if __has_include_next(<cuda_fp16.h>)\n#endif\n", "include_path"));
  EXPECT_TRUE(
      violates("#define P \"/etc/passwd\"\n#if __has_include(P)\n#endif\n", "include_path"));
  EXPECT_TRUE(violates("#if __has_include (  <stdio.h> )\n#endif\n", "include_path"));
  EXPECT_TRUE(violates("#define H(x) __has_include(x)\n", "include_path"));
  // One of the solution's own files is fine; a comment or a string mentioning it is not code.
  EXPECT_FALSE(
      violates("#if __has_include(\"k.cu\")\n#endif\n__global__ void k() {}\n", "include_path"));
  EXPECT_FALSE(
      violates("// __has_include(\"/etc/passwd\")\n__global__ void k() {}\n", "include_path"));
}

// ---- Archives ------------------------------------------------------------------------------

TEST(ArchiveReads, ShowDoesNotFollowALinkedSource) {
  TempDir tmp;
  const fs::path arc = tmp.path() / "arc";
  auto r = kharness("--archive " + quote(arc) + " validate " +
                    quote(testing::fixture("good/rmsnorm_simple.cu")) + " --compile-only");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const fs::path dir = fs::directory_iterator(arc / "candidates")->path();
  write(tmp.path() / "host.txt", kSecret);
  for (const char* name : {"source.cu", "compile.log", "sources"}) {
    if (!fs::exists(dir / name)) continue;
    fs::remove_all(dir / name);
    fs::create_symlink(tmp.path() / (std::string(name) == "sources" ? "" : "host.txt"), dir / name);
  }
  r = kharness("--archive " + quote(arc) + " show " + dir.filename().string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(has(r.out, "symlink")) << r.out;
  EXPECT_FALSE(has(r.out, kSecret)) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
}

TEST(ArchiveReads, AnIndexWithAViewOrTriggerIsRefused) {
  for (const char* extra :
       {"CREATE VIEW v AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT x FROM c",
        "CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM runs; END"}) {
    TempDir tmp;
    const fs::path arc = tmp.path() / "arc";
    auto r = kharness("--archive " + quote(arc) + " validate " +
                      quote(testing::fixture("good/rmsnorm_simple.cu")) + " --compile-only");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((arc / "index.sqlite").c_str(), &db, SQLITE_OPEN_READWRITE, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, extra, nullptr, nullptr, nullptr), SQLITE_OK) << extra;
    sqlite3_close(db);
    r = kharness("--archive " + quote(arc) + " runs");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(has(r.out, "index.sqlite: not a kharness archive index")) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    const fs::path dest = tmp.path() / "dest";
    r = kharness("archive merge " + quote(dest) + " " + quote(arc));
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(has(r.out, "not a kharness archive index")) << r.out;
  }
}

// ---- One bad submission is that submission's verdict --------------------------------------

TEST(BadSubmission, DuplicateSourcePathsAreRejectedNotAnEnvironmentError) {
  TempDir tmp;
  const fs::path subs = tmp.path() / "subs";
  write(subs / "dup" / "solution.json", R"({"sources": ["k.cu", "./k.cu"], "launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  write(subs / "dup" / "k.cu", "__global__ void k() {}\n");
  json fib = {{"name", "dupfib"},
              {"definition", "rmsnorm_h4096"},
              {"spec", {{"language", "cuda"}}},
              {"sources", json::array({{{"path", "a.cu"}, {"content", "x"}},
                                       {{"path", "a.cu"}, {"content", "y"}}})}};
  write(subs / "dupfib.json", fib.dump());
  fs::copy_file(testing::fixture("bad/host_code.cu"), subs / "z_host.cu");
  testing::expect_input_error([&] { load_solution(subs / "dup"); }, "sources[1]", "twice");
  testing::expect_input_error([&] { load_solution(subs / "dupfib.json"); }, "sources[1].path",
                              "twice");
  const fs::path out = tmp.path() / "r.json";
  auto r = kharness("score " + quote(subs) + " --operator rmsnorm_h4096 --no-cache --json " +
                    quote(out));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  json report = json::parse(read_file(out.string()));
  ASSERT_EQ(report["solutions"].size(), 3u) << report.dump(1);
  for (const auto& v : report["solutions"]) EXPECT_EQ(v["status"], "REJECTED") << v.dump();
}

TEST(BadSubmission, StaticModuleSizeAndOutputsAreCapped) {
  EXPECT_EQ(ptx_static_bytes(".visible .global .align 4 .b8 big[1099511627776];\n"),
            std::uint64_t{1} << 40);
  EXPECT_EQ(
      ptx_static_bytes(".global .align 16 .v4 .f32 v[2][3];\n.const .u32 c[4] = {1,2,3,4};\n"),
      16u * 6 + 16);
  // Inside a function a .local does not count; a .global declared there by inline PTX does.
  EXPECT_EQ(ptx_static_bytes(".entry k()\n{\n.local .b8 x[1000000];\n}\n.global .b8 g;\n"), 1u);
  EXPECT_EQ(ptx_static_bytes(".func f()\n{\n\t.global .align 8 .b8 big[2147483648];\n"
                             "\tld.global.u64 %rd1, [big];\n}\n"),
            std::uint64_t{1} << 31);
  auto v = check_output_rules(".global .b8 a[2147483648];\n", "");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "module_size");
  EXPECT_TRUE(has(v[0].message, "2147483648")) << v[0].message;
  OutputLimits small;
  small.max_ptx_bytes = 10;
  small.max_cubin_bytes = 10;
  v = check_output_rules(std::string(11, 'x'), std::string(11, 'y'), small);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].rule, "output_size");
  EXPECT_TRUE(has(v[0].message, "11 bytes")) << v[0].message;
  EXPECT_TRUE(check_output_rules(std::string(10, 'x'), "", small).empty());
}

// ---- One sanitiser for text on its way out ------------------------------------------------

TEST(Sanitiser, ControlCharactersAreVisibleAndFormulasDefused) {
  const std::string osc52 = "\x1b]52;c;aGVsbG8=\x07";
  EXPECT_EQ(printable_text("a\tb\nc" + osc52), "a\tb\nc\\x1b]52;c;aGVsbG8=\\x07");
  EXPECT_EQ(printable_text("\xc2\x9b"
                           "31m"),
            "\\xc2\\x9b31m");                                        // C1 CSI
  EXPECT_EQ(printable_text("x\xe2\x80\xaey"), "x\\xe2\\x80\\xaey");  // right-to-left override
  EXPECT_EQ(printable_text("caf\xc3\xa9"), "caf\xc3\xa9");           // a letter stays
  EXPECT_EQ(spreadsheet_safe("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
  EXPECT_EQ(spreadsheet_safe("+1+cmd"), "'+1+cmd");
  EXPECT_EQ(spreadsheet_safe("@SUM(A1)"), "'@SUM(A1)");
  EXPECT_EQ(spreadsheet_safe("\tx"), "\\x09x");  // the tab is made visible: no longer a tab
  EXPECT_EQ(spreadsheet_safe("-1.5"), "-1.5");
  EXPECT_EQ(spreadsheet_safe("rmsnorm"), "rmsnorm");
  Verdict v;
  v.solution = "=cmd|' /C calc'!A0";
  v.source = "x\x1b[2J.cu";
  v.status = Status::kRejected;
  const std::string csv = report::to_csv({v});
  EXPECT_TRUE(has(csv, "'=cmd")) << csv;
  EXPECT_FALSE(has(csv, "\x1b")) << csv;
  const std::string md = report::to_markdown({v});
  EXPECT_FALSE(has(md, "\x1b")) << md;
}

// ---- Run folders: data, never configuration -------------------------------------------------

TEST(ResumeTrust, ARunFolderNeverNamesTheCommandUrlOrAnswers) {
  TempDir tmp;
  const fs::path run = tmp.path() / "run";
  const std::string replay = quote(testing::fixture("replay/rmsnorm"));
  const std::string archive = "--archive " + quote(tmp.path() / "arc") + " ";
  auto r = kharness(archive + "run --operator rmsnorm_h4096 --budget 1 --provider replay " +
                    "--responses " + replay + " --compile-only --arch sm_90a --seed 1 --run-dir " +
                    quote(run));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string original = read_file((run / "run.json").string());
  const fs::path pwned = tmp.path() / "pwned";
  struct Case {
    const char* key;
    json value;
    const char* provider;
  };
  const Case cases[] = {
      {"command", "touch " + pwned.string(), "command"},
      {"base_url", "http://attacker.invalid", "anthropic"},
      {"responses", (tmp.path() / "elsewhere").string(), "replay"},
      {"command", 7, "command"},  // a wrong type: a one-line error too
  };
  for (const auto& c : cases) {
    json settings = json::parse(original);
    settings[c.key] = c.value;
    settings["provider"] = c.provider;
    write_file_atomic((run / "run.json").string(), settings.dump(2));
    for (const std::string& given : {std::string(), std::string(" --responses ") + replay}) {
      r = kharness(archive + "run --resume " + quote(run) + " --budget 2" + given);
      EXPECT_EQ(r.exit_code, 2) << c.key << ": " << r.out;
      EXPECT_TRUE(has(r.out, std::string("run.json: ") + c.key)) << r.out;
      EXPECT_EQ(lines(r.out), 1) << r.out;
      EXPECT_FALSE(fs::exists(pwned));
    }
  }
  // The same answers folder given again: the run goes on.
  write_file_atomic((run / "run.json").string(), original);
  r = kharness(archive + "run --resume " + quote(run) + " --budget 2 --responses " + replay);
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

// ---- Run folders: files read beneath the folder, type errors named -------------------------

namespace run_folder {

// A run folder as a run writes it: run.json and one candidate with its verdict.
fs::path write_run(const fs::path& dir) {
  controller::FileRecorder files(dir);
  files.begin({{"operator", "rmsnorm_h4096"}, {"budget", 3}});
  controller::CandidateRecord c;
  c.id = "c0001";
  c.status = controller::CandidateStatus::of(Status::kPassed);
  c.source = "__global__ void k() {}\n";
  Verdict v;
  v.solution = "k";
  v.status = Status::kPassed;
  c.verdict = to_json(v);
  files.record(c);
  return dir / "candidates" / "c0001";
}

// Replaces `key` of the JSON file with `value`.
void set_field(const fs::path& file, const std::string& key, const json& value) {
  json j = json::parse(read_file(file.string()));
  j[key] = value;
  write(file, j.dump());
}

}  // namespace run_folder

TEST(RunFolder, FilesThatAreLinksAreRefused) {
  TempDir tmp;
  write(tmp.path() / "host" / "run.json", std::string("{\"x\": \"") + kSecret + "\"}");
  const fs::path run = tmp.path() / "run";
  const fs::path candidate = run_folder::write_run(run);
  fs::remove(run / "run.json");
  fs::create_symlink(tmp.path() / "host" / "run.json", run / "run.json");
  controller::FileRecorder files(run);
  testing::expect_input_error([&] { files.load_run(); }, "run.json", "symlink");
  // A candidate's solution.cu linked to a host file is not read as the candidate's source.
  fs::remove(candidate / "solution.cu");
  fs::create_symlink(tmp.path() / "host" / "run.json", candidate / "solution.cu");
  testing::expect_input_error([&] { files.load_candidates(); }, "solution.cu", "symlink");
  // A candidate folder that is a link is not one of the run's.
  fs::remove_all(candidate);
  const fs::path other = run_folder::write_run(tmp.path() / "other");
  fs::create_symlink(other, candidate);
  EXPECT_TRUE(files.load_candidates().empty());
}

TEST(RunFolder, AFieldOfTheWrongTypeIsNamedWithoutTheJsonLibrarysWords) {
  TempDir tmp;
  const fs::path run = tmp.path() / "run";
  const fs::path candidate = run_folder::write_run(run);
  controller::FileRecorder files(run);
  ASSERT_EQ(files.load_candidates().size(), 1u);
  const std::string record = read_file((candidate / "record.json").string());
  const std::string verdict = read_file((candidate / "verdict.json").string());
  auto expect_named = [&](const std::string& field, const std::string& expected) {
    try {
      files.load_candidates();
      ADD_FAILURE() << field << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << e.message();
      EXPECT_TRUE(has(e.message(), field)) << e.message();
      EXPECT_TRUE(has(e.message(), expected)) << e.message();
      EXPECT_FALSE(has(e.message(), "type must be")) << e.message();
      EXPECT_FALSE(has(e.message(), "json.exception")) << e.message();
      EXPECT_EQ(lines(e.message()), 0) << e.message();
    }
  };
  run_folder::set_field(candidate / "record.json", "step", "three");
  expect_named("step", "expected a number, got string");
  write(candidate / "record.json", record);
  run_folder::set_field(candidate / "record.json", "promoted", json::array());
  expect_named("promoted", "expected a boolean, got array");
  write(candidate / "record.json", record);
  run_folder::set_field(candidate / "verdict.json", "solution", 7);
  expect_named("solution", "expected a string, got integer");
  write(candidate / "verdict.json", verdict);
  // Inside a nested field the file is named and the library's words are not quoted.
  run_folder::set_field(candidate / "record.json", "usage", json{{"input_tokens", "many"}});
  expect_named("record.json", "wrong type");
  write(candidate / "record.json", record);
  EXPECT_EQ(files.load_candidates().size(), 1u);
}

}  // namespace
}  // namespace kharness
