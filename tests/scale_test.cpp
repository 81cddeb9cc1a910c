// Beyond one GPU (docs/pipeline.md#pools-and-gpus) on the CPU: score --shard slices, archive merge
// (idempotent, overlapping sources, corrupt sources refused with the destination untouched), the
// --gpus and
// --shard flag errors, and the stable order of a pool's results (--compile-only: no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/shard.hpp"
#include "device/gpu_lock.hpp"
#include "kharness/archive.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Shards

TEST(Shard, EverySubmissionIsInExactlyOneShard) {
  for (std::size_t total : {0u, 1u, 5u, 23u, 100u}) {
    for (std::size_t n = 1; n <= 8; ++n) {
      std::vector<int> seen(total, 0);
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<std::size_t> items = cli::shard_items(total, {i, n});
        EXPECT_EQ(items, cli::shard_items(total, {i, n}));  // deterministic
        EXPECT_TRUE(std::is_sorted(items.begin(), items.end()));
        // Balanced: sizes differ by at most one.
        EXPECT_LE(items.size(), total / n + 1);
        EXPECT_GE(items.size(), total / n);
        for (std::size_t k : items) {
          ASSERT_LT(k, total);
          ++seen[k];
        }
      }
      for (std::size_t k = 0; k < total; ++k)
        EXPECT_EQ(seen[k], 1) << "item " << k << " of " << total << ", N = " << n;
    }
  }
}

TEST(Shard, ParsesIOverNAndRefusesTheRest) {
  cli::Shard s = cli::parse_shard("2/5");
  EXPECT_EQ(s.index, 2u);
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.text(), "2/5");
  EXPECT_EQ(cli::parse_shard("0/1").count, 1u);
  for (const char* bad :
       {"", "1", "5/5", "6/5", "-1/5", "1/0", "a/b", "1/2/3", "1 /2", "0x1/2", "1/1000000"}) {
    testing::expect_input_error([&] { cli::parse_shard(bad); }, "--shard", "0 <= I < N");
  }
}

// ---------------------------------------------------------------------------------------------
// The per-GPU lock (flock: two locks of one process conflict like two processes' would)

TEST(GpuLock, ChecksShareATimingIsAloneAndGoesFirst) {
  using device::GpuLock;
  using namespace std::chrono_literals;
  testing::TempDir tmp;
  fs::path dir = tmp.path() / "locks";
  std::atomic<int> order{0};
  int timed_at = 0, late_check_at = 0;
  {
    auto check1 = std::make_unique<GpuLock>(dir, "GPU-1234", GpuLock::Mode::kShared);
    auto check2 = std::make_unique<GpuLock>(dir, "GPU-1234", GpuLock::Mode::kShared);  // shared
    EXPECT_TRUE(check1->held());
    EXPECT_TRUE(check2->held());
    EXPECT_LT(check2->waited_seconds(), 0.5);
    GpuLock other_gpu(dir, "GPU-5678", GpuLock::Mode::kExclusive);  // another GPU: no wait
    EXPECT_LT(other_gpu.waited_seconds(), 0.5);
    std::thread timing([&] {
      GpuLock t(dir, "GPU-1234", GpuLock::Mode::kExclusive);
      timed_at = ++order;
      std::this_thread::sleep_for(100ms);
    });
    std::this_thread::sleep_for(200ms);  // the timing now waits for the checks
    std::thread late_check([&] {
      GpuLock c(dir, "GPU-1234", GpuLock::Mode::kShared);
      late_check_at = ++order;
    });
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(order.load(), 0);  // neither got in while the checks hold the GPU
    check1.reset();
    check2.reset();
    timing.join();
    late_check.join();
  }
  EXPECT_EQ(timed_at, 1);       // the waiting timing went first
  EXPECT_EQ(late_check_at, 2);  // the check that came after it waited for it
  // A folder that cannot be made is no lock, and says why.
  write_file_atomic((tmp.path() / "file").string(), "x");
  GpuLock none(tmp.path() / "file" / "locks", "GPU-1", GpuLock::Mode::kExclusive);
  EXPECT_FALSE(none.held());
  EXPECT_FALSE(none.problem().empty());
}

// A try (the early worker's, for its context) never waits: busy while another holder is
// exclusive or an exclusive taker waits at the turnstile, held beside other shared holders.
TEST(GpuLock, ATryNeverWaits) {
  using device::GpuLock;
  using namespace std::chrono_literals;
  testing::TempDir tmp;
  const fs::path dir = tmp.path() / "locks";
  auto attempt = [&](GpuLock::Mode mode) {
    auto lock = std::make_unique<GpuLock>(dir, "GPU-1234", mode, GpuLock::Wait::kTry);
    EXPECT_LT(lock->waited_seconds(), 0.5);
    return lock;
  };
  {
    auto shared = attempt(GpuLock::Mode::kShared);  // free: held
    EXPECT_TRUE(shared->held());
    EXPECT_FALSE(shared->busy());
    EXPECT_TRUE(attempt(GpuLock::Mode::kShared)->held());  // beside another check
    auto exclusive = attempt(GpuLock::Mode::kExclusive);   // a check holds it
    EXPECT_FALSE(exclusive->held());
    EXPECT_TRUE(exclusive->busy());
    // A timing waits for the check; meanwhile it holds the turnstile, and a try is busy.
    std::thread timing([&] {
      GpuLock t(dir, "GPU-1234", GpuLock::Mode::kExclusive);
      std::this_thread::sleep_for(100ms);
    });
    std::this_thread::sleep_for(200ms);
    auto behind = attempt(GpuLock::Mode::kShared);
    EXPECT_FALSE(behind->held());
    EXPECT_TRUE(behind->busy());
    shared.reset();
    timing.join();
  }
  {
    GpuLock timing(dir, "GPU-1234", GpuLock::Mode::kExclusive);  // a timing in flight
    auto check = attempt(GpuLock::Mode::kShared);
    EXPECT_FALSE(check->held());
    EXPECT_TRUE(check->busy());
  }
  EXPECT_TRUE(attempt(GpuLock::Mode::kExclusive)->held());  // all gone: free again
}

// ---------------------------------------------------------------------------------------------
// Merge (the library)

Verdict passed_verdict(const std::string& name) {
  Verdict v;
  v.solution = name;
  v.source = name + ".cu";
  v.definition = "rmsnorm";
  v.environment = {{"gpu", "NVIDIA H200"}, {"gpu_uuid", "GPU-1"}};
  v.score = score_from_json({{"mean_speedup", 1.5}, {"geomean_speedup", 1.5}});
  WorkloadVerdict w;
  w.uuid = "0123456789abcdef";
  w.timing = timing_from_json({{"candidate", {{"latency", 1e-5}}}, {"speedup", 1.5}});
  v.workloads.push_back(w);
  return v;
}

archive::CandidateRecord record(const std::string& name, const std::string& key) {
  archive::CandidateRecord r;
  r.name = name;
  r.operator_name = "rmsnorm";
  r.origin = "subs/" + name + ".cu";
  r.sources = {{"kernel.cu", "// " + name + "\n"}, {"util/helper.cuh", "// helper\n"}};
  r.plan = {{"definition", "rmsnorm"}};
  r.cubin = std::string(
      "\x7f"
      "ELF\0\x01",
      6);
  r.verdict = passed_verdict(name);
  r.cache_key = key;
  return r;
}

// An archive with one finished run of `names`, each keyed "key-NAME".
fs::path make_archive(const fs::path& dir, const std::vector<std::string>& names) {
  archive::Archive a(dir);
  std::string run = a.begin_run({{"command", "score"}});
  for (const auto& n : names) a.add_candidate(run, record(n, "key-" + n));
  a.finish_run(run);
  return dir;
}

// Every file under `dir` with its bytes (the WAL index's shared-memory file aside).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::end(it); ++it) {
    if (!it->is_regular_file() || it->path().extension() == ".sqlite-shm") continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    out[it->path().lexically_relative(dir).string()] = ss.str();
  }
  return out;
}

TEST(ArchiveMerge, JoinsRunsCandidatesVerdictsAndFilesOnce) {
  testing::TempDir tmp;
  fs::path a = make_archive(tmp.path() / "a", {"one", "two"});
  fs::path b = make_archive(tmp.path() / "b", {"three"});
  fs::path dest = tmp.path() / "merged";
  archive::MergeStats s = archive::Archive::merge(dest, {a, b});
  EXPECT_EQ(s.sources, 2);
  EXPECT_EQ(s.runs_added, 2);
  EXPECT_EQ(s.candidates_added, 3);
  EXPECT_EQ(s.candidates_present, 0);
  EXPECT_EQ(s.verdicts_reused, 0);
  archive::Archive m(dest);
  EXPECT_EQ(m.runs().size(), 2u);
  ASSERT_EQ(m.candidates().size(), 3u);
  // Files and rows as the source holds them.
  archive::Archive src(a);
  for (const auto& c : src.candidates()) {
    archive::StoredCandidate from = src.load(c.id), to = m.load(c.id);
    EXPECT_EQ(to.summary.run_id, from.summary.run_id);
    EXPECT_EQ(to.summary.seq, from.summary.seq);
    EXPECT_EQ(to.summary.status, "PASSED");
    EXPECT_EQ(to.summary.gpu, "NVIDIA H200");
    ASSERT_EQ(to.record.sources.size(), 2u);
    EXPECT_EQ(to.record.sources[0].content, from.record.sources[0].content);
    EXPECT_EQ(to.record.cubin, from.record.cubin);
    EXPECT_EQ(to_json(*to.record.verdict), to_json(*from.record.verdict));
    EXPECT_EQ(m.find_cached(c.cache_key)->id, c.id);
  }

  // Merging again, and merging an archive that already holds these (the merged one itself, and
  // a copy of it with one more run), adds nothing twice.
  s = archive::Archive::merge(dest, {a, b, dest});
  EXPECT_EQ(s.runs_added, 0);
  EXPECT_EQ(s.candidates_added, 0);
  EXPECT_EQ(s.candidates_present, 3);
  EXPECT_EQ(archive::Archive(dest).candidates().size(), 3u);
  fs::path dest2 = tmp.path() / "merged2";
  make_archive(tmp.path() / "c", {"four"});
  s = archive::Archive::merge(dest2, {dest, tmp.path() / "c", a});
  EXPECT_EQ(s.candidates_added, 4);
  EXPECT_EQ(s.candidates_present, 2);  // a's, already in through dest
  EXPECT_EQ(archive::Archive(dest2).candidates().size(), 4u);
  EXPECT_EQ(archive::Archive(dest2).runs().size(), 3u);
}

TEST(ArchiveMerge, AVerdictEvaluatedTwiceIsKeptOnceAndReused) {
  testing::TempDir tmp;
  // Two archives scored the same submission (same cache key) apart: two candidates, one verdict.
  fs::path a = make_archive(tmp.path() / "a", {"same"});
  fs::path b = make_archive(tmp.path() / "b", {"same", "other"});
  fs::path dest = tmp.path() / "m";
  archive::MergeStats s = archive::Archive::merge(dest, {a, b});
  EXPECT_EQ(s.candidates_added, 3);
  EXPECT_EQ(s.verdicts_reused, 1);
  archive::Archive m(dest);
  std::string first = archive::Archive(a).candidates()[0].id;
  std::string second = archive::Archive(b).candidates()[0].id;
  EXPECT_EQ(m.find_cached("key-same")->id, first);
  archive::StoredCandidate reused = m.load(second);
  EXPECT_EQ(reused.summary.cached_from, first);
  EXPECT_EQ(reused.record.cached_from, first);
  json meta = json::parse(read_file((reused.summary.dir / "record.json").string()));
  EXPECT_EQ(meta["cached_from"], first);
  // Idempotent still.
  s = archive::Archive::merge(dest, {b, a});
  EXPECT_EQ(s.candidates_added, 0);
  EXPECT_EQ(s.verdicts_reused, 0);
}

TEST(ArchiveMerge, ACorruptSourceIsRefusedAndTheDestinationUntouched) {
  testing::TempDir tmp;
  fs::path good = make_archive(tmp.path() / "good", {"one"});
  fs::path dest = make_archive(tmp.path() / "dest", {"zero"});
  auto before = snapshot(dest);

  fs::path garbage = tmp.path() / "garbage";
  fs::create_directories(garbage);
  write_file_atomic((garbage / "index.sqlite").string(), std::string(8192, 'x'));
  fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  // A kharness archive whose candidate folder is gone.
  fs::path broken = make_archive(tmp.path() / "broken", {"lost"});
  for (const auto& c : archive::Archive(broken).candidates()) fs::remove_all(c.dir);
  // One whose verdict.json was edited into something that is not JSON.
  fs::path edited = make_archive(tmp.path() / "edited", {"edited"});
  for (const auto& c : archive::Archive(edited).candidates())
    write_file_atomic((c.dir / "verdict.json").string(), "{ not json");

  struct Case {
    fs::path source;
    std::string where;
  };
  for (const Case& c : {Case{garbage, "garbage/index.sqlite"}, Case{empty, "empty"},
                        Case{broken, "broken/index.sqlite"}, Case{edited, "verdict.json"},
                        Case{tmp.path() / "missing", "missing"}}) {
    // The good source first: the bad one must stop the merge before anything is written.
    testing::expect_input_error(
        [&] {
          archive::Archive::merge(dest, {good, c.source});
        },
        c.where, "");
    EXPECT_EQ(snapshot(dest), before) << c.source;
    EXPECT_EQ(archive::Archive(dest).candidates().size(), 1u);
    before = snapshot(dest);  // opening it above may checkpoint the log
  }
  // Nor is a destination created for a merge that is refused.
  fs::path fresh = tmp.path() / "fresh";
  EXPECT_THROW(archive::Archive::merge(fresh, {good, garbage}), Error);
  EXPECT_FALSE(fs::exists(fresh));
}

// ---------------------------------------------------------------------------------------------
// The CLI: flags, pools, shards, merge and --from-archive

// A folder of submissions that compile-only scoring gives several statuses for.
fs::path submissions(const fs::path& dir) {
  fs::path subs = dir / "subs";
  fs::create_directories(subs / "nested");
  fs::copy(testing::fixture("good/rmsnorm_simple.cu"), subs / "a_simple.cu");
  fs::copy(testing::fixture("good/folder_solution"), subs / "b_folder",
           fs::copy_options::recursive);
  fs::copy(testing::fixture("bad/syntax_error_line37.cu"), subs / "c_syntax.cu");
  fs::copy(testing::fixture("bad/host_code.cu"), subs / "d_host.cu");
  fs::copy(testing::fixture("bad/broken_plan_json.cu"), subs / "nested/e_broken.cu");
  fs::copy(testing::fixture("bad/oob_write.cu"), subs / "nested/f_oob.cu");
  fs::copy(testing::fixture("good/rmsnorm_simple.cu"), subs / "g_simple_again.cu");
  return subs;
}

// A score JSON report without what differs between runs of the same verdicts.
json comparable(json j) {
  j.erase("generated_at");
  for (auto& v : j["solutions"]) {
    v.erase("seconds");
    v.erase("phases");
    v.erase("candidate");
    v.erase("cached_from");
    if (v.contains("compile")) {
      v["compile"].erase("seconds");
      v["compile"].erase("cache_hit");
    }
  }
  return j;
}

std::string comparable_junit(const std::string& xml) {
  return std::regex_replace(xml, std::regex(R"( time="[0-9.]+")"), "");
}

std::string score(const fs::path& archive, const std::string& args) {
  return "--archive '" + archive.string() + "' score " + args +
         " --operator rmsnorm_h4096 --compile-only --no-cache --seed 7";
}

TEST(ScaleCli, FlagErrorsAreOneLineAndExitTwo) {
  std::string sub = "'" + testing::fixture("good/rmsnorm_simple.cu").string() + "'";
  for (const std::string& args : std::vector<std::string>{
           "score " + sub + " --compile-only --shard 3/3",
           "score " + sub + " --compile-only --shard x",
           "score " + sub + " --compile-only --shard 1",
           "score " + sub + " --compile-only --gpus a",
           "score " + sub + " --compile-only --gpus 0,,1", "check " + sub + " --gpus=-1",
           "validate " + sub + " --compile-only --gpus '0;1'", "score --compile-only",
           "score --from-archive /nonexistent/archive", "archive merge /tmp/x /nonexistent/src"}) {
    auto r = testing::kharness(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("error:"), std::string::npos) << args << "\n" << r.out;
    EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << args << "\n" << r.out;
  }
  auto r = testing::kharness("score " + sub + " --compile-only --shard 2/2");
  EXPECT_NE(r.out.find("--shard"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 <= I < N"), std::string::npos) << r.out;
}

TEST(ScaleCli, APoolGivesTheSameResultsInTheSameOrder) {
  testing::TempDir tmp;
  fs::path subs = submissions(tmp.path());
  std::map<std::string, json> reports;
  for (const std::string gpus : {"0", "0,0,0"}) {
    fs::path out = tmp.path() / ("r" + gpus + ".json");
    auto r = testing::kharness(score(tmp.path() / ("arc" + gpus), "'" + subs.string() + "'") +
                               " --gpus " + gpus + " --json '" + out.string() + "'");
    EXPECT_EQ(r.exit_code, 1) << r.out;  // the bad fixtures fail
    reports[gpus] = json::parse(read_file(out.string()));
  }
  const json& one = reports["0"];
  ASSERT_EQ(one["solutions"].size(), 7u) << one.dump(1);
  // Sorted as a folder is: its entries by name, a sub-folder's after the files before it.
  std::vector<std::string> sources;
  for (const auto& v : one["solutions"])
    sources.push_back(fs::path(v["source"].get<std::string>()).lexically_relative(subs).string());
  EXPECT_EQ(sources, (std::vector<std::string>{"a_simple.cu", "b_folder", "c_syntax.cu",
                                               "d_host.cu", "g_simple_again.cu",
                                               "nested/e_broken.cu", "nested/f_oob.cu"}));
  EXPECT_EQ(comparable(reports["0,0,0"]), comparable(one));
  // check lists too: verdicts in the order given.
  auto r = testing::kharness(
      "check '" + (subs / "c_syntax.cu").string() + "' '" + (subs / "a_simple.cu").string() +
      "' '" + (subs / "d_host.cu").string() + "' --operator rmsnorm_h4096 --gpus 0,0 --json");
  // Without a GPU the passing one stops the check (exit 3); with one, it is checked (exit 1).
  if (r.exit_code == 1) {
    json all = json::parse(r.out.substr(r.out.find('[')));
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0]["status"], "COMPILE_ERROR");
    EXPECT_EQ(all[2]["status"], "REJECTED");
  } else {
    EXPECT_EQ(r.exit_code, 3) << r.out;
  }
}

TEST(ScaleCli, ShardsMergedEqualOneRun) {
  testing::TempDir tmp;
  fs::path subs = submissions(tmp.path());
  std::string folder = "'" + subs.string() + "'";
  auto reports = [&](const fs::path& stem) {
    return " --json '" + stem.string() + ".json' --junit '" + stem.string() + ".xml'";
  };
  auto one = testing::kharness(score(tmp.path() / "single", folder) + reports(tmp.path() / "one"));
  ASSERT_EQ(one.exit_code, 1) << one.out;
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    fs::path arc = tmp.path() / ("shard" + std::to_string(i));
    auto r = testing::kharness(score(arc, folder) + " --shard " + std::to_string(i) + "/3");
    EXPECT_EQ(r.exit_code, i == 1 ? 0 : 1) << r.out;  // shard 1 holds b_folder and g_simple only
    shards.push_back("'" + arc.string() + "'");
  }
  fs::path merged = tmp.path() / "merged";
  auto m = testing::kharness("archive merge '" + merged.string() + "' " + shards[0] + " " +
                             shards[1] + " " + shards[2]);
  ASSERT_EQ(m.exit_code, 0) << m.out;
  EXPECT_NE(m.out.find("7 candidate(s) added"), std::string::npos) << m.out;
  // Merging again adds nothing.
  m = testing::kharness("archive merge '" + merged.string() + "' " + shards[2] + " " + shards[0]);
  EXPECT_NE(m.out.find("0 candidate(s) added, 5 already there"), std::string::npos) << m.out;
  // With the folder (its order) and without (the places the shards kept).
  for (const std::string& args : {folder, std::string()}) {
    auto r = testing::kharness("score --from-archive '" + merged.string() + "' " + args +
                               reports(tmp.path() / "merged"));
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_EQ(comparable(json::parse(read_file((tmp.path() / "merged.json").string()))),
              comparable(json::parse(read_file((tmp.path() / "one.json").string()))))
        << args;
    EXPECT_EQ(comparable_junit(read_file((tmp.path() / "merged.xml").string())),
              comparable_junit(read_file((tmp.path() / "one.xml").string())))
        << args;
  }
  // A shard that never ran: its submissions are failures of the merged report, not gaps.
  fs::path partial = tmp.path() / "partial";
  testing::kharness("archive merge '" + partial.string() + "' " + shards[0]);
  auto r = testing::kharness("score --from-archive '" + partial.string() + "' " + folder +
                             " --json '" + (tmp.path() / "partial.json").string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  json p = json::parse(read_file((tmp.path() / "partial.json").string()));
  ASSERT_EQ(p["solutions"].size(), 7u);
  EXPECT_EQ(p["solutions"][1]["failure"]["kind"], "not_scored");
}

// run --samples K on a pool: the step's candidates evaluate at once and are judged in order, so
// the run's records are those of one worker.
TEST(ScaleCli, RunSamplesOnAPoolRecordWhatOneWorkerRecords) {
  testing::TempDir tmp;
  std::map<std::string, std::string> tables;
  for (const std::string gpus : {"0", "0,0,0"}) {
    fs::path dir = tmp.path() / ("run" + gpus);
    auto r = testing::kharness("run --operator rmsnorm_h4096 --provider replay --responses '" +
                               testing::fixture("replay/rmsnorm").string() +
                               "' --budget 5 --samples 3 --compile-only --seed 1 --no-archive "
                               "--gpus " +
                               gpus + " --run-dir '" + dir.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::string table;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("| c", 0) == 0) table += line + "\n";
    tables[gpus] = table;
  }
  EXPECT_NE(tables["0"].find("| c0005 |"), std::string::npos) << tables["0"];
  EXPECT_NE(tables["0"].find("COMPILE_ERROR"), std::string::npos) << tables["0"];
  EXPECT_EQ(tables["0,0,0"], tables["0"]);
}

TEST(ScaleCli, MergeRefusesACorruptSourceNamingIt) {
  testing::TempDir tmp;
  fs::path bad = tmp.path() / "bad";
  fs::create_directories(bad);
  write_file_atomic((bad / "index.sqlite").string(), "this is not a database at all......");
  fs::path dest = tmp.path() / "dest";
  auto r = testing::kharness("archive merge '" + dest.string() + "' '" + bad.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find((bad / "index.sqlite").string()), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(fs::exists(dest));
}

}  // namespace
}  // namespace kharness
