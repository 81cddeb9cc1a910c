// The evaluation pipeline (src/pipeline/evaluation.hpp) on the CPU, in --compile-only mode: one
// load and one compile per evaluation, the verdict cache, the private compile cache of --no-cache,
// and a malformed solution turned into its REJECTED verdict once. Then the overlap: the
// reference and the candidate compiled at once with the outcome of one after the other, and the
// worker (the built kharness's `__worker`) started before its request and closed without one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kharness/device.hpp"
#include "kharness/subprocess.hpp"
#include "kharness/text.hpp"
#include "pipeline/evaluation.hpp"
#include "pipeline/request.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

// Every kharness-compile-* folder under `dir` (the private compile caches of --no-cache).
int private_caches(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().rfind("kharness-compile-", 0) == 0;
  return n;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KHARNESS_CACHE", (dir_.path() / "compile-cache").string().c_str(), 1);
    options_.archive.command = "check";
    options_.mode = Mode::kCompile;
    options_.target.operator_name = "rmsnorm_h4096";
    options_.target.operators_dirs = {testing::source_dir() / "operators"};
    options_.archive.dir = dir_.path() / "archive";
    options_.target.arch = "sm_90a";
    options_.check.seed = 1;
    options_.seed_given = true;
  }
  void TearDown() override { ::unsetenv("KHARNESS_CACHE"); }

  testing::TempDir dir_;
  pipeline::Request options_;
};

TEST_F(PipelineTest, LoadsOnceCompilesOnceAndTheSecondEvaluationIsACacheHit) {
  const std::string good = testing::fixture("good/rmsnorm_simple.cu").string();
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation first = evaluator.evaluate(good);
  EXPECT_FALSE(first.bad_input);
  EXPECT_TRUE(first.verdict.passed()) << to_json(first.verdict).dump(2);
  EXPECT_EQ(first.loads, 1);
  EXPECT_EQ(first.compiles, 1);  // a fresh compile cache: one NVRTC compile, and only one
  EXPECT_FALSE(first.candidate_id.empty());
  EXPECT_TRUE(first.cached_from.empty());

  pipeline::Evaluation second = evaluator.evaluate(good);
  EXPECT_EQ(second.cached_from, first.candidate_id);
  EXPECT_EQ(second.loads, 1);
  EXPECT_EQ(second.compiles, 0);  // the verdict came from the cache: nothing compiled
  EXPECT_EQ(second.verdict.status, first.verdict.status);
  evaluator.finish();

  // Another invocation over the same archive reuses the verdict too.
  pipeline::Evaluator again(options_);
  EXPECT_EQ(again.evaluate(good).cached_from, first.candidate_id);
}

TEST_F(PipelineTest, NoCacheCompilesIntoAPrivateCacheThatIsRemovedAfterwards) {
  testing::TempDir tmp;
  const char* old_tmpdir = std::getenv("TMPDIR");
  std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  options_.target.use_cache = false;
  {
    pipeline::Evaluator evaluator(options_);
    EXPECT_EQ(private_caches(tmp.path()), 1);
    pipeline::Evaluation e =
        evaluator.evaluate(testing::fixture("good/rmsnorm_simple.cu").string());
    EXPECT_EQ(e.compiles, 1);
    EXPECT_TRUE(e.cached_from.empty());
    // Nothing went into the user's compile cache.
    EXPECT_FALSE(fs::exists(dir_.path() / "compile-cache") &&
                 !fs::is_empty(dir_.path() / "compile-cache"));
    evaluator.finish();
  }
  EXPECT_EQ(private_caches(tmp.path()), 0);
  if (old_tmpdir) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

TEST_F(PipelineTest, AMalformedSolutionIsRejectedOnceAndArchived) {
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation e = evaluator.evaluate(testing::fixture("bad/broken_plan_json.cu").string());
  EXPECT_TRUE(e.bad_input);
  EXPECT_TRUE(e.error != nullptr);
  EXPECT_EQ(e.verdict.status, Status::kRejected);
  ASSERT_TRUE(e.verdict.failure.has_value());
  EXPECT_EQ(e.verdict.failure->kind, "bad_input");
  EXPECT_EQ(e.compiles, 0);
  // The error the pipeline keeps is the one a lone `check` stops with (exit 2).
  try {
    std::rethrow_exception(e.error);
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ExitCode::kUsage);
    EXPECT_NE(err.message().find("broken_plan_json"), std::string::npos) << err.message();
  }
  evaluator.finish();
  archive::Archive a(dir_.path() / "archive");
  auto candidates = a.candidates(evaluator.run_id());
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].status, "REJECTED");
}

TEST_F(PipelineTest, AnUnknownOperatorIsBadInputNamingIt) {
  options_.target.operator_name = "no_such_operator";
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation e = evaluator.evaluate(testing::fixture("good/rmsnorm_simple.cu").string());
  EXPECT_TRUE(e.bad_input);
  EXPECT_NE(e.verdict.failure->message.find("no_such_operator"), std::string::npos)
      << e.verdict.failure->message;
}

// ---- the parent's compile: the reference and the candidate at once ----

// In-process evaluations that need a GPU would start this test binary as their worker: on a
// machine with a GPU these tests leave the pipeline's GPU path to the GPU tests (the CLI's).
#define SKIP_WITH_A_GPU() \
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: the worker would be this test binary"

// A candidate that does not compile is that candidate's COMPILE_ERROR verdict, whichever of the
// two concurrent compiles ends first, with or without the caches, and with no GPU: nothing after
// the compile is reached (no `no GPU` error), and the parent's compile is a phase of the verdict.
TEST_F(PipelineTest, ACompileErrorIsTheVerdictWithTheReferenceCompiledAlongside) {
  SKIP_WITH_A_GPU();
  options_.mode = Mode::kCheck;
  for (bool cache : {true, false}) {
    options_.target.use_cache = cache;
    pipeline::Evaluator evaluator(options_);
    pipeline::Evaluation e =
        evaluator.evaluate(testing::fixture("bad/syntax_error_line37.cu").string());
    EXPECT_FALSE(e.bad_input);
    EXPECT_EQ(e.verdict.status, Status::kCompileError) << to_json(e.verdict).dump(2);
    ASSERT_TRUE(e.verdict.failure.has_value());
    EXPECT_EQ(e.verdict.failure->kind, "compile_error");
    EXPECT_EQ(e.verdict.failure->evidence.value("line", 0), 37);
    EXPECT_EQ(e.compiles, 1);
    EXPECT_GT(e.verdict.phases.count("parent_compile"), 0u);
    evaluator.finish();
  }
}

// A candidate that compiles needs a GPU after its compile: the same environment error (exit 3)
// as without the overlap, from the check, not from the compile running alongside.
TEST_F(PipelineTest, WithoutAGpuACandidateThatCompilesIsAnEnvironmentError) {
  SKIP_WITH_A_GPU();
  options_.mode = Mode::kValidate;
  for (bool cache : {true, false}) {
    options_.target.use_cache = cache;
    pipeline::Evaluator evaluator(options_);
    try {
      evaluator.evaluate(testing::fixture("good/rmsnorm_simple.cu").string());
      ADD_FAILURE() << "no error without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kEnvironment) << e.message();
      EXPECT_NE(e.message().find("`kharness compile`"), std::string::npos) << e.message();
    }
  }
}

// An operator whose reference does not compile: its own folder, shadowing the shipped one.
fs::path operator_with_broken_reference(const fs::path& dir) {
  const fs::path op = dir / "rmsnorm_h4096";
  fs::create_directories(op);
  const fs::path shipped = testing::source_dir() / "operators" / "rmsnorm_h4096";
  auto definition =
      nlohmann::ordered_json::parse(read_file((shipped / "definition.json").string()));
  definition["kharness"].erase("baseline");  // no baseline folder here
  write_file_atomic((op / "definition.json").string(), definition.dump(2));
  fs::copy_file(shipped / "workloads.jsonl", op / "workloads.jsonl");
  std::string reference = read_file(testing::fixture("bad/syntax_error_line37.cu").string());
  write_file_atomic((op / "reference.cu").string(), reference);
  return dir;
}

// The reference's failure is a kharness failure (exit 4) and wins over anything the candidate's
// compile, run at the same time, says: a candidate rejected by the rules before NVRTC (done long
// before the reference), one that does not compile, and one that does.
TEST_F(PipelineTest, AReferenceThatDoesNotCompileWinsWhicheverCompileEndsFirst) {
  options_.target.operators_dirs = {operator_with_broken_reference(dir_.path() / "operators")};
  for (const char* candidate :
       {"bad/host_code.cu", "bad/syntax_error_line37.cu", "good/rmsnorm_simple.cu"}) {
    for (bool cache : {true, false}) {
      options_.target.use_cache = cache;
      pipeline::Evaluator evaluator(options_);
      try {
        pipeline::Evaluation e = evaluator.evaluate(testing::fixture(candidate).string());
        ADD_FAILURE() << candidate << ": no error: " << to_json(e.verdict).dump(2);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::kInternal) << candidate << ": " << e.message();
        EXPECT_NE(e.message().find("reference does not compile"), std::string::npos)
            << candidate << ": " << e.message();
        EXPECT_NE(e.where().find("reference.cu"), std::string::npos) << e.where();
      }
    }
  }
}

// Under --no-cache the key (the archive's record of the evaluation) is made alongside the compile:
// the same key as the one the verdict cache looks up first.
TEST_F(PipelineTest, NoCacheKeysAlongsideTheCompileWithTheSameKey) {
  const std::string good = testing::fixture("good/rmsnorm_simple.cu").string();
  pipeline::Evaluator cached(options_);
  const std::string key = cached.evaluate(good).cache_key;
  options_.target.use_cache = false;
  pipeline::Evaluator uncached(options_);
  pipeline::Evaluation e = uncached.evaluate(good);
  EXPECT_FALSE(key.empty());
  EXPECT_EQ(e.cache_key, key);
  EXPECT_TRUE(e.cached_from.empty());
  EXPECT_EQ(e.compiles, 1);
  EXPECT_GT(e.verdict.phases.count("parent_compile"), 0u);
}

// ---- the worker started before its request ----

// True when nobody holds `file` (flock): a worker's GPU lock was released with it.
bool lock_free(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return true;  // never made: never held
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

SubprocessOptions worker_options(const fs::path& lock_dir) {
  SubprocessOptions o;
  o.argv = {KHARNESS_BINARY, "__worker"};
  o.env = {{"KHARNESS_LOCK_DIR", lock_dir.string()}};
  o.timeout_seconds = 60;
  return o;
}

// What the pipeline does when the candidate does not compile: the early worker's stdin is closed
// empty. It ends at once, status 0, writing nothing (no error line), whatever its GPU set-up was
// doing (with a driver: cuInit, the lock, a context), and leaves no lock held and no zombie.
// The state letter of process `pid` from /proc ('Z' for a zombie), or 0 when it is gone.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

// A worker whose parent dies (killed, Ctrl-C) dies with it, rather than waiting or evaluating on
// for nobody with the GPU lock held. Here the worker waits for its request on a pipe that this
// test keeps open (so it never sees end of file), and its parent, an intermediate process, exits.
TEST(EarlyWorker, DiesWithItsParent) {
  testing::TempDir locks;
  int request[2], report[2];
  ASSERT_EQ(::pipe(request), 0);
  ASSERT_EQ(::pipe(report), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    const pid_t worker = ::fork();
    if (worker == 0) {
      ::dup2(request[0], 0);
      ::setenv("KHARNESS_LOCK_DIR", locks.path().c_str(), 1);
      ::execl(KHARNESS_BINARY, KHARNESS_BINARY, "__worker", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    (void)!::write(report[1], &worker, sizeof worker);
    ::usleep(300 * 1000);  // the worker is up, blocked on its request
    ::_exit(0);
  }
  pid_t worker = 0;
  ASSERT_EQ(::read(report[0], &worker, sizeof worker), static_cast<ssize_t>(sizeof worker));
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  char state = process_state(worker);
  for (int i = 0; i < 100 && state != 0 && state != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    state = process_state(worker);
  }
  EXPECT_TRUE(state == 0 || state == 'Z')
      << "the worker outlived its parent (state " << state << ")";
  if (state != 0 && state != 'Z') ::kill(worker, SIGKILL);
  for (int fd : {request[0], request[1], report[0], report[1]}) ::close(fd);
}

TEST(EarlyWorker, ClosedWithoutARequestItExitsQuietly) {
  testing::TempDir locks;
  for (double head_start : {0.0, 0.5}) {
    Subprocess worker(worker_options(locks.path()));
    ASSERT_TRUE(worker.started());
    const pid_t pid = worker.pid();
    std::this_thread::sleep_for(std::chrono::duration<double>(head_start));
    auto t0 = std::chrono::steady_clock::now();
    SubprocessResult r = worker.close(10);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.stderr_data;
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.stdout_data, "");
    EXPECT_EQ(r.stderr_data, "");
    EXPECT_LT(wall, 5.0);
    int status;
    EXPECT_EQ(::waitpid(pid, &status, WNOHANG), -1);  // reaped
    for (const auto& entry : fs::directory_iterator(locks.path()))
      EXPECT_TRUE(lock_free(entry.path())) << entry.path();
  }
}

// While it waits for its request (its parent compiles, for as long as the candidate's source makes
// it), the worker holds no GPU lock: a timing on this GPU does not wait for a neighbour's compile.
// Its set-up tries the lock (for its context: here the driver's absence) and lets it go.
TEST(EarlyWorker, HoldsNoLockWhileWaitingForItsRequest) {
  testing::TempDir locks;
  Subprocess worker(worker_options(locks.path()));
  ASSERT_TRUE(worker.started());
  // The lock files (device-0.lock, or the GPU's UUID), free: none held.
  auto state = [&](bool& made) {
    made = false;
    bool free = true;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(locks.path(), ec)) {
      if (entry.path().extension() != ".lock") continue;
      made = true;
      free = free && lock_free(entry.path());
    }
    return free;
  };
  bool made = false, free = false;
  for (int i = 0; i < 100 && !(made && free); ++i) {  // up to 5 s for the set-up
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    free = state(made);
  }
  EXPECT_TRUE(made) << "the set-up never tried the GPU lock";
  EXPECT_TRUE(free) << "the worker holds the GPU lock while it waits for its request";
  for (int i = 0; i < 10 && free; ++i) {  // and goes on not holding it
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    free = state(made);
  }
  EXPECT_TRUE(free) << "the worker took the GPU lock before its request";
  SubprocessResult r = worker.close(10);
  EXPECT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.stderr_data;
}

// Given its request, the worker answers: on this machine, after loading (and here
// compiling) the solution, the error of its GPU set-up (no driver: exit 3), as one error line.
// Its GPU lock was tried in the folder its environment names (the request does not carry it), and
// is released.
TEST(EarlyWorker, GivenItsRequestItTakesTheLockFromItsEnvironment) {
  SKIP_WITH_A_GPU();
  testing::TempDir locks;
  Subprocess worker(worker_options(locks.path()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the parent's compile
  pipeline::Request request;
  request.candidate.solution = testing::fixture("good/rmsnorm_simple.cu");
  request.target.operator_name = "rmsnorm_h4096";
  request.target.operators_dirs = {testing::source_dir() / "operators"};
  request.target.arch = "sm_90a";
  request.target.use_cache = false;
  request.mode = Mode::kCheck;
  SubprocessResult r = worker.finish(pipeline::request_json(request).dump());
  EXPECT_EQ(r.exit_code, 3) << r.describe() << "\n" << r.stderr_data;
  EXPECT_GE(r.input_seconds, 0.2);
  nlohmann::json line = nlohmann::json::parse(r.stdout_data, nullptr, false);
  ASSERT_TRUE(line.is_object()) << r.stdout_data;
  EXPECT_EQ(line["event"], "error");
  EXPECT_EQ(line["code"], 3);
  EXPECT_TRUE(fs::exists(locks.path() / "device-0.lock"));
  EXPECT_TRUE(lock_free(locks.path() / "device-0.lock"));
}

}  // namespace
}  // namespace kharness
