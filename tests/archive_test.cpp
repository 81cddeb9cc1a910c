#include "kharness/archive.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "archive/sqlite.hpp"
#include "kharness/error.hpp"
#include "test_util.hpp"

namespace kharness::archive {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Verdict timed_verdict(const std::string& name, double speedup) {
  Verdict v;
  v.solution = name;
  v.source = name + ".cu";
  v.definition = "rmsnorm";
  v.seconds = 1.5;
  v.environment = {{"gpu", "NVIDIA H200"}, {"driver", "570.1"}};
  WorkloadVerdict w;
  w.uuid = "0123456789abcdef";
  w.axes = {{"M", 128}};
  w.timing = timing_from_json({{"candidate", {{"latency", 1e-5}}},
                               {"baseline", {{"latency", 1e-5 * speedup}}},
                               {"speedup", speedup},
                               {"sol", {{"fraction", 0.4}}}});
  v.workloads.push_back(w);
  v.score = score_from_json(
      {{"mean_speedup", speedup}, {"geomean_speedup", speedup}, {"mean_sol_fraction", 0.4}});
  return v;
}

CandidateRecord full_record(const std::string& name, double speedup) {
  CandidateRecord r;
  r.name = name;
  r.operator_name = "rmsnorm";
  r.origin = "tests/" + name + ".cu";
  r.sources = {{"kernel.cu", "__global__ void k() {}\n"}, {"util/helper.cuh", "// helper\n"}};
  r.plan = {{"definition", "rmsnorm"}, {"launches", json::array()}};
  r.compile = {{"status", "PASSED"}};
  r.compile_log = "ptxas info: 12 registers";
  r.ptx = ".version 8.0\n";
  r.cubin = std::string(
      "\x7f"
      "ELF\0\x01\x02",
      7);
  r.verdict = timed_verdict(name, speedup);
  r.operator_speedup = OperatorSpeedup{speedup, speedup, false};  // timed against the operator's
  r.prompt = "Write a faster kernel.";
  r.response = "```cuda\n__global__ void k() {}\n```";
  r.usage = {{"input_tokens", 100}, {"output_tokens", 50}};
  r.step = 3;
  r.cache_key = "key-" + name;
  r.extra = {{"note", "hello"}};
  return r;
}

TEST(Archive, RoundTrip) {
  testing::TempDir tmp;
  Archive a(tmp.path() / "arc");
  std::string run = a.begin_run({{"command", "run"}, {"operator", "rmsnorm"}});
  std::string c1 = a.add_candidate(run, full_record("first", 1.5));
  CandidateRecord second = full_record("second", 2.5);
  second.parent_id = c1;
  std::string c2 = a.add_candidate(run, second);
  a.finish_run(run);

  StoredCandidate back = a.load(c2.substr(0, 6));  // a unique prefix
  EXPECT_EQ(back.summary.id, c2);
  EXPECT_EQ(back.summary.run_id, run);
  EXPECT_EQ(back.summary.seq, 2);
  EXPECT_EQ(back.summary.status, "PASSED");
  EXPECT_DOUBLE_EQ(back.summary.mean_speedup, 2.5);
  EXPECT_EQ(back.summary.gpu, "NVIDIA H200");
  EXPECT_EQ(back.record.parent_id, c1);
  EXPECT_EQ(back.record.step, 3);
  ASSERT_EQ(back.record.sources.size(), 2u);
  EXPECT_EQ(back.record.sources[1].path, "util/helper.cuh");
  EXPECT_EQ(back.record.sources[0].content, second.sources[0].content);
  EXPECT_EQ(back.record.plan, second.plan);
  EXPECT_EQ(back.record.compile_log, second.compile_log);
  EXPECT_EQ(back.record.ptx, second.ptx);
  EXPECT_EQ(back.record.cubin, second.cubin);
  EXPECT_EQ(back.record.prompt, second.prompt);
  EXPECT_EQ(back.record.response, second.response);
  EXPECT_EQ(back.record.usage, second.usage);
  EXPECT_EQ(back.record.extra, second.extra);
  ASSERT_TRUE(back.record.verdict);
  EXPECT_EQ(to_json(*back.record.verdict), to_json(*second.verdict));
  ASSERT_TRUE(back.record.operator_speedup);
  EXPECT_DOUBLE_EQ(back.record.operator_speedup->mean, 2.5);
  EXPECT_FALSE(back.record.operator_speedup->estimated);
  EXPECT_DOUBLE_EQ(back.summary.operator_speedup, 2.5);
  // The plain files a person opens.
  for (const char* f : {"source.cu", "plan.json", "kernel.ptx", "kernel.cubin", "compile.log",
                        "verdict.json", "timing.json", "prompt.md", "response.md", "usage.json"}) {
    EXPECT_TRUE(fs::exists(back.summary.dir / f)) << f;
  }
  EXPECT_EQ(slurp(back.summary.dir / "source.cu"), second.sources[0].content);

  auto runs = a.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].state, "finished");
  EXPECT_FALSE(runs[0].finished_at.empty());
  EXPECT_EQ(runs[0].command, "run");
  EXPECT_EQ(runs[0].candidates, 2);
  EXPECT_EQ(runs[0].passed, 2);
  EXPECT_DOUBLE_EQ(runs[0].best_speedup, 2.5);
  EXPECT_EQ(a.find_run(run.substr(0, 10))->id, run);

  EXPECT_EQ(a.candidates(run).size(), 2u);
  EXPECT_EQ(a.candidates("", "gemm").size(), 0u);
  EXPECT_EQ(a.best("rmsnorm")->id, c2);
  ASSERT_EQ(a.best_per_operator().size(), 1u);
  EXPECT_EQ(a.find_cached("key-first")->id, c1);
  EXPECT_FALSE(a.find_cached("nope"));

  // A second connection (another process would be the same) sees everything.
  Archive again(tmp.path() / "arc");
  EXPECT_EQ(again.candidates().size(), 2u);
}

// A PASSED verdict timed faster than light keeps its status and verdict (the cache reuses it as
// it is), but is never the best nor counted as passed.
TEST(Archive, SuspectCandidatesAreNeverBest) {
  testing::TempDir tmp;
  Archive a(tmp.path());
  std::string run = a.begin_run({{"command", "score"}});
  std::string honest = a.add_candidate(run, full_record("honest", 1.2));
  CandidateRecord cheat = full_record("cheat", 40.0);
  cheat.verdict->suspect = kFasterThanLight;
  cheat.verdict->workloads[0].suspect =
      Failure{kFasterThanLight, "timed 0.1 us, below the physical lower bound", {}};
  std::string id = a.add_candidate(run, cheat);
  EXPECT_EQ(a.best("rmsnorm")->id, honest);
  EXPECT_EQ(a.runs()[0].passed, 1);
  EXPECT_DOUBLE_EQ(a.runs()[0].best_speedup, 1.2);
  StoredCandidate stored = a.load(id);
  EXPECT_EQ(stored.summary.status, "PASSED");
  EXPECT_EQ(stored.summary.failure_kind, "faster_than_light");
  EXPECT_FALSE(stored.summary.clean_pass());
  ASSERT_TRUE(stored.record.verdict);
  EXPECT_EQ(stored.record.verdict->suspect, kFasterThanLight);
  ASSERT_TRUE(stored.record.verdict->workloads[0].suspect);
  EXPECT_EQ(a.find_cached("key-cheat")->id, id);
}

// Speedups have one meaning where candidates are ranked: over the operator's own baseline. A run
// candidate's verdict stays as measured (over its incumbent) and ranks by the run's estimate; one
// timed against another baseline (--baseline PATH) has no figure to rank by.
TEST(Archive, RanksBySpeedupOverTheOperatorsBaseline) {
  testing::TempDir tmp;
  Archive a(tmp.path());
  std::string run = a.begin_run({{"command", "run"}});
  std::string checked = a.add_candidate(run, full_record("checked", 2.0));
  CandidateRecord candidate = full_record("c0003", 1.05);  // 1.05x its incumbent...
  candidate.verdict->score.speedups_over = "c0002.cu";
  candidate.operator_speedup = OperatorSpeedup{3.0, 2.9, true};  // ...which was 2.86x the baseline
  std::string estimated = a.add_candidate(run, candidate);
  CandidateRecord other = full_record("other", 10.0);  // 10x a slow --baseline of the user's
  other.verdict->score.speedups_over = "slow.cu";
  other.operator_speedup.reset();
  std::string unranked = a.add_candidate(run, other);

  EXPECT_EQ(a.best("rmsnorm")->id, estimated);
  EXPECT_DOUBLE_EQ(a.runs()[0].best_speedup, 3.0);
  StoredCandidate e = a.load(estimated);
  EXPECT_DOUBLE_EQ(e.summary.mean_speedup, 1.05);  // the verdict as measured
  EXPECT_DOUBLE_EQ(e.summary.operator_speedup, 3.0);
  EXPECT_TRUE(e.summary.operator_speedup_estimated);
  EXPECT_EQ(e.record.verdict->score.speedups_over, "c0002.cu");
  ASSERT_TRUE(e.record.operator_speedup);
  EXPECT_DOUBLE_EQ(e.record.operator_speedup->geomean, 2.9);
  StoredCandidate u = a.load(unranked);
  EXPECT_DOUBLE_EQ(u.summary.mean_speedup, 10.0);
  EXPECT_DOUBLE_EQ(u.summary.operator_speedup, 0.0);
  EXPECT_FALSE(u.record.operator_speedup);
  EXPECT_FALSE(a.load(checked).summary.operator_speedup_estimated);
}

// An index written before the operator speedup columns: opened for writing it gets them, filled
// with what its mean_speedup meant (a run's candidates but its seed: estimated through the
// incumbent); merged from as it is, the destination reads them the same way.
TEST(Archive, UpgradesAnIndexWithoutOperatorSpeedups) {
  testing::TempDir tmp;
  const fs::path old_dir = tmp.path() / "old";
  std::string seed, candidate;
  {
    Archive a(old_dir);
    std::string run = a.begin_run({{"command", "run"}});
    CandidateRecord s = full_record("c0000", 2.0);
    s.operator_speedup.reset();
    seed = a.add_candidate(run, s);
    CandidateRecord c = full_record("c0001", 2.6);
    c.operator_speedup.reset();
    candidate = a.add_candidate(run, c);
  }
  auto drop_columns = [](const fs::path& index) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(index.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    for (const char* sql : {"ALTER TABLE verdicts DROP COLUMN operator_speedup",
                            "ALTER TABLE verdicts DROP COLUMN operator_speedup_estimated"})
      EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql;
    sqlite3_close(db);
  };
  drop_columns(old_dir / "index.sqlite");
  const fs::path copy = tmp.path() / "copy";
  fs::copy(old_dir, copy, fs::copy_options::recursive);

  // Merged from while still old (a source is never written to).
  const fs::path dest = tmp.path() / "dest";
  Archive::merge(dest, {copy});
  Archive merged(dest);
  EXPECT_DOUBLE_EQ(merged.load(candidate).summary.operator_speedup, 2.6);
  EXPECT_TRUE(merged.load(candidate).summary.operator_speedup_estimated);
  EXPECT_FALSE(merged.load(seed).summary.operator_speedup_estimated);
  EXPECT_EQ(merged.best("rmsnorm")->id, candidate);

  // Opened for writing: upgraded in place.
  Archive upgraded(old_dir);
  EXPECT_DOUBLE_EQ(upgraded.load(seed).summary.operator_speedup, 2.0);
  EXPECT_FALSE(upgraded.load(seed).summary.operator_speedup_estimated);
  EXPECT_TRUE(upgraded.load(candidate).summary.operator_speedup_estimated);
  EXPECT_DOUBLE_EQ(upgraded.runs()[0].best_speedup, 2.6);
  std::string run = upgraded.runs()[0].id;
  EXPECT_NO_THROW(upgraded.add_candidate(run, full_record("c0002", 2.7)));
  EXPECT_EQ(upgraded.best("rmsnorm")->name, "c0002");
}

TEST(Archive, FailedAndCachedCandidates) {
  testing::TempDir tmp;
  Archive a(tmp.path());
  std::string run = a.begin_run({{"command", "score"}});
  CandidateRecord bad;
  bad.name = "bad";
  bad.operator_name = "rmsnorm";
  bad.cache_key = "k";
  Verdict v;
  v.status = Status::kIncorrectNumerical;
  v.failure = Failure{"tolerance", "max abs error 3", {}};
  bad.verdict = v;
  std::string id = a.add_candidate(run, bad);
  CandidateRecord reuse = bad;
  reuse.cached_from = id;
  a.add_candidate(run, reuse);
  EXPECT_FALSE(a.best("rmsnorm"));
  EXPECT_EQ(a.find_cached("k")->id, id);  // the evaluated one, not the copy
  EXPECT_EQ(a.load(id).summary.failure_kind, "tolerance");
  EXPECT_EQ(a.runs()[0].passed, 0);
}

TEST(Archive, BadIdsAreInputErrors) {
  testing::TempDir tmp;
  Archive a(tmp.path());
  testing::expect_input_error([&] { a.load("zz"); }, "zz", "hexadecimal");
  testing::expect_input_error([&] { a.load("abc"); }, "abc", "no candidate");
  testing::expect_input_error([&] { a.add_candidate("norun", CandidateRecord{}); }, "archive",
                              "no run");
}

TEST(Archive, ScrubsSecrets) {
  const std::string ant = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
  const std::string oai = "sk-proj-ZyXwVuTsRqPoNmLkJiHg1234";
  for (const std::string& text : std::vector<std::string>{
           "key " + ant + " end", "x-api-key: secretvalue123", "X-Api-Key=\"secretvalue123\"",
           "Authorization: Bearer abcdefghijklmnop", "ANTHROPIC_API_KEY=secretvalue123",
           "{\"api_key\": \"secretvalue123\"}", "OPENAI " + oai}) {
    std::string out = scrub_secrets(text);
    EXPECT_NE(out.find("[REDACTED]"), std::string::npos) << text << " -> " << out;
    EXPECT_EQ(out.find("secretvalue123"), std::string::npos) << out;
    EXPECT_EQ(out.find(ant), std::string::npos) << out;
    EXPECT_EQ(out.find(oai), std::string::npos) << out;
    EXPECT_EQ(out.find("abcdefghijklmnop"), std::string::npos) << out;
  }
  // Ordinary text is left alone.
  for (const std::string& text :
       std::vector<std::string>{"task-specific kernel", "float sk = 1.0f; // sk-1", "x = 3;"}) {
    EXPECT_EQ(scrub_secrets(text), text);
  }
  json j = scrub_json_secrets(
      {{"headers", {{"x-api-key", "plainvalue"}}}, {"n", 3}, {"msg", json::array({"use " + ant})}});
  EXPECT_EQ(j["headers"]["x-api-key"], "[REDACTED]");
  EXPECT_EQ(j["n"], 3);
  EXPECT_EQ(j["msg"][0], "use [REDACTED]");

  // Nothing that reaches the archive keeps the key.
  testing::TempDir tmp;
  Archive a(tmp.path());
  std::string run = a.begin_run({{"command", "run"}, {"argv", {"--key", ant}}});
  CandidateRecord r = full_record("leaky", 1.0);
  r.prompt = "key: " + ant;
  r.response = "x-api-key: " + ant;
  r.usage = {{"api_key", ant}};
  std::string id = a.add_candidate(run, r);
  for (const auto& entry : fs::recursive_directory_iterator(tmp.path())) {
    if (entry.is_regular_file())
      EXPECT_EQ(slurp(entry.path()).find(ant), std::string::npos) << entry.path();
  }
  EXPECT_EQ(a.load(id).record.prompt, "key: [REDACTED]");
}

TEST(VerdictCacheKey, EveryPartChangesTheKey) {
  CacheKeyParts base;
  base.sources = {{"k.cu", "__global__ void k() {}"}};
  base.plan = {{"launches", json::array()}};
  base.options = {{"mode", "validate"}, {"arch", "sm_90a"}};
  base.definition = "{\"name\": \"rmsnorm\"}";
  base.workloads = "{\"uuid\": \"1\"}";
  base.harness = "reference";
  base.gpu = "NVIDIA H200";
  base.driver = "570.1";
  base.kharness_version = "0.1.0 (abc)";
  const std::string key = verdict_cache_key(base);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(verdict_cache_key(base), key);  // a hit: the same parts, the same key

  std::vector<std::pair<const char*, std::function<void(CacheKeyParts&)>>> changes = {
      {"source", [](CacheKeyParts& p) { p.sources[0].content += " "; }},
      {"source name", [](CacheKeyParts& p) { p.sources[0].path = "j.cu"; }},
      {"extra source",
       [](CacheKeyParts& p) {
         p.sources.push_back({"h.cuh", ""});
       }},
      {"plan", [](CacheKeyParts& p) { p.plan["workspace_bytes"] = 4; }},
      {"options", [](CacheKeyParts& p) { p.options["arch"] = "sm_100a"; }},
      {"mode", [](CacheKeyParts& p) { p.options["mode"] = "check"; }},
      {"definition", [](CacheKeyParts& p) { p.definition += " "; }},
      {"workloads", [](CacheKeyParts& p) { p.workloads += " "; }},
      {"harness", [](CacheKeyParts& p) { p.harness += " "; }},
      {"gpu", [](CacheKeyParts& p) { p.gpu = "NVIDIA B200"; }},
      {"driver", [](CacheKeyParts& p) { p.driver = "575.0"; }},
      {"version", [](CacheKeyParts& p) { p.kharness_version = "0.1.1 (abc)"; }},
      // Length prefixes: moving a byte from one part to the next is a different key.
      {"boundary", [](CacheKeyParts& p) {
         p.definition = "{\"name\": \"rmsnorm\"";
         p.workloads = "}{\"uuid\": \"1\"}";
       }}};
  for (auto& [what, change] : changes) {
    CacheKeyParts p = base;
    change(p);
    EXPECT_NE(verdict_cache_key(p), key) << what;
  }
}

// A child process adds candidates as fast as it can; the parent kills it with SIGKILL at a random
// moment. Whatever the moment, the archive opens, and every indexed candidate is complete.
TEST(Archive, SurvivesKillDashNineOfAWriter) {
  testing::TempDir tmp;
  fs::path dir = tmp.path() / "arc";
  { Archive create(dir); }  // the index exists before the first child starts
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_us(0, 60000);
  int killed_mid_run = 0;
  for (int round = 0; round < 25; ++round) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        Archive a(dir);
        std::string run = a.begin_run({{"command", "writer"}, {"round", round}});
        for (int i = 0; i < 1000; ++i)
          a.add_candidate(run, full_record("c" + std::to_string(i), 1.0 + i));
        a.finish_run(run);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer: %s\n", e.what());
        ::_exit(3);
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) ++killed_mid_run;
    ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "the writer failed";

    Archive a(dir);  // must open
    for (const auto& c : a.candidates()) {
      ASSERT_TRUE(fs::exists(c.dir / "verdict.json")) << c.dir;
      ASSERT_TRUE(fs::exists(c.dir / "record.json")) << c.dir;
      ASSERT_EQ(slurp(c.dir / "source.cu"), "__global__ void k() {}\n") << c.dir;
    }
    if (!a.candidates().empty()) {
      StoredCandidate last = a.load(a.candidates().back().id);
      ASSERT_TRUE(last.record.verdict);
    }
  }
  EXPECT_GT(killed_mid_run, 0);
  // What the killed writers left half-written is swept when the archive is opened.
  for (const auto& entry : fs::directory_iterator(dir / "candidates"))
    EXPECT_NE(entry.path().filename().string()[0], '.') << entry.path();
  // Another writer after all that still works.
  Archive a(dir);
  std::string run = a.begin_run({});
  EXPECT_FALSE(a.add_candidate(run, full_record("after", 1.0)).empty());
}

// Several processes writing one archive at once: every candidate lands, numbered without gaps.
TEST(Archive, ConcurrentWriters) {
  testing::TempDir tmp;
  fs::path dir = tmp.path() / "arc";
  constexpr int kWriters = 4, kEach = 15;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        Archive a(dir);  // every child creates or opens the index at the same moment
        std::string run = a.begin_run({{"command", "writer"}, {"writer", w}});
        for (int i = 0; i < kEach; ++i) a.add_candidate(run, full_record("c", 1.0 + i));
        a.finish_run(run);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer %d: %s\n", w, e.what());
        ::_exit(3);
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  Archive a(dir);
  auto runs = a.runs();
  ASSERT_EQ(runs.size(), static_cast<std::size_t>(kWriters));
  for (const auto& r : runs) {
    EXPECT_EQ(r.state, "finished");
    auto list = a.candidates(r.id);
    ASSERT_EQ(list.size(), static_cast<std::size_t>(kEach));
    for (int i = 0; i < kEach; ++i) EXPECT_EQ(list[static_cast<std::size_t>(i)].seq, i + 1);
  }
}

}  // namespace
}  // namespace kharness::archive
