// The compile stage end to end with the real NVRTC (no GPU needed): targets, diagnostics,
// toolkit headers, rules before NVRTC, interface checks on real PTX, and the compile cache.
#include "kharness/compile.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kharness/arch.hpp"
#include "kharness/definition.hpp"
#include "kharness/error.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {
namespace fs = std::filesystem;

Definition rms_definition() {
  return parse_definition(nlohmann::ordered_json::parse(R"({
    "name": "rms_test", "op_type": "rmsnorm",
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
    "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
               "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
               "eps": {"shape": null, "dtype": "float32"}},
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}}
  })"),
                          "rms_test.json");
}

std::vector<Workload> rms_workloads(const Definition& d) {
  std::vector<Workload> out;
  int n = 0;
  for (int b : {1, 7, 128}) {
    out.push_back(
        parse_workload(nlohmann::json{{"uuid", "uuid-" + std::to_string(n++)},
                                      {"axes", {{"batch_size", b}}},
                                      {"inputs", {{"eps", {{"type", "scalar"}, {"value", 1e-5}}}}}},
                       d, "workloads.jsonl"));
  }
  return out;
}

const char* kRmsBody = R"(
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm_kernel(const __nv_bfloat16* __restrict__ x,
                                          const __nv_bfloat16* __restrict__ w,
                                          __nv_bfloat16* __restrict__ y, float eps,
                                          int batch_size) {
  constexpr int kHidden = 4096;
  __shared__ float partial[8];
  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * kHidden;
  float sum = 0.f;
  for (int i = threadIdx.x; i < kHidden; i += blockDim.x) {
    float v = __bfloat162float(xr[i]);
    sum += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) partial[0] = s;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / kHidden + eps);
  for (int i = threadIdx.x; i < kHidden; i += blockDim.x) {
    y[static_cast<size_t>(row) * kHidden + i] =
        __float2bfloat16(__bfloat162float(xr[i]) * scale * __bfloat162float(w[i]));
  }
}
)";

std::string plan_comment(const std::string& launch_fields, const std::string& extra = "") {
  return R"(/* kharness {"definition":"rms_test","launches":[{)" + launch_fields + "}]" + extra +
         "} */";
}

const char* kRmsLaunch = R"("kernel":"rmsnorm_kernel","grid":["batch_size",1,1],"block":[256,1,1],)"
                         R"("args":["hidden_states","weight","output","eps","batch_size"])";

Solution rms_solution(const std::string& launch = kRmsLaunch, const std::string& extra = "",
                      const std::string& body = kRmsBody) {
  return parse_single_file_solution(plan_comment(launch, extra) + body, "rms.cu");
}

CompileOptions no_cache(const std::string& arch = "sm_90a") {
  CompileOptions o;
  o.arch = arch;
  return o;
}

std::string violations_text(const CompileResult& r) {
  std::string out;
  for (const auto& v : r.violations) {
    out += v.rule + ": " + v.message + "\n";
  }
  return out + r.log;
}

TEST(CompileTest, GoodKernelForEveryTarget) {
  auto d = rms_definition();
  auto w = rms_workloads(d);
  auto s = rms_solution();
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"}) {
    auto r = compile_solution(s, &d, &w, no_cache(arch));
    ASSERT_TRUE(r.ok()) << arch << "\n" << violations_text(r);
    EXPECT_EQ(r.arch, arch);
    EXPECT_FALSE(r.cache_hit);
    EXPECT_EQ(r.cubin.substr(0, 4), std::string("\x7f"
                                                "ELF"))
        << arch;
    EXPECT_NE(r.ptx.find(std::string(".target ") + arch), std::string::npos) << arch;
    ASSERT_EQ(r.kernels.size(), 1u);
    const KernelInfo* k = r.find_kernel("rmsnorm_kernel");
    ASSERT_NE(k, nullptr);
    EXPECT_GT(k->registers, 0) << arch;
    EXPECT_EQ(k->barriers, 1) << arch;
    EXPECT_EQ(k->shared_bytes, 32) << arch;
    EXPECT_EQ(k->spill_store_bytes, 0) << arch;
    ASSERT_EQ(k->params.size(), 5u);
    EXPECT_EQ(k->params[3].type, "f32");
    EXPECT_EQ(k->params[4].size, 4u);
    EXPECT_NE(r.log.find("ptxas info"), std::string::npos);
    EXPECT_FALSE(r.nvrtc_version.empty());
    EXPECT_EQ(r.cache_key.size(), 64u);
  }
}

TEST(CompileTest, NormalizeArch) {
  for (const char* form : {"sm_90a", "90a", "sm90a", "compute_90a", " SM_90A "}) {
    EXPECT_EQ(normalize_arch(form), "sm_90a") << form;
  }
  EXPECT_EQ(normalize_arch("100a"), "sm_100a");
  EXPECT_EQ(normalize_arch("sm_120"), "sm_120");
  EXPECT_EQ(normalize_arch("compute_80"), "sm_80");
  auto archs = supported_archs();
  for (const char* a : {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120", "sm_120a"}) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
  }
  EXPECT_EQ(std::find(archs.begin(), archs.end(), "sm_89a"), archs.end());
  try {
    normalize_arch("sm_77");
    FAIL() << "sm_77 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(e.where(), "--arch");
    EXPECT_NE(e.message().find("unknown target 'sm_77' (supported: "), std::string::npos);
    EXPECT_NE(e.message().find("sm_90a"), std::string::npos);
  }
  EXPECT_THROW(normalize_arch("banana"), Error);
  EXPECT_THROW(normalize_arch("sm_89a"), Error);
  EXPECT_THROW(compile_solution(rms_solution(), nullptr, nullptr, no_cache("sm_77")), Error);
}

TEST(CompileTest, SyntaxErrorReportedAtItsLine) {
  std::string text = plan_comment(kRmsLaunch) + "\n";  // line 1
  for (int line = 2; line <= 36; ++line) {
    text += "// filler line " + std::to_string(line) + "\n";
  }
  text += "extern \"C\" __global__ void rmsnorm_kernel(float* x) { x[0] = 1 }\n";  // line 37
  auto s = parse_single_file_solution(text, "bad_kernel.cu");
  auto r = compile_solution(s, nullptr, nullptr, no_cache());
  EXPECT_EQ(r.status, Status::kCompileError);
  ASSERT_FALSE(r.diagnostics.empty()) << r.log;
  EXPECT_EQ(r.diagnostics[0].file, "bad_kernel.cu");
  EXPECT_EQ(r.diagnostics[0].line, 37);
  EXPECT_EQ(r.diagnostics[0].severity, Diagnostic::Severity::kError);
  EXPECT_NE(r.log.find("bad_kernel.cu(37): error"), std::string::npos) << r.log;
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_TRUE(r.kernels.empty());
}

TEST(CompileTest, ToolkitHeadersCompile) {
  struct Case {
    const char* header;
    const char* body;
  };
  const Case cases[] = {
      {"cuda_fp16.h", "x[0] = __half2float(__float2half(x[1]));"},
      {"cuda_bf16.h", "x[0] = __bfloat162float(__float2bfloat16(x[1]));"},
      {"cuda_fp8.h", "__nv_fp8_e4m3 v(x[1]); x[0] = float(v);"},
      {"cooperative_groups.h",
       "namespace cg = cooperative_groups; auto b = cg::this_thread_block(); b.sync(); "
       "x[b.thread_rank()] = 1.f;"},
      {"cuda/barrier",
       "__shared__ cuda::barrier<cuda::thread_scope_block> bar;\n"
       "if (threadIdx.x == 0) init(&bar, blockDim.x);\n__syncthreads();\n"
       "x[threadIdx.x] += 1.f;\nbar.arrive_and_wait();"},
      {"cuda/pipeline",
       "__shared__ float s[32];\nauto pipe = cuda::make_pipeline();\npipe.producer_acquire();\n"
       "cuda::memcpy_async(&s[threadIdx.x % 32], &x[threadIdx.x], sizeof(float), pipe);\n"
       "pipe.producer_commit();\npipe.consumer_wait();\nx[threadIdx.x] = s[threadIdx.x % 32] * 2;\n"
       "pipe.consumer_release();"},
  };
  for (const auto& c : cases) {
    std::string text = plan_comment(R"("kernel":"k","grid":[1],"block":[32],"args":["output"])") +
                       "\n#include <" + c.header + ">\n" +
                       "extern \"C\" __global__ void k(float* x) {\n" + c.body + "\n}\n";
    auto r =
        compile_solution(parse_single_file_solution(text, "h.cu"), nullptr, nullptr, no_cache());
    EXPECT_TRUE(r.ok()) << c.header << "\n" << violations_text(r);
    EXPECT_NE(r.find_kernel("k"), nullptr) << c.header;
  }
}

TEST(CompileTest, FolderSolutionIncludesItsOwnHeader) {
  Solution s;
  s.form = SolutionForm::kFolder;
  s.sources = {
      {"kernel.cu",
       "#include \"include/util.cuh\"\n"
       "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n"},
      {"include/util.cuh",
       "#pragma once\n#include <cuda_fp16.h>\n__device__ inline float twice(float v) { return 2 * "
       "v; }\n"}};
  s.plan = parse_plan(nlohmann::json::parse(
                          R"({"launches":[{"kernel":"k","grid":[1],"block":[32],"args":["x"]}]})"),
                      "solution.json");
  s.plan_source = "solution.json";
  auto r = compile_solution(s, nullptr, nullptr, no_cache());
  ASSERT_TRUE(r.ok()) << violations_text(r);

  // An error in the header is reported in the header, by its solution path.
  s.sources[1].content =
      "#pragma once\n\n__device__ inline float twice(float v) { return 2 * w; }\n";
  r = compile_solution(s, nullptr, nullptr, no_cache());
  EXPECT_EQ(r.status, Status::kCompileError);
  ASSERT_FALSE(r.diagnostics.empty()) << r.log;
  EXPECT_EQ(r.diagnostics[0].file, "include/util.cuh");
  EXPECT_EQ(r.diagnostics[0].line, 3);
}

TEST(CompileTest, QuotedToolkitIncludeIsNotShadowedByFilesOnDisk) {
  // NVRTC looks up "quoted" includes next to the program name on disk first; kharness hands
  // toolkit headers over as <angled> includes so a stray file there cannot stand in for them.
  const fs::path dir = fs::temp_directory_path() / ("kharness-shadow-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "cuda_fp16.h") << "#error \"shadowed by a file on disk\"\n";
  const std::string text =
      plan_comment(R"("kernel":"k","grid":[1],"block":[1],"args":["output"])") +
      "\n#include \"cuda_fp16.h\"\n"
      "extern \"C\" __global__ void k(__half* x) { x[0] = __float2half(1.f); }\n";
  auto r = compile_solution(parse_single_file_solution(text, (dir / "k.cu").string()), nullptr,
                            nullptr, no_cache());
  fs::remove_all(dir);
  EXPECT_TRUE(r.ok()) << violations_text(r);
}

TEST(CompileTest, RejectedSolutionsNeverReachNvrtc) {
  struct Case {
    const char* code;
    const char* rule;
    int line;
  };
  const Case cases[] = {
      {"\n__global__ void rmsnorm_kernel() {}\nint main() { return 0; }\n", "host_code", 3},
      {"\n__global__ void rmsnorm_kernel() {}\n__global__ void go() { rmsnorm_kernel<<<1, 1>>>(); "
       "}\n",
       "host_launch", 3},
      {"\n#include <stdio.h>\n__global__ void rmsnorm_kernel() {}\n", "include_path", 2},
      {"\n#include \"/usr/local/cuda/include/cuda_fp16.h\"\n__global__ void rmsnorm_kernel() {}\n",
       "include_path", 2},
      {"\n#include <cuda/../cuda_fp16.h>\n__global__ void rmsnorm_kernel() {}\n", "include_path",
       2},
      {"\n// only a comment\n", "empty_source", 0},
  };
  for (const auto& c : cases) {
    auto s = parse_single_file_solution(plan_comment(kRmsLaunch) + c.code, "rms.cu");
    auto r = compile_solution(s, nullptr, nullptr, no_cache());
    EXPECT_EQ(r.status, Status::kRejected) << c.code;
    ASSERT_FALSE(r.violations.empty()) << c.code;
    EXPECT_EQ(r.violations[0].rule, c.rule) << c.code;
    EXPECT_EQ(r.violations[0].line, c.line) << c.code;
    EXPECT_EQ(r.violations[0].file, "rms.cu");
    EXPECT_TRUE(r.log.empty()) << "NVRTC ran for a rejected solution: " << c.code;
  }
}

TEST(CompileTest, PlanRulesUseTheDefinitionAndWorkloads) {
  auto d = rms_definition();
  auto w = rms_workloads(d);
  auto unknown = compile_solution(
      rms_solution(R"("kernel":"rmsnorm_kernel","grid":["batchsize"],"block":[256],)"
                   R"("args":["hidden_states","weight","output","eps","batch_size"])"),
      &d, &w, no_cache());
  EXPECT_EQ(unknown.status, Status::kRejected);
  ASSERT_EQ(unknown.violations.size(), 1u);
  EXPECT_EQ(unknown.violations[0].rule, "unknown_axis");
  EXPECT_EQ(unknown.violations[0].file, "rms.cu");  // where the plan is
  EXPECT_EQ(unknown.violations[0].line, 1);

  auto zero = compile_solution(
      rms_solution(
          R"~("kernel":"rmsnorm_kernel","grid":["hidden_size / (batch_size - 1)"],)~"
          R"("block":[256],"args":["hidden_states","weight","output","eps","batch_size"])"),
      &d, &w, no_cache());
  EXPECT_EQ(zero.status, Status::kRejected);
  ASSERT_EQ(zero.violations.size(), 1u);
  EXPECT_EQ(zero.violations[0].rule, "division_by_zero");
  EXPECT_NE(zero.violations[0].message.find("uuid-0"), std::string::npos);
  // Without the definition the same plan cannot be evaluated and compiles.
  EXPECT_TRUE(
      compile_solution(
          rms_solution(
              R"~("kernel":"rmsnorm_kernel","grid":["hidden_size / (batch_size - 1)"],)~"
              R"("block":[256],"args":["hidden_states","weight","output","eps","batch_size"])"),
          nullptr, nullptr, no_cache())
          .ok());
}

TEST(CompileTest, InterfaceCheckedAgainstRealPtx) {
  auto d = rms_definition();
  auto w = rms_workloads(d);
  auto unknown = compile_solution(
      rms_solution(R"("kernel":"rmsnorm","grid":["batch_size"],"block":[256],)"
                   R"("args":["hidden_states","weight","output","eps","batch_size"])"),
      &d, &w, no_cache());
  EXPECT_EQ(unknown.status, Status::kRejected);
  ASSERT_EQ(unknown.violations.size(), 1u);
  EXPECT_EQ(unknown.violations[0].rule, "unknown_kernel");
  EXPECT_NE(unknown.violations[0].message.find("did you mean 'rmsnorm_kernel'"), std::string::npos);
  EXPECT_FALSE(unknown.cubin.empty());  // the module is kept for inspection

  auto count = compile_solution(
      rms_solution(R"("kernel":"rmsnorm_kernel","grid":["batch_size"],"block":[256],)"
                   R"("args":["hidden_states","weight","output","batch_size"])"),
      &d, &w, no_cache());
  EXPECT_EQ(count.status, Status::kRejected);
  ASSERT_EQ(count.violations.size(), 1u);
  EXPECT_EQ(count.violations[0].rule, "param_mismatch");
  EXPECT_NE(count.violations[0].message.find("takes 5 parameters but the plan passes 4"),
            std::string::npos);

  // Axis and scalar swapped: batch_size goes to the float parameter.
  auto swapped = compile_solution(
      rms_solution(R"("kernel":"rmsnorm_kernel","grid":["batch_size"],"block":[256],)"
                   R"("args":["hidden_states","weight","output","batch_size","eps"])"),
      &d, &w, no_cache());
  EXPECT_EQ(swapped.status, Status::kRejected);
  ASSERT_EQ(swapped.violations.size(), 2u);
  EXPECT_EQ(swapped.violations[0].message,
            "launch 0: arg 3 'batch_size' is an axis (int32/int64) but parameter 3 of "
            "rmsnorm_kernel is .f32 (4 bytes)");
  EXPECT_NE(swapped.violations[1].message.find("arg 4 'eps' is a float32 scalar input"),
            std::string::npos);

  // A pointer argument where the kernel has a 4-byte parameter: literal size mismatch.
  auto literal = compile_solution(
      rms_solution(R"("kernel":"rmsnorm_kernel","grid":["batch_size"],"block":[256],)"
                   R"("args":["hidden_states","weight","output",{"float32":1e-5},{"int64":4}])"),
      &d, &w, no_cache());
  EXPECT_EQ(literal.status, Status::kRejected);
  ASSERT_EQ(literal.violations.size(), 1u);
  EXPECT_NE(literal.violations[0].message.find("arg 4 '{int64: 4}' is an int64 literal (8 bytes)"),
            std::string::npos)
      << literal.violations[0].message;
}

TEST(CompileTest, TemplateAndNamespacedKernels) {
  const std::string body = R"(
namespace ns {
template <int N> __global__ void tk(float* x, float v) { x[N] = v; }
__global__ void kern(float* x, long long n) { x[n] = 0; }
}
template __global__ void ns::tk<4>(float*, float);
)";
  for (const char* name : {"ns::tk<4>", "ns::tk", "tk", "kern", "ns::kern"}) {
    std::string args = std::string(name).find("kern") != std::string::npos
                           ? R"(["output", "batch_size"])"
                           : R"(["output", "eps"])";
    auto s = rms_solution(std::string(R"("kernel":")") + name +
                              R"(","grid":["batch_size"],"block":[32],"args":)" + args,
                          "", body);
    auto d = rms_definition();
    auto r = compile_solution(s, &d, nullptr, no_cache());
    EXPECT_TRUE(r.ok()) << name << "\n" << violations_text(r);
    ASSERT_EQ(r.kernels.size(), 2u);
  }
}

TEST(CompileTest, CompileOptionsAllowList) {
  const std::string body = R"(
#if __cplusplus < 202002L
#error "not C++20"
#endif
static_assert(SCALE == 3, "macro from the plan");
extern "C" __global__ void k(float* x) { x[0] = SCALE * __expf(x[1]); }
)";
  const std::string launch = R"("kernel":"k","grid":[1],"block":[1],"args":["output"])";
  auto ok = compile_solution(
      rms_solution(
          launch,
          R"(,"compile_options":["-DSCALE=3","--use_fast_math","-std=c++20","--maxrregcount=64","-ftz=true"])",
          body),
      nullptr, nullptr, no_cache());
  EXPECT_TRUE(ok.ok()) << violations_text(ok);

  // Every allowed spelling is one NVRTC accepts.
  for (const char* allowed : {"--use_fast_math",
                              "-use_fast_math",
                              "--extra-device-vectorization",
                              "-restrict",
                              "--restrict",
                              "-lineinfo",
                              "--generate-line-info",
                              "-G",
                              "--device-debug",
                              "-w",
                              "--disable-warnings",
                              "--device-as-default-execution-space",
                              "-default-device",
                              "--define-macro=UNUSED=1",
                              "-UUNUSED",
                              "--undefine-macro=UNUSED",
                              "--std=c++20",
                              "-ftz=true",
                              "--ftz=false",
                              "-prec-div=false",
                              "--prec-div=true",
                              "-prec-sqrt=false",
                              "--prec-sqrt=true",
                              "-fmad=false",
                              "--fmad=true",
                              "-maxrregcount=32",
                              "-dopt=on",
                              "--dopt=on",
                              "--Ofast-compile=max",
                              "-Ofc=min",
                              "-diag-suppress=177",
                              "--diag-suppress=177",
                              "-diag-error=177",
                              "--diag-error=177",
                              "-diag-warn=177",
                              "--diag-warn=177"}) {
    auto r = compile_solution(
        rms_solution(
            launch,
            std::string(R"(,"compile_options":["-DSCALE=3","-std=c++20",")") + allowed + "\"]",
            body),
        nullptr, nullptr, no_cache());
    EXPECT_TRUE(r.ok()) << allowed << "\n" << violations_text(r);
  }

  for (const char* bad : {"-I/etc", "--include-path=/etc", "-include", "--pre-include=/etc/passwd",
                          "-Xptxas=-O0", "--fdevice-time-trace=/tmp/x", "-rdc=true",
                          "--gpu-architecture=sm_80", "--unknown-thing"}) {
    auto r = compile_solution(
        rms_solution(launch, std::string(R"(,"compile_options":["-DSCALE=3",")") + bad + "\"]",
                     body),
        nullptr, nullptr, no_cache());
    EXPECT_EQ(r.status, Status::kRejected) << bad;
    ASSERT_EQ(r.violations.size(), 1u) << bad;
    EXPECT_EQ(r.violations[0].rule, "compile_option");
    EXPECT_NE(r.violations[0].message.find(bad), std::string::npos);
    EXPECT_TRUE(r.log.empty());
  }
}

// ---------------------------------------------------------------------------------------------

class CompileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kharness-cache-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CompileOptions cached(const std::string& arch = "sm_90a") {
    CompileOptions o;
    o.arch = arch;
    o.cache_dir = dir_;
    return o;
  }
  fs::path entry(const std::string& key) { return dir_ / key.substr(0, 2) / key; }
  static std::size_t count_files(const fs::path& dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         it != fs::recursive_directory_iterator(); ++it) {
      if (it->is_regular_file()) {
        ++n;
      }
    }
    return n;
  }

  fs::path dir_;
};

TEST_F(CompileCache, HitReturnsTheSameModuleQuickly) {
  auto d = rms_definition();
  auto w = rms_workloads(d);
  auto s = rms_solution();
  auto first = compile_solution(s, &d, &w, cached());
  ASSERT_TRUE(first.ok()) << violations_text(first);
  EXPECT_FALSE(first.cache_hit);
  for (const char* f : {"kernel.ptx", "kernel.cubin", "compile.log", "result.json"}) {
    EXPECT_TRUE(fs::is_regular_file(entry(first.cache_key) / f)) << f;
  }
  for (const auto& e : fs::directory_iterator(entry(first.cache_key).parent_path())) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  }

  const auto start = std::chrono::steady_clock::now();
  auto second = compile_solution(s, &d, &w, cached());
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(second.ok()) << violations_text(second);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_LT(elapsed, 0.05);
  EXPECT_EQ(second.cache_key, first.cache_key);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.ptx, first.ptx);
  EXPECT_EQ(second.log, first.log);
  ASSERT_EQ(second.kernels.size(), 1u);
  EXPECT_EQ(second.kernels[0].registers, first.kernels[0].registers);
  EXPECT_EQ(second.kernels[0].shared_bytes, first.kernels[0].shared_bytes);
  EXPECT_EQ(second.kernels[0].params.size(), first.kernels[0].params.size());
  EXPECT_EQ(second.kernels[0].name, "rmsnorm_kernel");
}

TEST_F(CompileCache, CorruptEntryIsRecompiledAndOverwritten) {
  auto s = rms_solution();
  auto first = compile_solution(s, nullptr, nullptr, cached());
  ASSERT_TRUE(first.ok());
  const fs::path e = entry(first.cache_key);

  std::ofstream(e / "kernel.cubin", std::ios::binary | std::ios::trunc) << "garbage";
  auto second = compile_solution(s, nullptr, nullptr, cached());
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second.cache_hit);
  EXPECT_EQ(second.cubin, first.cubin);

  auto third = compile_solution(s, nullptr, nullptr, cached());
  EXPECT_TRUE(third.cache_hit);
  EXPECT_EQ(third.cubin, first.cubin);

  std::ofstream(e / "result.json", std::ios::trunc) << "{\"format\": 1, \"key\":";
  auto fourth = compile_solution(s, nullptr, nullptr, cached());
  EXPECT_FALSE(fourth.cache_hit);
  EXPECT_EQ(fourth.cubin, first.cubin);
  fs::remove(e / "kernel.ptx");
  auto fifth = compile_solution(s, nullptr, nullptr, cached());
  EXPECT_FALSE(fifth.cache_hit);
  EXPECT_TRUE(compile_solution(s, nullptr, nullptr, cached()).cache_hit);
}

TEST_F(CompileCache, KeyDependsOnArchSourcesAndOptions) {
  auto s = rms_solution();
  auto a = compile_solution(s, nullptr, nullptr, cached("sm_90a"));
  auto b = compile_solution(s, nullptr, nullptr, cached("sm_100a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a.cache_key, b.cache_key);
  EXPECT_FALSE(b.cache_hit);
  EXPECT_NE(a.cubin, b.cubin);

  auto opts = cached("sm_90a");
  opts.line_info = false;
  auto c = compile_solution(s, nullptr, nullptr, opts);
  EXPECT_NE(c.cache_key, a.cache_key);
  EXPECT_FALSE(c.cache_hit);

  auto changed = rms_solution(kRmsLaunch, "", std::string(kRmsBody) + "\n// changed\n");
  auto d = compile_solution(changed, nullptr, nullptr, cached("sm_90a"));
  EXPECT_NE(d.cache_key, a.cache_key);
  EXPECT_FALSE(d.cache_hit);
  EXPECT_TRUE(compile_solution(s, nullptr, nullptr, cached("sm_90a")).cache_hit);
}

TEST_F(CompileCache, CompileErrorsAreCachedAndRulesRerunOnHit) {
  auto bad =
      rms_solution(kRmsLaunch, "", "extern \"C\" __global__ void rmsnorm_kernel() { oops }\n");
  auto first = compile_solution(bad, nullptr, nullptr, cached());
  EXPECT_EQ(first.status, Status::kCompileError);
  auto second = compile_solution(bad, nullptr, nullptr, cached());
  EXPECT_EQ(second.status, Status::kCompileError);
  EXPECT_TRUE(second.cache_hit);
  ASSERT_EQ(second.diagnostics.size(), first.diagnostics.size());
  EXPECT_EQ(second.diagnostics[0].line, first.diagnostics[0].line);
  EXPECT_EQ(second.diagnostics[0].message, first.diagnostics[0].message);

  // The definition is not in the key: its interface checks run again on a hit.
  auto swapped = rms_solution(R"("kernel":"rmsnorm_kernel","grid":["batch_size"],"block":[256],)"
                              R"("args":["hidden_states","weight","output","batch_size","eps"])");
  auto plain = compile_solution(swapped, nullptr, nullptr, cached());
  EXPECT_TRUE(plain.ok()) << violations_text(plain);
  auto d = rms_definition();
  auto with_definition = compile_solution(swapped, &d, nullptr, cached());
  EXPECT_TRUE(with_definition.cache_hit);
  EXPECT_EQ(with_definition.status, Status::kRejected);
  EXPECT_EQ(with_definition.violations.size(), 2u);

  // Rejected by the source rules: nothing is cached.
  const std::size_t files = count_files(dir_);
  auto host = rms_solution(kRmsLaunch, "", "int main() { return 0; }\n");
  EXPECT_EQ(compile_solution(host, nullptr, nullptr, cached()).status, Status::kRejected);
  EXPECT_EQ(count_files(dir_), files);
}

TEST_F(CompileCache, NoCacheNeitherReadsNorWrites) {
  auto s = rms_solution();
  auto opts = cached();
  opts.use_cache = false;
  auto r = compile_solution(s, nullptr, nullptr, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(fs::exists(dir_));
  compile_solution(s, nullptr, nullptr, cached());  // fills the cache
  auto again = compile_solution(s, nullptr, nullptr, opts);
  EXPECT_FALSE(again.cache_hit);
  EXPECT_EQ(again.cache_key, r.cache_key);
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

// One answer to "which tensor-core generation is this target" (kharness/arch.hpp), used by the
// prompt's skills layers, the profile's diagnosis and the SASS check alike.
TEST(Arch, OneFamilyPerTarget) {
  EXPECT_EQ(arch_family("sm_90a"), ArchFamily::kHopper);
  EXPECT_EQ(arch_family("sm_90"), ArchFamily::kHopper);
  for (const char* a : {"sm_100a", "sm_103a", "sm_110a", "sm_100f"})
    EXPECT_EQ(arch_family(a), ArchFamily::kBlackwell) << a;
  for (const char* a : {"sm_80", "sm_86", "sm_89", "sm_120", "sm_120a", "sm_121a", ""})
    EXPECT_EQ(arch_family(a), ArchFamily::kPortable) << a;
}

}  // namespace
}  // namespace kharness
