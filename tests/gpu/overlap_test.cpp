// The pipeline's overlap on a real GPU, through the built binary: the worker starts before the
// parent compiles (its start-up hidden behind the compile), the two compiles run at once, the
// worker loads its request while its context is made, and ends right after its verdict line. The
// phases of the verdict show each part; the tests print them, for the record of where the time
// goes. Every test skips without a GPU.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct KharnessRun {
  int exit_code = -1;
  json verdict;
  std::string out;
  double seconds = 0;
};

// `kharness MODE FILE --operator rmsnorm_h4096 ARGS --json` with its own archive and lock folder.
KharnessRun run_kharness(const std::string& mode, const std::string& file, const std::string& args,
                         const fs::path& dir) {
  std::string command = "KHARNESS_ARCHIVE='" + (dir / "archive").string() +
                        "' KHARNESS_LOCK_DIR='" + (dir / "locks").string() + "' '" +
                        KHARNESS_BINARY + "' " + mode + " '" + file +
                        "' --operator rmsnorm_h4096 " + args + " --json 2>/dev/null";
  const auto start = std::chrono::steady_clock::now();
  testing::CommandResult r = testing::run_command(command);
  KharnessRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.exit_code = r.exit_code;
  run.out = r.out;
  run.verdict = json::parse(r.out, nullptr, false);
  return run;
}

// True when no lock file in `dir` is held by anyone.
bool locks_free(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int fd = ::open(entry.path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    ::close(fd);
    if (!free) return false;
  }
  return true;
}

// Processes whose environment names `value` (our lock folder: a worker of this test's run).
int processes_with(const std::string& value) {
  int n = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream env(std::string("/proc/") + e->d_name + "/environ");
    std::string text((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (text.find(value) != std::string::npos) ++n;
  }
  ::closedir(proc);
  return n;
}

TEST(Overlap, ValidatePhasesShowTheWorkerStartedDuringTheCompile) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const std::string seed = (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string();
  KharnessRun run = run_kharness("validate", seed, "--no-cache --seed 1", dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.out.substr(0, 4000);
  ASSERT_TRUE(run.verdict.is_object()) << run.out.substr(0, 4000);
  EXPECT_EQ(run.verdict["status"], "PASSED");
  const json& phases = run.verdict["phases"];
  for (const char* key :
       {"parent_compile", "worker_head_start", "worker_process", "worker_request_wait",
        "worker_context", "worker_load_compile", "worker_ready_wait", "worker_teardown",
        "worker_run", "worker_exit", "gpu_lock_wait", "timing"}) {
    EXPECT_TRUE(phases.contains(key)) << key << " missing from " << phases.dump();
  }
  // The worker was up during the whole compile, and its head start is that compile (plus the
  // verdict's environment, read alongside).
  EXPECT_GE(phases.value("worker_head_start", 0.0), phases.value("parent_compile", 1.0) * 0.9);
  // Its exit after the verdict line is _exit, not the runtime's teardown (the context went
  // before the line: worker_teardown).
  EXPECT_LT(phases.value("worker_exit", 1.0), 0.25) << phases.dump();
  EXPECT_TRUE(locks_free(dir.path() / "locks"));
  std::cout << "validate wall " << run.seconds << " s; phases " << phases.dump() << "\n";
}

// The candidate does not compile: the worker started before the compile is closed without a
// request. The verdict is the compile error's, no worker is left running and no lock held.
TEST(Overlap, ACompileErrorClosesTheEarlyWorker) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  KharnessRun run = run_kharness("check", testing::fixture("bad/syntax_error_line37.cu").string(),
                                 "--no-cache", dir.path());
  EXPECT_EQ(run.exit_code, 1) << run.out.substr(0, 4000);
  ASSERT_TRUE(run.verdict.is_object()) << run.out.substr(0, 4000);
  EXPECT_EQ(run.verdict["status"], "COMPILE_ERROR");
  EXPECT_EQ(run.verdict["worker_stderr"], "");
  EXPECT_EQ(processes_with("KHARNESS_LOCK_DIR=" + (dir.path() / "locks").string()), 0);
  EXPECT_TRUE(locks_free(dir.path() / "locks"));
  std::cout << "compile error wall " << run.seconds << " s\n";
}

}  // namespace
}  // namespace kharness
