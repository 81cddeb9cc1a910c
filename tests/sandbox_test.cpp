// Untrusted submissions cannot read host files, leak the environment, stall or reach
// out of their folder. The real thing throughout: Landlock on this kernel, NVRTC in its sandboxed
// child, the built kharness binary, FIFOs and symlinks on disk.
#include "kharness/sandbox.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/file.hpp"
#include "kharness/solution.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {
namespace fs = std::filesystem;
using testing::kharness;
using testing::TempDir;

// A secret in kharness's environment that no child may see.
constexpr const char* kCanaryName = "ANTHROPIC_API_KEY";
constexpr const char* kCanary = "sk-ant-canary-6f1d2e9a";

class Canary : public ::testing::Environment {
 public:
  void SetUp() override { ::setenv(kCanaryName, kCanary, 1); }
};
const auto* const kCanaryEnv = ::testing::AddGlobalTestEnvironment(new Canary);

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const char* kPlan = R"(/* kharness
{ "launches": [ { "kernel": "k", "grid": [1], "block": [32], "args": ["y"] } ] }
*/
)";

// Runs `fn` in a forked child; its exit status.
template <class Fn>
int in_child(Fn fn) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// ---- Landlock itself ----------------------------------------------------------------------------

TEST(Landlock, WorksOnThisKernel) {
  // CI runs on a kernel with Landlock (Debian 12's 6.1 and newer); doctor says so.
  sandbox::LandlockSupport s = sandbox::landlock_support();
  ASSERT_TRUE(s.available()) << s.reason;
  EXPECT_GE(s.abi, 1);
  auto r = kharness("doctor --json");
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["sandbox"]["landlock_available"], true) << r.out;
  EXPECT_EQ(j["sandbox"]["landlock_abi"], s.abi);
}

TEST(Landlock, ChildCannotReadOrWriteOutsideItsRules) {
  TempDir tmp;
  write(tmp.path() / "allowed" / "a.txt", "allowed");
  fs::create_directories(tmp.path() / "out");
  // 0: all as expected; 1..: which check failed.
  int rc = in_child([&] {
    sandbox::FsRules rules;
    rules.read = sandbox::mapped_files();
    rules.read.push_back(tmp.path() / "allowed");
    for (const char* system_dir : {"/bin", "/usr/bin", "/lib", "/lib64", "/usr/lib"})
      rules.read.emplace_back(system_dir);  // so that a shell can start, below
    rules.write.push_back(tmp.path() / "out");
    if (!sandbox::restrict_self(rules).empty()) return 1;
    errno = 0;
    if (::open("/etc/passwd", O_RDONLY) >= 0 || errno != EACCES) return 2;
    if (::open("/proc/self/environ", O_RDONLY) >= 0) return 3;
    if (::open((tmp.path() / "allowed" / "a.txt").c_str(), O_RDONLY) < 0) return 4;
    if (::open((tmp.path() / "allowed" / "b.txt").c_str(), O_WRONLY | O_CREAT, 0644) >= 0)
      return 5;  // readable is not writable
    if (::open((tmp.path() / "out" / "c.txt").c_str(), O_WRONLY | O_CREAT, 0644) < 0) return 6;
    if (::open("/tmp/kharness-landlock-escape", O_WRONLY | O_CREAT, 0644) >= 0) return 7;
    // The restriction is inherited: a shell started now cannot read the file either.
    if (std::system("true") != 0) return 8;
    if (std::system("cat /etc/passwd >/dev/null 2>&1") == 0) return 9;
    return 0;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists("/tmp/kharness-landlock-escape"));
}

// ---- NVRTC in the sandbox: what the rules miss, the OS refuses ------------------------------

NvrtcOutput compile_in_sandbox(const std::string& text, CompileLimits limits = {}) {
  const fs::path include = default_cuda_include_dir();
  std::vector<fs::path> dirs = {include, include / "cccl"};
  std::string limit;
  return sandboxed_nvrtc_compile(
      text, "k.cu", {},
      {"--gpu-architecture=sm_90a", "-std=c++17", "-I" + dirs[0].string(), "-I" + dirs[1].string()},
      dirs, limits, limit);
}

TEST(CompileSandbox, CompilesAGoodKernel) {
  NvrtcOutput out = compile_in_sandbox(
      "#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n"
      "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n");
  EXPECT_EQ(out.result, NVRTC_SUCCESS) << out.log;
  EXPECT_FALSE(out.cubin.empty());
  EXPECT_NE(out.ptx.find(".entry k"), std::string::npos);
}

TEST(CompileSandbox, HostFilesCannotBeIncludedEvenPastTheRules) {
  // The NVRTC layer directly, below the rules: only Landlock stands between these and the host.
  for (const char* file : {"/etc/passwd", "/proc/self/environ", "/etc/hostname"}) {
    NvrtcOutput out =
        compile_in_sandbox(std::string("#include \"") + file + "\"\n__global__ void k() {}\n");
    EXPECT_NE(out.result, NVRTC_SUCCESS) << file;
    EXPECT_EQ(out.log.find("root:"), std::string::npos) << out.log;
    EXPECT_EQ(out.log.find(kCanary), std::string::npos) << out.log;
    EXPECT_NE(out.log.find("cannot open source file"), std::string::npos) << out.log;
  }
}

TEST(CompileSandbox, DoublingDefinesStopAtTheTimeLimit) {
  // 636 bytes that keep NVRTC busy for minutes.
  std::string text = "#define A0 x\n";
  for (int i = 1; i <= 40; ++i)
    text += "#define A" + std::to_string(i) + " A" + std::to_string(i - 1) + " A" +
            std::to_string(i - 1) + "\n";
  text += "__global__ void k() { int A40; }\n";
  CompileLimits limits;
  limits.timeout_seconds = 3;
  std::string limit;
  auto start = std::chrono::steady_clock::now();
  NvrtcOutput out = sandboxed_nvrtc_compile(text, "k.cu", {}, {"--gpu-architecture=sm_90a"},
                                            {default_cuda_include_dir()}, limits, limit);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(out.result, NVRTC_SUCCESS);
  EXPECT_FALSE(limit.empty()) << out.log;  // "time", or "memory" if the expansion fills it first
  EXPECT_LT(seconds, 3 + 2.5) << out.log;  // the limit, the kill grace and the start
  EXPECT_NE(out.log.find("k.cu(0): error:"), std::string::npos) << out.log;
}

TEST(CompileSandbox, CompileCommandStopsTheDoublingFileAndSaysWhy) {
  TempDir tmp;
  std::string text = kPlan;
  text += "#define A0 x\n";
  for (int i = 1; i <= 40; ++i)
    text += "#define A" + std::to_string(i) + " A" + std::to_string(i - 1) + " A" +
            std::to_string(i - 1) + "\n";
  text += "extern \"C\" __global__ void k(float* y) { int A40; }\n";
  write(tmp.path() / "doubling.cu", text);
  auto start = std::chrono::steady_clock::now();
  auto r = kharness("--compile-timeout 2 compile --no-cache --json '" +
                    (tmp.path() / "doubling.cu").string() + "'");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("\"COMPILE_ERROR\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"limit\""), std::string::npos) << r.out;
  EXPECT_LT(seconds, 2 + 6) << r.out;
}

// ---- compile --json never shows kharness's environment ------------------------------------

TEST(CompileSandbox, DigraphIncludesOfHostFilesAreRejectedAndLeakNothing) {
  TempDir tmp;
  for (const char* file : {"/proc/self/environ", "/etc/passwd"}) {
    write(tmp.path() / "leak.cu", std::string(kPlan) + "%:include \"" + file +
                                      "\"\nextern \"C\" __global__ void k(float* y) {}\n");
    auto r = kharness("compile --no-cache --json '" + (tmp.path() / "leak.cu").string() + "'");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("\"REJECTED\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("include_path"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(kCanary), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("root:"), std::string::npos) << r.out;
  }
}

TEST(CompileSandbox, KernelsCompiledWithTheEnvironmentNeverSeeIt) {
  // A kernel that passes the rules quotes what it can reach at compile time into its log
  // (#warning __FILE__, a long macro expansion); the canary is in kharness's environment.
  TempDir tmp;
  write(tmp.path() / "k.cu", std::string(kPlan) +
                                 "#warning probing\n"
                                 "extern \"C\" __global__ void k(float* y) { y[0] = 1; }\n");
  auto r = kharness("compile --no-cache --json '" + (tmp.path() / "k.cu").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("probing"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(kCanary), std::string::npos) << r.out;
}

TEST(CompileSandbox, DeviceHeapIsRejectedFromThePtx) {
  // new/delete, malloc/free: whatever spelling, the module declares the heap's allocator.
  TempDir tmp;
  for (const char* body : {"struct S { float v; };\nextern \"C\" __global__ void k(float* y) "
                           "{ S* s = new S; s->v = 1; y[0] = s->v; delete s; }\n",
                           "#define ALLOC(n) mal##loc(n)\nextern \"C\" __global__ void k(float* "
                           "y) { float* p = (float*)ALLOC(4); y[0] = *p; }\n"}) {
    write(tmp.path() / "heap.cu", std::string(kPlan) + body);
    auto r = kharness("compile --no-cache '" + (tmp.path() / "heap.cu").string() + "'");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("REJECTED [device_heap]"), std::string::npos) << r.out;
  }
}

TEST(Environment, ScrubbedEnvironmentDropsSecrets) {
  ::setenv("OPENAI_API_KEY", "sk-canary", 1);
  ::setenv("KHARNESS_TEST_TOKEN", "canary", 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  bool path = false, cuda = false;
  for (const auto& [name, value] : sandbox::scrubbed_environment()) {
    EXPECT_NE(name, "OPENAI_API_KEY");
    EXPECT_NE(name, kCanaryName);
    EXPECT_NE(name, "KHARNESS_TEST_TOKEN");
    path = path || name == "PATH";
    cuda = cuda || name == "CUDA_VISIBLE_DEVICES";
  }
  EXPECT_TRUE(path);
  EXPECT_TRUE(cuda);
  EXPECT_TRUE(sandbox::passes_scrub("KHARNESS_OPERATORS"));
  EXPECT_FALSE(sandbox::passes_scrub("AWS_SECRET_ACCESS_KEY"));
  EXPECT_FALSE(sandbox::passes_scrub("GITHUB_TOKEN"));
  ::unsetenv("OPENAI_API_KEY");
  ::unsetenv("KHARNESS_TEST_TOKEN");
}

// ---- Files: FIFOs, symlinks out, definitions as paths ---------------------------------------

TEST(SafeFiles, FifoIsRefusedNotBlockedOn) {
  TempDir tmp;
  fs::path fifo = tmp.path() / "k.cu";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto start = std::chrono::steady_clock::now();
  testing::expect_input_error([&] { read_regular_file(fifo); }, fifo.string(), "FIFO");
  testing::expect_input_error([&] { load_solution(fifo); }, fifo.string(), "FIFO");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2);
  // The command: a one-line input error, at once (timeout guards the test, not kharness).
  auto r = kharness("compile '" + fifo.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("FIFO"), std::string::npos) << r.out;
}

TEST(SafeFiles, FifoAsAFolderSourceFailsFast) {
  TempDir tmp;
  fs::path dir = tmp.path() / "sol";
  write(dir / "solution.json", R"({"sources": ["k.cu"], "launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  ASSERT_EQ(::mkfifo((dir / "k.cu").c_str(), 0644), 0);
  testing::expect_input_error([&] { load_solution(dir); }, "k.cu", "FIFO");
  auto r = kharness("compile '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  // Listed by the folder walk (no "sources"): refused the same way.
  write(dir / "solution.json", R"({"launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  testing::expect_input_error([&] { load_solution(dir); }, "k.cu", "FIFO");
}

TEST(SafeFiles, SizeCapAndDevices) {
  TempDir tmp;
  write(tmp.path() / "big.json", std::string(5000, ' '));
  testing::expect_input_error([&] { read_regular_file(tmp.path() / "big.json", 4096); }, "big.json",
                              "at most");
  testing::expect_input_error([&] { read_regular_file("/dev/zero"); }, "/dev/zero", "device");
  testing::expect_input_error([&] { read_regular_file(tmp.path()); }, tmp.path().string(),
                              "folder");
}

TEST(SafeFiles, FolderSolutionSymlinkOutIsRefused) {
  TempDir tmp;
  fs::path dir = tmp.path() / "sol";
  write(dir / "solution.json", R"({"sources": ["k.cu", "secret.cuh"], "launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  write(dir / "k.cu", "#include \"secret.cuh\"\n__global__ void k() {}\n");
  write(tmp.path() / "outside.txt", "host secret\n");
  fs::create_symlink(tmp.path() / "outside.txt", dir / "secret.cuh");
  testing::expect_input_error([&] { load_solution(dir); }, "secret.cuh", "symlink");
  auto r = kharness("compile '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.out.find("host secret"), std::string::npos) << r.out;
  // A symlink that stays inside is refused too: no link of a submission is followed.
  fs::remove(dir / "secret.cuh");
  write(dir / "real.cuh", "// inside\n");
  fs::create_symlink("real.cuh", dir / "secret.cuh");
  testing::expect_input_error([&] { load_solution(dir); }, "secret.cuh", "symlink");
  // Found by the folder walk (no "sources") and leading out: refused too.
  fs::remove(dir / "secret.cuh");
  fs::create_symlink("/etc/passwd", dir / "passwd.cuh");
  write(dir / "solution.json", R"({"launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  testing::expect_input_error([&] { load_solution(dir); }, "passwd.cuh", "symlink");
}

TEST(SafeFiles, PlanDefinitionIsANameNeverAPath) {
  TempDir tmp;
  for (const char* def : {"/tmp/x.json", "../ops/x", "x.json", "ops/rmsnorm_h4096"}) {
    fs::path file = tmp.path() / "k.cu";
    write(file, std::string("/* kharness {\"definition\": \"") + def +
                    "\", \"launches\": [{\"kernel\": \"k\", \"grid\": [1], \"block\": [32], "
                    "\"args\": []}]} */\n__global__ void k() {}\n");
    testing::expect_input_error([&] { load_solution(file); }, "definition", "operator name");
    auto r = kharness("compile '" + file.string() + "'");
    EXPECT_EQ(r.exit_code, 2) << def << r.out;
    EXPECT_NE(r.out.find("operator name"), std::string::npos) << r.out;
  }
  // FlashInfer-Bench Solution JSON: its top-level "definition" too.
  write(tmp.path() / "fib.json", R"({"name": "x", "definition": "/tmp/x.json",
    "spec": {"language": "cuda"}, "sources": [{"path": "k.cu", "content":
    "/* kharness {\"launches\": [{\"kernel\": \"k\", \"grid\": [1], \"block\": [32], \"args\": []}]} */\n__global__ void k() {}\n"}]})");
  testing::expect_input_error([&] { load_solution(tmp.path() / "fib.json"); }, "definition",
                              "operator name");
}

}  // namespace
}  // namespace kharness
