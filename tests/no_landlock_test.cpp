// kharness on a machine without Landlock, made the way container runtimes make one: a seccomp
// filter that answers the Landlock system calls with EPERM, installed in a child before it runs
// the built binary (and inherited by kharness's own compile worker). What must hold there: doctor
// says why, every command that compiles a file the user may not have written refuses (exit 3)
// unless --allow-unsandboxed, and with the override the source rules, the safe opens and the
// scrubbed environment still keep host files and kharness's environment out of every output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.hpp"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

namespace kharness {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

constexpr const char* kCanaryName = "HF_TOKEN";
constexpr const char* kCanary = "hf-canary-51c0ffee";
constexpr const char* kHostSecret = "HOST-ONLY-SECRET-93ab";

const char* kPlan = R"(/* kharness
{ "launches": [ { "kernel": "k", "grid": [1], "block": [32], "args": ["y"] } ] }
*/
)";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The three Landlock calls answer EPERM, as Docker's and containerd's older default profiles do.
bool deny_landlock() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_landlock_create_ruleset, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_landlock_add_rule, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_landlock_restrict_self, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                               filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Runs `kharness ARGS` (stdout and stderr together) in a child with the filter installed and the
// canary in its environment.
testing::CommandResult kharness_without_landlock(const std::string& args) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, "pipe failed"};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    if (!deny_landlock()) ::_exit(120);
    ::setenv(kCanaryName, kCanary, 1);
    std::string command = std::string("exec '") + KHARNESS_BINARY + "' " + args;
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

TEST(WithoutLandlock, DoctorSaysWhyAndTheFilterIsReal) {
  auto r = kharness_without_landlock("doctor --json");
  ASSERT_NE(r.exit_code, 120) << "seccomp filter could not be installed";
  nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["sandbox"]["landlock_available"], false) << r.out;
  EXPECT_TRUE(has(r.out, "seccomp")) << r.out;
  // The same binary outside the filter has Landlock (sandbox_test's Landlock.WorksOnThisKernel).
  auto plain = testing::kharness("doctor --json");
  EXPECT_TRUE(has(plain.out, "\"landlock_available\": true")) << plain.out;
}

TEST(WithoutLandlock, EveryCommandThatCompilesAFileRefusesUnlessOverridden) {
  TempDir tmp;
  write(tmp.path() / "k.cu",
        std::string(kPlan) + "extern \"C\" __global__ void k(float* y) { y[0] = 1; }\n");
  write(tmp.path() / "subs" / "team" / "k.cu",
        std::string(kPlan) + "extern \"C\" __global__ void k(float* y) { y[0] = 1; }\n");
  const std::string k = q(tmp.path() / "k.cu");
  for (const std::string& args :
       {"compile --no-cache " + k, "check " + k + " --operator rmsnorm_h4096",
        "validate " + k + " --operator rmsnorm_h4096",
        "export " + k + " --operator rmsnorm_h4096 --fib " + q(tmp.path() / "sol.json"),
        "score " + q(tmp.path() / "subs") + " --operator rmsnorm_h4096",
        std::string("operators check rmsnorm_h4096")}) {
    auto r = kharness_without_landlock("--archive " + q(tmp.path() / "archive") + " " + args);
    EXPECT_EQ(r.exit_code, 3) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "--allow-unsandboxed")) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "Landlock")) << args << "\n" << r.out;
  }
  // With the override the compile runs, and says it ran without the file sandbox.
  auto r = kharness_without_landlock("compile --no-cache --allow-unsandboxed " + k);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "without the Landlock file sandbox")) << r.out;
}

TEST(WithoutLandlock, OverriddenTheRulesOpensAndScrubStillKeepTheHostOut) {
  TempDir tmp;
  const fs::path secret = tmp.path() / "host" / "secret.txt";
  write(secret, std::string("#define SECRET ") + kHostSecret + "\n");
  const fs::path subs = tmp.path() / "subs";
  // Includes of host files in every spelling the rules know, and a kernel that quotes whatever it
  // can reach at compile time into its log.
  write(subs / "abs.cu", std::string(kPlan) + "#include \"" + secret.string() +
                             "\"\nextern \"C\" __global__ void k(float* y) {}\n");
  write(subs / "digraph.cu", std::string(kPlan) +
                                 "%:include \"/proc/self/environ\"\n"
                                 "extern \"C\" __global__ void k(float* y) {}\n");
  write(subs / "has_include.cu",
        std::string(kPlan) + "#if __has_include(\"" + secret.string() +
            "\")\n#warning found\n#endif\nextern \"C\" __global__ void k(float* y) {}\n");
  write(subs / "separator.cu", std::string(kPlan) + "int x = 0' /*';\n#include \"" +
                                   secret.string() +
                                   "\"\n/*'*/\nextern \"C\" __global__ void k(float* y) {}\n");
  write(subs / "probe.cu", std::string(kPlan) +
                               "#warning probing\n"
                               "extern \"C\" __global__ void k(float* y) { y[0] = 1; }\n");
  // A family layout whose shared header is a link to the host file.
  write(subs / "_families" / "fam" / "sol.cu", std::string(kPlan) +
                                                   "#include \"../_shared/a.cuh\"\n"
                                                   "extern \"C\" __global__ void k(float* y) {}\n");
  fs::create_directories(subs / "_families" / "_shared");
  fs::create_symlink(secret, subs / "_families" / "_shared" / "a.cuh");
  const fs::path archive = tmp.path() / "archive";
  for (const char* file :
       {"abs.cu", "digraph.cu", "has_include.cu", "separator.cu", "_families/fam/sol.cu"}) {
    auto r = kharness_without_landlock("--archive " + q(archive) +
                                       " compile --no-cache --json --allow-unsandboxed " +
                                       q(subs / file));
    EXPECT_NE(r.exit_code, 0) << file << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "REJECTED") || has(r.out, "refus") ||
                has(r.out, "links are not followed"))
        << file << "\n"
        << r.out;
    EXPECT_FALSE(has(r.out, kHostSecret)) << file << "\n" << r.out;
    EXPECT_FALSE(has(r.out, kCanary)) << file << "\n" << r.out;
  }
  auto probe = kharness_without_landlock("compile --no-cache --json --allow-unsandboxed " +
                                         q(subs / "probe.cu"));
  EXPECT_EQ(probe.exit_code, 0) << probe.out;
  EXPECT_TRUE(has(probe.out, "probing")) << probe.out;
  EXPECT_FALSE(has(probe.out, kCanary)) << probe.out;
  // score walks the folder (no GPU here: its verdicts stop at the device, after the rules); no
  // byte of the host file or the environment reaches its output or the archive.
  auto score = kharness_without_landlock("--archive " + q(archive) + " score " + q(subs) +
                                         " --operator rmsnorm_h4096 --allow-unsandboxed --json");
  EXPECT_FALSE(has(score.out, kHostSecret)) << score.out;
  EXPECT_FALSE(has(score.out, kCanary)) << score.out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(archive, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(has(text, kHostSecret)) << it->path();
    EXPECT_FALSE(has(text, kCanary)) << it->path();
  }
}

}  // namespace
}  // namespace kharness
