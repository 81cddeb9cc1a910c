// Source rules, plan rules and kernel interface checks (no NVRTC needed).
#include "kharness/rules.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {
namespace fs = std::filesystem;

Solution make_solution(std::vector<SourceFile> sources, std::size_t entry = 0) {
  Solution s;
  s.sources = std::move(sources);
  s.entry = entry;
  s.plan = parse_plan(
      nlohmann::json::parse(R"~({"launches":[{"kernel":"k","grid":[1],"block":[32],"args":[]}]})~"),
      "test");
  return s;
}

Solution one_file(const std::string& code, const std::string& name = "k.cu") {
  return make_solution({{name, code}});
}

// A fake toolkit include folder: the rules only look for files there.
class RulesSource : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kharness-rules-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "cuda");
    std::ofstream(dir_ / "cuda_bf16.h") << "// fake\n";
    std::ofstream(dir_ / "cuda" / "barrier") << "// fake\n";
    rules_.system_include_dirs = {dir_};
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<RuleViolation> check(const Solution& s) { return check_source_rules(s, rules_); }

  fs::path dir_;
  SourceRules rules_;
};

std::vector<std::string> rules_of(const std::vector<RuleViolation>& v) {
  std::vector<std::string> out;
  for (const auto& r : v) {
    out.push_back(r.rule);
  }
  return out;
}

TEST_F(RulesSource, CleanDeviceCodePasses) {
  auto v = check(one_file(R"SRC(/* kharness {"launches":[]} */
#include <cuda_bf16.h>
#include <cuda/barrier>
// cudaMalloc(&p, 4); int main() { k<<<1,1>>>(); }  -- comments do not count
/* __host__ void f() { fopen("x", "r"); } */
__host__ __device__ inline float twice(float x) { return 2 * x; }
__device__ __host__ float thrice(float x) { return 3 * x; }
template <typename T>
__host__ __device__ __forceinline__ T id(T x) { return x; }
extern "C" __global__ void k(float* x) {
  const char* msg = "cudaMalloc( <<< __host__ int main( fopen(";
  char c = '"';
  int big = 1'000'000;
  const char* raw = R"x( system("rm -rf") )x";
  printf("%s %c %d %s\n", msg, c, big, raw);
  cudaGridDependencySynchronize();
  __threadfence_system();
  x[threadIdx.x] = twice(thrice(id(x[0])));
}
)SRC"));
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v[0].rule + ": " + v[0].message);
}

TEST_F(RulesSource, HostCodeRejectedAtItsLine) {
  auto v =
      check(one_file("/* kharness {} */\n"                           // 1
                     "__global__ void k() {}\n"                      // 2
                     "\n"                                            // 3
                     "__host__ void launch() {}\n"                   // 4
                     "int main() { return 0; }\n"                    // 5
                     "__device__ void g() {\n"                       // 6
                     "  float* p; cudaMalloc(&p, 4);\n"              // 7
                     "  FILE* f = fopen(\"/etc/passwd\", \"r\");\n"  // 8
                     "  std::thread t;\n"                            // 9
                     "  cuMemAlloc(0, 0);\n"                         // 10
                     "  system(\"ls\");\n"                           // 11
                     "}\n"));
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0].rule, "host_code");
  EXPECT_EQ(v[0].line, 4);
  EXPECT_EQ(v[0].file, "k.cu");
  EXPECT_NE(v[0].message.find("__host__"), std::string::npos);
  EXPECT_EQ(v[1].rule, "host_code");
  EXPECT_EQ(v[1].line, 5);
  EXPECT_NE(v[1].message.find("main"), std::string::npos);
  EXPECT_EQ(v[2].rule, "host_api");
  EXPECT_EQ(v[2].line, 7);
  EXPECT_NE(v[2].message.find("cudaMalloc"), std::string::npos);
  EXPECT_EQ(v[3].rule, "host_code");
  EXPECT_EQ(v[3].line, 8);
  EXPECT_NE(v[3].message.find("fopen"), std::string::npos);
  EXPECT_EQ(v[4].line, 9);
  EXPECT_NE(v[4].message.find("std::thread"), std::string::npos);
  EXPECT_EQ(v[5].rule, "host_api");
  EXPECT_EQ(v[5].line, 10);
  EXPECT_EQ(v[6].line, 11);
}

TEST_F(RulesSource, RuntimeApiCallsRejected) {
  for (const char* call : {"cudaMemcpy(a, b, 4, cudaMemcpyDeviceToHost);", "cudaStreamCreate(&s);",
                           "cudaDeviceSynchronize();", "cudaLaunchKernel((void*)k, 1, 1, 0, 0, 0);",
                           "cudaMallocAsync (&p, 4, 0);"}) {
    auto v = check(one_file(std::string("__global__ void k() {\n  ") + call + "\n}\n"));
    ASSERT_EQ(v.size(), 1u) << call;
    EXPECT_EQ(v[0].rule, "host_api") << call;
    EXPECT_EQ(v[0].line, 2) << call;
  }
}

TEST_F(RulesSource, LaunchSyntaxRejected) {
  auto v =
      check(one_file("__global__ void child() {}\n"
                     "__global__ void k() {\n"
                     "  child<<<1, 32>>>();\n"
                     "}\n"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "host_launch");
  EXPECT_EQ(v[0].line, 3);
  // The same text in a string or a comment is fine.
  EXPECT_TRUE(check(one_file("__global__ void k() { const char* s = \"<<<\"; } // <<<\n")).empty());
}

TEST_F(RulesSource, EmptySourceRejected) {
  for (const char* text : {"", "   \n\t\n", "/* kharness {\"launches\":[]} */\n// nothing\n"}) {
    auto v = check(one_file(text));
    ASSERT_EQ(v.size(), 1u) << text;
    EXPECT_EQ(v[0].rule, "empty_source");
    EXPECT_EQ(v[0].file, "k.cu");
  }
  auto none = check(make_solution({}));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].rule, "empty_source");
}

TEST_F(RulesSource, IncludeRules) {
  auto v = check(make_solution({{"k.cu",
                                 "#include <cuda_bf16.h>\n"          // 1 ok: toolkit
                                 "#include \"cuda/barrier\"\n"       // 2 ok: toolkit via quotes
                                 "#include \"util/helpers.cuh\"\n"   // 3 ok: own file
                                 "#include <stdio.h>\n"              // 4 not a toolkit header
                                 "#include \"/etc/passwd\"\n"        // 5 absolute
                                 "#include \"../secret.h\"\n"        // 6 ..
                                 "#  include   <cuda/../../x.h>\n"   // 7 ..
                                 "#define H \"util/helpers.cuh\"\n"  // 8
                                 "#include H\n"                      // 9 computed
                                 "#include \"util/helper.cuh\"\n"  // 10 missing, close to own file
                                 "#include_next <cuda_bf16.h>\n"   // 11
                                 "#include \\\n  <vector>\n"       // 12-13 continued line
                                 "__global__ void k() {}\n"},
                                {"util/helpers.cuh", "#pragma once\n#include <cuda_bf16.h>\n"}}));
  ASSERT_EQ(v.size(), 8u);
  for (const auto& r : v) {
    EXPECT_EQ(r.rule, "include_path") << r.message;
  }
  EXPECT_EQ(v[0].line, 4);
  EXPECT_NE(v[0].message.find("<stdio.h>"), std::string::npos);
  EXPECT_NE(v[0].message.find("not a CUDA toolkit header"), std::string::npos);
  EXPECT_EQ(v[1].line, 5);
  EXPECT_NE(v[1].message.find("absolute"), std::string::npos);
  EXPECT_EQ(v[2].line, 6);
  EXPECT_NE(v[2].message.find("'..'"), std::string::npos);
  EXPECT_EQ(v[3].line, 7);
  EXPECT_EQ(v[4].line, 9);
  EXPECT_NE(v[4].message.find("computed"), std::string::npos);
  EXPECT_EQ(v[5].line, 10);
  EXPECT_NE(v[5].message.find("did you mean \"util/helpers.cuh\""), std::string::npos);
  EXPECT_EQ(v[6].line, 11);
  EXPECT_EQ(v[7].line, 12);
  EXPECT_NE(v[7].message.find("<vector>"), std::string::npos);
}

TEST_F(RulesSource, IncludesInCommentsIgnoredAndHeadersChecked) {
  auto v = check(make_solution({{"k.cu",
                                 "// #include <stdio.h>\n/*\n#include \"/etc/x\"\n*/\n"
                                 "#include \"h.cuh\"\n__global__ void k() {}\n"},
                                {"h.cuh", "\n\nint main() {}\n"}}));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "host_code");
  EXPECT_EQ(v[0].file, "h.cuh");
  EXPECT_EQ(v[0].line, 3);
}

// The rules read the tokens NVRTC reads (translation phases 1-2, digraphs, trigraphs).
TEST_F(RulesSource, DigraphAndTrigraphIncludesRejected) {
  for (const char* text : {"%:include \"/proc/self/environ\"\n", "%:include \"/etc/passwd\"\n",
                           "  %:  include <stdio.h>\n", "??=include \"/etc/passwd\"\n",
                           "#inc\\\nlude \"/etc/passwd\"\n", "#\\\ninclude \"/etc/passwd\"\n",
                           "%:/**/include \"/etc/passwd\"\n"}) {
    auto v = check(one_file(std::string(text) + "__global__ void k() {}\n"));
    ASSERT_EQ(v.size(), 1u) << text;
    EXPECT_EQ(v[0].rule, "include_path") << text;
    EXPECT_EQ(v[0].line, 1) << text;
  }
  // Digraphs in literals and comments are text.
  EXPECT_TRUE(check(one_file("// %:include <stdio.h>\n__global__ void k() { const char* s = "
                             "\"%:include <stdio.h>\"; }\n"))
                  .empty());
  // Braces spelt <% %> still delimit declarations for the __host__ __device__ check.
  EXPECT_TRUE(check(one_file("__host__ __device__ float f(float x) <% return x; %>\n"
                             "__global__ void k() <% %>\n"))
                  .empty());
}

TEST_F(RulesSource, SpliceInsideCommentEndHidesNothing) {
  // "*\<newline>/" closes the comment for NVRTC: the code after it is code.
  auto v =
      check(one_file("/* a comment *\\\n/ #include \"/etc/passwd\"\n"  // 1-2
                     "__global__ void k() {\n"                         // 3
                     "  system(\"id\");\n"                             // 4
                     "}\n"                                             // 5
                     "/* closes the old, wrong view */\n"));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].rule, "include_path");
  EXPECT_EQ(v[0].line, 1);
  EXPECT_EQ(v[1].rule, "host_code");
  EXPECT_EQ(v[1].line, 4);  // lines after a splice keep their numbers
  // Spliced identifiers and launch syntax.
  auto w = check(
      one_file("__global__ void k() {\n  fo\\\npen(\"x\", \"r\");\n  k<<\\\n<1, 1>>>();\n}\n"));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rule, "host_launch");
  EXPECT_EQ(w[1].rule, "host_code");
  EXPECT_EQ(w[1].line, 2);
  // "\ " + newline is no splice for NVRTC: the next line is code.
  auto x = check(one_file("// comment \\ \n#include \"/etc/passwd\"\n__global__ void k() {}\n"));
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].line, 2);
}

TEST_F(RulesSource, TrigraphSpliceIsScannedBothWays) {
  // With trigraphs "??/" + newline would splice the include into the comment; NVRTC's C++17
  // ignores trigraphs and sees the include: the rules must too.
  auto v = check(one_file("// c ??/\n#include \"/etc/passwd\"\n__global__ void k() {}\n"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "include_path");
  EXPECT_EQ(v[0].line, 2);
}

TEST_F(RulesSource, EverySpellingOfMainRejected) {
  for (const char* text :
       {"signed main() { return 0; }\n", "unsigned main() { return 0; }\n",
        "int (main)(int, char**) { return 0; }\n", "long main() { return 0; }\n",
        "auto main() -> int { return 0; }\n", "int\nmain\n(\n) { return 0; }\n",
        "#define ENTRY main\nint ENTRY() { return 0; }\n", "int ma\\\nin() { return 0; }\n",
        "__device__ int main() { return 0; }\n", "typedef int I; I main() { return 0; }\n"}) {
    auto v = check(one_file(std::string(text) + "__global__ void k() {}\n"));
    ASSERT_GE(v.size(), 1u) << text;
    EXPECT_EQ(v[0].rule, "host_code") << text;
    EXPECT_NE(v[0].message.find("main"), std::string::npos) << text;
  }
  // A longer name, or a member's use, is something else (declaring a member named main is
  // refused too: the rule does not parse declarations).
  EXPECT_TRUE(check(one_file("__device__ int main_count;\n__device__ int remain(int x) { return "
                             "x; }\ntemplate <class S> __device__ int f(S s, S* p) { return "
                             "s.main + p->main; }\n__global__ void k() {}\n"))
                  .empty());
}

TEST(RulesPtx, DeviceHeapRejected) {
  const char* ptx = R"(
.version 9.0
.target sm_90a
.address_size 64
.extern .func  (.param .b64 func_retval0) malloc
(
	.param .b64 malloc_param_0
)
;
.extern .func free
(
	.param .b64 free_param_0
)
;
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.visible .entry k() { ret; }
)";
  auto v = check_ptx_rules(ptx);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].rule, "device_heap");
  EXPECT_NE(v[0].message.find("'malloc'"), std::string::npos);
  EXPECT_NE(v[1].message.find("'free'"), std::string::npos);
  EXPECT_TRUE(check_ptx_rules(".extern .func (.param .b32 func_retval0) vprintf\n(\n);\n").empty());
  auto aligned = check_ptx_rules(
      ".extern .func  (.param .b64 func_retval0) __cuda_syscall_aligned_malloc\n(\n);\n");
  ASSERT_EQ(aligned.size(), 1u);
}

TEST_F(RulesSource, SizeLimits) {
  rules_.max_file_bytes = 100;
  rules_.max_total_bytes = 150;
  std::string body = "__global__ void k() {}\n" + std::string(60, ' ');
  auto ok = check(make_solution({{"a.cu", body}}));
  EXPECT_TRUE(ok.empty());
  auto big = check(make_solution({{"a.cu", body + std::string(50, ' ')}}));
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].rule, "file_size");
  auto total = check(make_solution({{"a.cu", body}, {"b.cuh", body}}));
  ASSERT_EQ(total.size(), 1u);
  EXPECT_EQ(total[0].rule, "total_size");
}

TEST(RulesRewrite, QuotedToolkitIncludesBecomeAngled) {
  const std::string in =
      "#include \"cuda_fp16.h\"\n"
      "  #  include \"cuda/barrier\" // \"x\"\n"
      "#include \"util.cuh\"\n"
      "// #include \"cuda_bf16.h\"\n"
      "const char* s = \"#include \\\"no\\\"\";\n"
      "#include <cuda_fp8.h>\n";
  const std::string out = angle_toolkit_includes(in, {"k.cu", "util.cuh"});
  EXPECT_EQ(out.size(), in.size());
  EXPECT_EQ(out,
            "#include <cuda_fp16.h>\n"
            "  #  include <cuda/barrier> // \"x\"\n"
            "#include \"util.cuh\"\n"
            "// #include \"cuda_bf16.h\"\n"
            "const char* s = \"#include \\\"no\\\"\";\n"
            "#include <cuda_fp8.h>\n");
}

// ---------------------------------------------------------------------------------------------

Definition test_definition() {
  return parse_definition(nlohmann::ordered_json::parse(R"~({
    "name": "rms_test", "op_type": "rmsnorm",
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
    "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
               "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
               "eps": {"shape": null, "dtype": "float32"},
               "steps": {"shape": null, "dtype": "int32"}},
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}}
  })~"),
                          "test_definition");
}

std::vector<Workload> test_workloads(const Definition& d, const std::vector<int>& batches) {
  std::vector<Workload> out;
  for (int b : batches) {
    out.push_back(parse_workload(nlohmann::json{{"uuid", "wl-" + std::to_string(b)},
                                                {"axes", {{"batch_size", b}}},
                                                {"inputs",
                                                 {{"eps", {{"type", "scalar"}, {"value", 1e-5}}},
                                                  {"steps", {{"type", "scalar"}, {"value", 3}}}}}},
                                 d, "test"));
  }
  return out;
}

LaunchPlan plan(const std::string& json) { return parse_plan(nlohmann::json::parse(json), "plan"); }

TEST(RulesPlan, GoodPlanPasses) {
  auto d = test_definition();
  auto p = plan(R"~({"launches":[{"kernel":"k","grid":["batch_size",1,1],"block":[256,1,1],
    "shared_bytes":"hidden_size * 4","cluster":[1,1,1],
    "args":["hidden_states","weight","output","eps","batch_size","workspace",{"int32":4}]}],
    "workspace_bytes":"batch_size * 4"})~");
  EXPECT_TRUE(check_plan_rules(p, d, test_workloads(d, {1, 7, 4096})).empty());
  EXPECT_TRUE(check_plan_rules(p, d, {}).empty());
}

TEST(RulesPlan, NoLaunches) {
  auto v = check_plan_rules(plan(R"~({"launches":[]})~"), test_definition(), {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "no_launches");
}

TEST(RulesPlan, UnknownAxisAndArg) {
  auto d = test_definition();
  auto v = check_plan_rules(plan(R"~({"launches":[{"kernel":"k","grid":["cdiv(batchsize, 2)"],
      "block":[256],"shared_bytes":"weight * 2","args":["hidden_state","weight","output"]}]})~"),
                            d, test_workloads(d, {1}));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].rule, "unknown_axis");
  EXPECT_NE(v[0].message.find("grid[0]"), std::string::npos);
  EXPECT_NE(v[0].message.find("'batchsize'"), std::string::npos);
  EXPECT_NE(v[0].message.find("did you mean 'batch_size'"), std::string::npos);
  EXPECT_EQ(v[1].rule, "unknown_axis");
  EXPECT_NE(v[1].message.find("'weight' is a tensor"), std::string::npos);
  EXPECT_EQ(v[2].rule, "unknown_arg");
  EXPECT_NE(v[2].message.find("arg 0 'hidden_state'"), std::string::npos);
  EXPECT_NE(v[2].message.find("did you mean 'hidden_states'"), std::string::npos);
}

// ---- shape dispatch: each condition over axes only, each variant checked for the workloads it
// serves ----

TEST(RulesPlanVariants, GoodDispatchingPlanPasses) {
  auto d = test_definition();
  auto p = plan(R"~({"variants":[
    {"when":"batch_size <= 8","launches":[{"kernel":"a","grid":["batch_size"],"block":[1024],
      "args":["hidden_states","weight","output","eps","batch_size"]}]},
    {"launches":[{"kernel":"b","grid":["cdiv(batch_size, 2)"],"block":[128, 2],
      "args":["hidden_states","weight","output","eps","batch_size"]}]}]})~");
  EXPECT_TRUE(check_plan_rules(p, d, test_workloads(d, {1, 7, 8, 9, 4096})).empty());
  EXPECT_TRUE(check_plan_rules(p, d, {}).empty());
}

TEST(RulesPlanVariants, ConditionOnAnUnknownAxisOrATensorIsRejectedNamingTheField) {
  auto d = test_definition();
  auto v = check_plan_rules(plan(R"~({"variants":[
    {"when":"batchsize <= 8","launches":[{"kernel":"a","grid":[1],"block":[32],"args":[]}]},
    {"when":"weight > 0","launches":[{"kernel":"a","grid":[1],"block":[32],"args":[]}]},
    {"launches":[{"kernel":"b","grid":[1],"block":[32],"args":[]}]}]})~"),
                            d, test_workloads(d, {1}));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].rule, "unknown_axis");
  EXPECT_NE(v[0].message.find("variants[0].when 'batchsize <= 8'"), std::string::npos)
      << v[0].message;
  EXPECT_NE(v[0].message.find("did you mean 'batch_size'"), std::string::npos);
  EXPECT_EQ(v[1].rule, "unknown_axis");
  EXPECT_NE(v[1].message.find("variants[1].when"), std::string::npos) << v[1].message;
  EXPECT_NE(v[1].message.find("'weight' is a tensor"), std::string::npos);
}

// The choice of variant is made for every workload at compile time: a variant's geometry is
// checked for the workloads that select it, not for the others.
TEST(RulesPlanVariants, EachVariantIsCheckedForTheWorkloadsItServes) {
  auto d = test_definition();
  // Variant 0 divides by (100 - batch_size): zero at batch 100, which variant 0 never serves.
  auto served = plan(R"~({"variants":[
    {"when":"batch_size < 50","launches":[{"kernel":"a","grid":["1000 / (100 - batch_size)"],
      "block":[32],"args":[]}]},
    {"launches":[{"kernel":"b","grid":["batch_size"],"block":[32],"args":[]}]}]})~");
  EXPECT_TRUE(check_plan_rules(served, d, test_workloads(d, {1, 49, 100})).empty());
  // Variant 1 (batch > 8) asks for 2048 threads a block: only its workloads are named.
  auto v = check_plan_rules(plan(R"~({"variants":[
    {"when":"batch_size <= 8","launches":[{"kernel":"a","grid":["batch_size"],"block":[256],
      "args":[]}]},
    {"launches":[{"kernel":"b","grid":["batch_size"],"block":["min(batch_size, 2048)"],
      "args":[]}]}]})~"),
                            d, test_workloads(d, {1, 8, 4096}));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "block_size");
  EXPECT_EQ(v[0].message.rfind("variants[1] (otherwise): launch 0 (b): block[0]", 0), 0u)
      << v[0].message;
  EXPECT_NE(v[0].message.find("wl-4096"), std::string::npos) << v[0].message;
  // A condition that divides by zero for a workload: no variant can be chosen for it.
  auto zero = check_plan_rules(plan(R"~({"variants":[
    {"when":"100 / (batch_size - 7) > 1","launches":[{"kernel":"a","grid":[1],"block":[32],
      "args":[]}]},
    {"launches":[{"kernel":"b","grid":[1],"block":[32],"args":[]}]}]})~"),
                               d, test_workloads(d, {1, 7}));
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].rule, "variant_condition");
  EXPECT_NE(zero[0].message.find("wl-7"), std::string::npos) << zero[0].message;
  // An empty variant has no launches.
  auto empty = check_plan_rules(plan(R"~({"variants":[
    {"when":"batch_size <= 8","launches":[]},
    {"launches":[{"kernel":"b","grid":[1],"block":[32],"args":[]}]}]})~"),
                                d, test_workloads(d, {1}));
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].rule, "no_launches");
  EXPECT_EQ(empty[0].message.rfind("variants[0] (batch_size <= 8)", 0), 0u) << empty[0].message;
}

TEST(RulesPlanVariants, KernelInterfaceCoversEveryVariant) {
  auto p = plan(R"~({"variants":[
    {"when":"batch_size <= 8","launches":[{"kernel":"a","grid":[1],"block":[32],"args":[]}]},
    {"launches":[{"kernel":"missing","grid":[1],"block":[32],"args":[]}]}]})~");
  KernelInfo a;
  a.name = "a";
  a.mangled = "a";
  auto v = check_kernel_interface(p, nullptr, {a});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "unknown_kernel");
  EXPECT_EQ(v[0].message.rfind("variants[1]: launch 0: kernel 'missing'", 0), 0u) << v[0].message;
}

TEST(RulesPlan, DivisionByZeroNamesTheWorkload) {
  auto d = test_definition();
  auto v = check_plan_rules(
      plan(
          R"~({"launches":[{"kernel":"k","grid":["hidden_size / (batch_size - 1)"],"block":[256],"args":[]}]})~"),
      d, test_workloads(d, {4, 1, 2}));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "division_by_zero");
  EXPECT_NE(v[0].message.find("wl-1"), std::string::npos);
  EXPECT_NE(v[0].message.find("batch_size=1"), std::string::npos);

  auto cdiv = check_plan_rules(
      plan(
          R"~({"launches":[{"kernel":"k","grid":["cdiv(batch_size, 0)"],"block":[256],"args":[]}]})~"),
      d, test_workloads(d, {1, 2, 3}));
  ASSERT_EQ(cdiv.size(), 1u);
  EXPECT_EQ(cdiv[0].rule, "division_by_zero");
  EXPECT_NE(cdiv[0].message.find("and 2 more workloads"), std::string::npos);
}

TEST(RulesPlan, OverflowAndLimits) {
  auto d = test_definition();
  auto wl = test_workloads(d, {1, 70000});
  auto overflow =
      check_plan_rules(plan(R"~({"launches":[{"kernel":"k","grid":[1],"block":[32],"args":[]}],
               "workspace_bytes":"batch_size * 4611686018427387904"})~"),
                       d, wl);
  ASSERT_EQ(overflow.size(), 1u);
  EXPECT_EQ(overflow[0].rule, "expression_overflow");
  EXPECT_NE(overflow[0].message.find("wl-70000"), std::string::npos);

  auto v = check_plan_rules(
      plan(R"~({"launches":[{"kernel":"k","grid":[1, "batch_size", 1],"block":[64, 32, 1],
               "cluster":[3,1,1],"shared_bytes":"hidden_size * 64","args":[]}],
               "workspace_bytes":"0 - batch_size"})~"),
      d, wl);
  std::vector<std::string> got = rules_of(v);
  // grid y 70000 > 65535; block 2048 threads; grid x 1 not a multiple of cluster 3;
  // 256 KiB of shared memory; negative workspace.
  // Reported in the order found: workload 1 first, then the grid of workload 70000.
  EXPECT_EQ(got, (std::vector<std::string>{"cluster_size", "block_size", "shared_memory",
                                           "workspace_size", "grid_size"}));
  EXPECT_NE(v[1].message.find("2048 threads"), std::string::npos);
  EXPECT_NE(v[4].message.find("= 70000"), std::string::npos);

  auto zero = check_plan_rules(
      plan(R"~({"launches":[{"kernel":"k","grid":["batch_size - 1"],"block":[0],"args":[]}]})~"), d,
      test_workloads(d, {1}));
  EXPECT_EQ(rules_of(zero), (std::vector<std::string>{"grid_size", "block_size"}));
  auto big_cluster = check_plan_rules(
      plan(
          R"~({"launches":[{"kernel":"k","grid":[32,4,2],"block":[32],"cluster":[4,4,2],"args":[]}]})~"),
      d, {});
  ASSERT_EQ(big_cluster.size(), 1u);
  EXPECT_EQ(big_cluster[0].rule, "cluster_size");
  EXPECT_NE(big_cluster[0].message.find("32 blocks"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------

PtxParam u64() { return {"u64", 8, 8}; }
PtxParam u32() { return {"u32", 4, 4}; }
PtxParam s64() { return {"s64", 8, 8}; }
PtxParam f32() { return {"f32", 4, 4}; }

KernelInfo kernel(std::string name, std::vector<PtxParam> params, std::string mangled = "") {
  KernelInfo k;
  k.name = std::move(name);
  k.mangled = mangled.empty() ? k.name : std::move(mangled);
  k.params = std::move(params);
  return k;
}

const char* kRmsPlan =
    R"~({"launches":[{"kernel":"rmsnorm_kernel","grid":["batch_size"],"block":[256],
    "args":["hidden_states","weight","output","batch_size","eps"]}]})~";

TEST(RulesInterface, MatchingKernelPasses) {
  auto d = test_definition();
  std::vector<KernelInfo> ks = {kernel("rmsnorm_kernel", {u64(), u64(), u64(), u32(), f32()})};
  EXPECT_TRUE(check_kernel_interface(plan(kRmsPlan), &d, ks).empty());
  ks[0].params[3] = s64();  // int64 axis is fine too
  EXPECT_TRUE(check_kernel_interface(plan(kRmsPlan), &d, ks).empty());
}

TEST(RulesInterface, UnknownKernelListsKernelsAndSuggests) {
  auto d = test_definition();
  std::vector<KernelInfo> ks = {kernel("rmsnorm_kernal", {u64(), u64(), u64(), u32(), f32()}),
                                kernel("other", {})};
  auto v = check_kernel_interface(plan(kRmsPlan), &d, ks);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "unknown_kernel");
  EXPECT_NE(v[0].message.find("rmsnorm_kernal, other"), std::string::npos);
  EXPECT_NE(v[0].message.find("did you mean 'rmsnorm_kernal'"), std::string::npos);
  auto none = check_kernel_interface(plan(kRmsPlan), &d, {});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].message.find("kernels: none"), std::string::npos);
}

TEST(RulesInterface, ParamCountMismatch) {
  auto d = test_definition();
  std::vector<KernelInfo> ks = {kernel("rmsnorm_kernel", {u64(), u64(), u64(), u32()})};
  auto v = check_kernel_interface(plan(kRmsPlan), &d, ks);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "param_mismatch");
  EXPECT_NE(v[0].message.find("takes 4 parameters but the plan passes 5 args"), std::string::npos);
}

TEST(RulesInterface, ParamSizeAndKindMismatch) {
  auto d = test_definition();
  // output passed to a u32, batch_size to an f32, eps (float32) to a u32.
  std::vector<KernelInfo> ks = {kernel("rmsnorm_kernel", {u64(), u64(), u32(), f32(), u32()})};
  auto v = check_kernel_interface(plan(kRmsPlan), &d, ks);
  ASSERT_EQ(v.size(), 3u);
  for (const auto& r : v) {
    EXPECT_EQ(r.rule, "param_mismatch");
  }
  EXPECT_EQ(v[0].message,
            "launch 0: arg 2 'output' is a tensor (a device pointer, 8 bytes) but parameter 2 of "
            "rmsnorm_kernel is .u32 (4 bytes)");
  EXPECT_EQ(v[1].message,
            "launch 0: arg 3 'batch_size' is an axis (int32/int64) but parameter 3 of "
            "rmsnorm_kernel is .f32 (4 bytes)");
  EXPECT_NE(v[2].message.find("arg 4 'eps' is a float32 scalar input (4 bytes)"),
            std::string::npos);
}

TEST(RulesInterface, LiteralsAndScalars) {
  auto d = test_definition();
  auto p = plan(R"~({"launches":[{"kernel":"k","grid":[1],"block":[1],
      "args":[{"int32":4},{"float32":0.5},{"int64":7},{"bfloat16":1.0},"steps"]}]})~");
  std::vector<KernelInfo> good = {kernel("k", {u32(), f32(), s64(), {"b8", 2, 2}, {"s32", 4, 4}})};
  EXPECT_TRUE(check_kernel_interface(p, &d, good).empty());
  EXPECT_TRUE(check_kernel_interface(p, nullptr, good).empty());
  std::vector<KernelInfo> bad = {kernel("k", {f32(), u32(), u32(), f32(), f32()})};
  auto v = check_kernel_interface(p, &d, bad);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_NE(v[0].message.find("an int32 literal"), std::string::npos);
  EXPECT_NE(v[4].message.find("'steps' is an int32 scalar input"), std::string::npos);
  // Without a definition only literals are checked: 'steps' cannot be resolved.
  EXPECT_EQ(check_kernel_interface(p, nullptr, bad).size(), 4u);
}

TEST(RulesInterface, NamesResolveTemplatesAndNamespaces) {
  std::vector<KernelInfo> ks = {
      kernel("tk<4>", {}, "_Z2tkILi4EEvv"), kernel("ns::kern", {}, "_ZN2ns4kernEv"),
      kernel("dup<1>", {}, "_Z3dupILi1EEvv"), kernel("dup<2>", {}, "_Z3dupILi2EEvv")};
  auto launch = [](const std::string& name) {
    return plan(R"~({"launches":[{"kernel":")~" + name +
                R"~(","grid":[1],"block":[1],"args":[]}]})~");
  };
  for (const char* ok : {"tk<4>", "tk", "_Z2tkILi4EEvv", "ns::kern", "kern", "dup<2>"}) {
    EXPECT_TRUE(check_kernel_interface(launch(ok), nullptr, ks).empty()) << ok;
  }
  auto ambiguous = check_kernel_interface(launch("dup"), nullptr, ks);
  ASSERT_EQ(ambiguous.size(), 1u);
  EXPECT_NE(ambiguous[0].message.find("ambiguous"), std::string::npos);
  CompileResult r;
  r.kernels = ks;
  ASSERT_NE(r.find_kernel("kern"), nullptr);
  EXPECT_EQ(r.find_kernel("kern")->mangled, "_ZN2ns4kernEv");
  EXPECT_EQ(r.find_kernel("dup"), nullptr);
  EXPECT_EQ(r.find_kernel("nope"), nullptr);
}

}  // namespace
}  // namespace kharness
