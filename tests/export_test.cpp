// `kharness export --fib`: the FlashInfer-Bench Solution JSON and its generated tvm-ffi launcher
// for the rmsnorm, fused_add_rmsnorm and GEMM seeds (structure, the plan read back), and the
// refusal of plans the launcher cannot express. tests/fib_export_nvcc.sh compiles the launchers
// with nvcc against tvm-ffi's headers where they are at hand; scripts/fib-peer.sh runs them under
// FlashInfer-Bench itself on a GPU.
#include "kharness/export.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kharness/solution.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::TempDir;

struct Exported {
  json solution;
  std::string launcher, kernel;
};

Exported export_seed(const TempDir& dir, const std::string& seed, const std::string& op,
                     const std::string& extra = "") {
  std::string out = (dir.path() / (op + ".json")).string();
  auto r = testing::kharness("--archive '" + dir.path().string() + "/a' export '" +
                             (testing::source_dir() / seed).string() + "' --operator " + op +
                             " --fib '" + out + "' --arch sm_90a " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  Exported e;
  std::ifstream in(out);
  e.solution = json::parse(in);
  for (const auto& s : e.solution["sources"]) {
    if (s["path"] == exchange::kFibLauncherFile) {
      e.launcher = s["content"];
    } else {
      e.kernel = s["content"];
    }
  }
  return e;
}

const char* const kFp8Seed = "operators/_families/gemm_fp8/seed.sm_90a.cu";
const char* const kGemmSeed = "operators/_families/gemm/seed.sm_90a.cu";

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(FibExport, RmsnormSeed) {
  TempDir dir;
  Exported e = export_seed(dir, "operators/rmsnorm_h4096/seed.cu", "rmsnorm_h4096");
  const json& s = e.solution;
  EXPECT_EQ(s["name"], "rmsnorm_h4096_seed");
  EXPECT_EQ(s["definition"], "rmsnorm_h4096");
  EXPECT_EQ(s["spec"]["language"], "cuda");
  EXPECT_EQ(s["spec"]["binding"], "tvm-ffi");
  EXPECT_EQ(s["spec"]["destination_passing_style"], true);
  EXPECT_EQ(s["spec"]["target_hardware"], json::array({"cuda"}));
  EXPECT_EQ(s["spec"]["entry_point"], "kharness_fib_launcher.cu::run");
  ASSERT_EQ(s["sources"].size(), 2u);
  EXPECT_EQ(s["sources"][0]["path"], "seed.cu");
  // The kernel source is the seed as it is (its plan comment first).
  EXPECT_EQ(e.kernel.rfind("/* kharness", 0), 0u);
  const std::string& l = e.launcher;
  EXPECT_EQ(l.rfind(exchange::kFibLauncherMarker, 0), 0u);
  EXPECT_TRUE(has(l, "// kharness-entry: seed.cu\n"));
  EXPECT_TRUE(has(l, "#include <tvm/ffi/container/tensor.h>"));
  EXPECT_TRUE(has(l, "extern \"C\" void kharness_stub_0(void) __asm__(\"rmsnorm_kernel\");"));
  EXPECT_TRUE(has(l,
                  "void run(TensorView t_hidden_states, TensorView t_weight, TensorView "
                  "t_output) {"));
  EXPECT_TRUE(has(l, "check_tensor(t_hidden_states, \"hidden_states\", 2, 16);"));
  EXPECT_TRUE(has(l, "const int64_t ax_batch_size = t_hidden_states.size(0);"));
  EXPECT_TRUE(has(l, "const int64_t ax_hidden_size = 4096LL;"));
  EXPECT_TRUE(has(l, "check_dim(t_weight, \"weight\", 0, ax_hidden_size, \"hidden_size\");"));
  EXPECT_TRUE(has(l, "check_dim(t_output, \"output\", 0, ax_batch_size, \"batch_size\");"));
  // batch_size is an int parameter; eps the float literal 1e-5 as its bytes.
  EXPECT_TRUE(has(l, "int32_t a3 = narrow<int32_t>(ax_batch_size, \"batch_size\");"));
  EXPECT_TRUE(has(l, "alignas(8) unsigned char a4[4] = {0xac, 0xc5, 0x27, 0x37};"));
  EXPECT_TRUE(has(l, "void* args[] = {&a0, &a1, &a2, &a3, a4};"));
  EXPECT_TRUE(has(l, "dim((ax_batch_size), \"grid.x\")"));
  EXPECT_TRUE(has(l, "TVMFFIEnvGetStream(kDLCUDA, guard.device)"));
  EXPECT_TRUE(has(l, "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, kharness_fib::run);"));
  EXPECT_FALSE(has(l, "workspace(guard.device"));  // the plan has none
}

TEST(FibExport, FusedAddRmsnormSeed) {
  TempDir dir;
  Exported e = export_seed(dir, "operators/fused_add_rmsnorm_h4096/seed.cu",
                           "fused_add_rmsnorm_h4096", "--name fused_seed --author tester");
  EXPECT_EQ(e.solution["name"], "fused_seed");
  EXPECT_EQ(e.solution["author"], "tester");
  EXPECT_TRUE(has(e.launcher,
                  "void run(TensorView t_hidden_states, TensorView t_residual, "
                  "TensorView t_weight, TensorView t_output) {"));
  EXPECT_TRUE(has(e.launcher, "__asm__(\"fused_add_rmsnorm_kernel\")"));
  EXPECT_TRUE(has(e.launcher, "check_dim(t_residual, \"residual\", 0, ax_batch_size"));
}

TEST(FibExport, GemmSeedOptsIntoSharedMemory) {
  TempDir dir;
  Exported e = export_seed(dir, "operators/_families/gemm/seed.cu", "gemm_n6144_k4096");
  const std::string& l = e.launcher;
  EXPECT_EQ(e.solution["definition"], "gemm_n6144_k4096");
  EXPECT_TRUE(has(l, "void run(TensorView t_A, TensorView t_B, TensorView t_C) {"));
  EXPECT_TRUE(has(l, "const int64_t ax_M = t_A.size(0);"));
  EXPECT_TRUE(has(l, "dim((kx_cdiv(ax_N, INT64_C(128))), \"grid.x\")"));
  EXPECT_TRUE(has(l, "dim((INT64_C(61440)), \"shared_bytes\")"));
  // Above 48 KiB: the launch helper opts in before launching.
  EXPECT_TRUE(has(l, "cudaFuncAttributeMaxDynamicSharedMemorySize"));
  EXPECT_TRUE(has(l, "cudaLaunchKernelExC"));
}

TEST(FibExport, RoundTripGivesTheSamePlan) {
  TempDir dir;
  for (auto [seed, op] :
       {std::pair<std::string, std::string>{"operators/rmsnorm_h4096/seed.cu", "rmsnorm_h4096"},
        {"operators/_families/gemm/seed.cu", "gemm_n6144_k4096"}}) {
    export_seed(dir, seed, op);
    std::string file = (dir.path() / (op + ".json")).string();
    Solution back = load_solution(file);
    Solution original = load_solution(testing::source_dir() / seed);
    EXPECT_EQ(back.plan.raw, original.plan.raw) << op;
    EXPECT_EQ(back.sources.size(), 1u) << "the generated launcher is left out";
    EXPECT_EQ(back.entry_source().path, "seed.cu");
    EXPECT_EQ(back.entry_source().content, original.entry_source().content);
    auto compiled = testing::kharness("compile '" + file + "' --operator " + op + " --arch sm_90a");
    EXPECT_EQ(compiled.exit_code, 0) << compiled.out;
  }
}

TEST(FibExport, MacrosBecomeDefines) {
  TempDir dir;
  std::string src = (dir.path() / "k.cu").string();
  std::string seed = (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string();
  // The seed's knobs given as -D options, as the tune provider writes them.
  auto r = testing::run_command(
      "sed 's/\"compile_options\": \\[\"-std=c++17\"\\]/"
      "\"compile_options\": [\"-std=c++17\", \"-DTHREADS=128\", "
      "\"-DVEC=8\"]/; s/\"block\": \\[256, 1, 1\\]/\"block\": [128, 1, "
      "1]/' '" +
      seed + "' > '" + src + "'");
  ASSERT_EQ(r.exit_code, 0);
  std::string out = (dir.path() / "k.json").string();
  auto e = testing::kharness("--archive '" + dir.path().string() + "/a' export '" + src +
                             "' --operator rmsnorm_h4096 --fib '" + out + "' --arch sm_90a");
  ASSERT_EQ(e.exit_code, 0) << e.out;
  std::ifstream in(out);
  json j = json::parse(in);
  std::string kernel = j["sources"][0]["content"];
  EXPECT_TRUE(has(kernel, "*/\n// kharness export: the plan's compile options"));
  EXPECT_TRUE(has(kernel, "#define THREADS 128\n#define VEC 8\n"));
  EXPECT_TRUE(
      has(j["sources"][1]["content"].get<std::string>(), "dim((INT64_C(128)), \"block.x\")"));
}

// A definition with a var axis no tensor carries, and a plan that launches on it.
struct Probe {
  Definition definition;
  Solution solution;
  std::vector<KernelInfo> kernels;
};

Probe probe(const std::string& grid, const std::string& options = "[]") {
  Probe p;
  p.definition = parse_definition_text(R"({
    "name": "probe", "op_type": "probe",
    "axes": {"n": {"type": "var"}, "steps": {"type": "var"}},
    "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["n"], "dtype": "float32"}}
  })",
                                       "probe.json");
  p.solution = parse_single_file_solution(
      "/* kharness {\"definition\": \"probe\", \"launches\": [{\"kernel\": \"k\", \"grid\": [\"" +
          grid +
          "\", 1, 1], \"block\": [128, 1, 1], \"args\": [\"x\", \"y\", \"n\"]}], "
          "\"compile_options\": " +
          options +
          "} */\nextern \"C\" __global__ void k(const float* x, "
          "float* y, int n) {}\n",
      "probe.cu");
  KernelInfo k;
  k.name = k.mangled = "k";
  k.params = {{"u64", 8, 8}, {"u64", 8, 8}, {"u32", 4, 4}};
  p.kernels = {k};
  return p;
}

void expect_refused(const Probe& p, const std::string& why) {
  try {
    exchange::export_fib_solution(p.solution, p.definition, p.kernels, {});
    ADD_FAILURE() << "exported; expected a refusal naming " << why;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kFailed);
    std::string what = e.what();
    EXPECT_NE(what.find("cannot export to FlashInfer-Bench"), std::string::npos) << what;
    EXPECT_NE(what.find(why), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(FibExport, RefusesWhatTheLauncherCannotExpress) {
  Probe fine = probe("cdiv(n, 128)");
  EXPECT_NO_THROW(exchange::export_fib_solution(fine.solution, fine.definition, fine.kernels, {}));
  expect_refused(probe("steps"), "var axis 'steps' is the size of no tensor");
  expect_refused(probe("n", "[\"--use_fast_math\"]"), "compile option '--use_fast_math'");
  Probe wrong = probe("n");
  wrong.kernels[0].params[2].size = 2;
  expect_refused(wrong, "an axis for a 2-byte parameter");
  Probe missing = probe("n");
  missing.kernels[0].name = missing.kernels[0].mangled = "other";
  expect_refused(missing, "kernel 'k' is not in the compiled module");
  Probe two = probe("n");
  two.solution.sources.push_back({"extra.cu", "// more\n"});
  expect_refused(two, "'extra.cu' would be compiled as a second translation unit");
}

// A dispatching plan (1024 threads a row up to batch 8, 256 up to batch 512, then two rows of 128
// threads a block): the launcher tests the conditions in the plan's order over the axis it reads
// from the tensors, each branch named by its condition, and declares each variant's kernel.
TEST(FibExport, VariantsBecomeAnIfChainInThePlansOrder) {
  TempDir dir;
  Exported e = export_seed(dir, "tests/fixtures/check/dispatch_by_batch.cu", "rmsnorm_h4096");
  const std::string& l = e.launcher;
  const std::string v0 =
      "  if ((ax_batch_size <= INT64_C(8))) {  // variant 0: batch_size <= 8\n"
      "    {  // launch 0: rmsnorm_wide\n";
  const std::string v1 =
      "  } else if ((ax_batch_size <= INT64_C(512))) {  // variant 1: batch_size <= 512\n"
      "    {  // launch 0: rmsnorm_mid\n";
  const std::string v2 =
      "  } else {  // variant 2: otherwise\n"
      "    {  // launch 0: rmsnorm_pairs\n";
  ASSERT_TRUE(has(l, v0)) << l;
  ASSERT_TRUE(has(l, v1)) << l;
  ASSERT_TRUE(has(l, v2)) << l;
  EXPECT_LT(l.find(v0), l.find(v1));
  EXPECT_LT(l.find(v1), l.find(v2));
  EXPECT_TRUE(has(l, "  const int64_t ax_batch_size = t_hidden_states.size(0);\n")) << l;
  for (const char* kernel : {"rmsnorm_wide", "rmsnorm_mid", "rmsnorm_pairs"}) {
    EXPECT_TRUE(has(l, std::string("__asm__(\"") + kernel + "\");  // " + kernel)) << kernel;
  }
  // Each variant's own grid and block.
  EXPECT_TRUE(has(l, "dim3(dim((kx_cdiv(ax_batch_size, INT64_C(2)))")) << l;
  EXPECT_TRUE(has(l, "dim3(dim((INT64_C(128)), \"block.x\"), dim((INT64_C(2)), \"block.y\")")) << l;
  // The kernel source keeps the plan, so kharness reads the same variants back.
  Solution back = parse_single_file_solution(e.kernel, "dispatch_by_batch.cu");
  ASSERT_EQ(back.plan.variants.size(), 3u);
  EXPECT_EQ(back.plan.variants[1].when->text(), "batch_size <= 512");
}

// The probe's plan with two variants: the first on `when`, the second unconditional.
Probe probe_variants(const std::string& when) {
  Probe p = probe("n");
  p.solution = parse_single_file_solution(
      "/* kharness {\"definition\": \"probe\", \"variants\": ["
      "{\"when\": \"" +
          when +
          "\", \"launches\": [{\"kernel\": \"k\", \"grid\": [1, 1, 1], \"block\": [128, 1, 1], "
          "\"args\": [\"x\", \"y\", \"n\"]}]}, "
          "{\"launches\": [{\"kernel\": \"k\", \"grid\": [\"cdiv(n, 128)\", 1, 1], "
          "\"block\": [128, 1, 1], \"args\": [\"x\", \"y\", \"n\"]}]}]} */\n"
          "extern \"C\" __global__ void k(const float* x, float* y, int n) {}\n",
      "probe.cu");
  return p;
}

TEST(FibExport, VariantConditionsTranslateOrAreRefusedByField) {
  Probe fine = probe_variants("n <= 4096 && (n % 128 == 0 || !(n > 64))");
  std::string l = exchange::fib_launcher_source(fine.solution, fine.definition, fine.kernels, "run",
                                                "probe.cu");
  EXPECT_TRUE(has(l,
                  "  if ((ax_n <= INT64_C(4096) && (ax_n % INT64_C(128) == INT64_C(0) || "
                  "!(ax_n > INT64_C(64))))) {  // variant 0: n <= 4096 && (n % 128 == 0 || "
                  "!(n > 64))\n"))
      << l;
  // One stub for the kernel both variants launch.
  EXPECT_EQ(l.find("__asm__(\"k\")"), l.rfind("__asm__(\"k\")")) << l;
  expect_refused(probe_variants("steps > 4"),
                 "variants[0].when \"steps > 4\": var axis 'steps' is the size of no tensor");
  expect_refused(probe_variants("q < 8"),
                 "variants[0].when \"q < 8\": the plan's expression names 'q', which is not an "
                 "axis");
}

TEST(FibExport, CliRefusalIsOneLineExit1) {
  TempDir dir;
  std::string src = (dir.path() / "fast.cu").string();
  std::string seed = (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string();
  ASSERT_EQ(testing::run_command("sed 's/\"-std=c++17\"/\"-std=c++17\", \"--use_fast_math\"/' '" +
                                 seed + "' > '" + src + "'")
                .exit_code,
            0);
  auto r = testing::kharness("--archive '" + dir.path().string() + "/a' export '" + src +
                             "' --operator rmsnorm_h4096 --fib '" + dir.path().string() +
                             "/o.json' --arch sm_90a");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot export to FlashInfer-Bench: compile option '--use_fast_math'"),
            std::string::npos)
      << r.out;
  // No operator anywhere: bad usage.
  auto none = testing::kharness(
      "export '" + (testing::source_dir() / "operators/_families/gemm/seed.cu").string() +
      "' --fib '" + dir.path().string() + "/g.json'");
  EXPECT_EQ(none.exit_code, 2) << none.out;
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

// The sm_90a gemm_fp8 seed: its two TMA maps become tensor_map() calls over the operands with the
// layout kharness resolves (innermost first: dims {K, M}, a row stride of K elements, 128 x 128
// boxes, 128-byte swizzle, 256-byte L2 promotion, bytes for fp8), 132 persistent blocks and 160 KiB
// of dynamic shared memory opted into. It needs sm_90a: the kernel source stops a plain build
// with the setting that fixes it, and the export says so in one line.
TEST(FibExport, Sm90aGemmFp8SeedEncodesItsTensorMaps) {
  TempDir dir;
  std::string out = (dir.path() / "fp8.json").string();
  auto r = testing::kharness("--archive '" + dir.path().string() + "/a' export '" +
                             (testing::source_dir() / kFp8Seed).string() +
                             "' --operator gemm_fp8 --fib '" + out + "' --arch sm_90a");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("these kernels need sm_90a and FlashInfer-Bench's builder compiles for the "
                       "GPU's plain arch (a Solution carries no compile flags): run "
                       "FlashInfer-Bench with TVM_FFI_CUDA_ARCH_LIST=\"9.0a\""),
            std::string::npos)
      << r.out;
  Exported e = export_seed(dir, kFp8Seed, "gemm_fp8");
  const std::string& l = e.launcher;
  EXPECT_TRUE(has(l, "#include <cuda.h>"));
  EXPECT_TRUE(has(l, "cudaGetDriverEntryPointByVersion(\"cuTensorMapEncodeTiled\""));
  EXPECT_TRUE(has(l,
                  "alignas(64) CUtensorMap a0 = tensor_map(  // \"a_map\"\n"
                  "        \"a_map\", \"gemm_fp8_tma_wgmma_kernel\", "
                  "CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, 1,\n"
                  "        data(t_A), (INT64_C(0)), tensor_bytes(t_A),\n"
                  "        {(ax_K), (ax_M)}, {(ax_K)}, {(INT64_C(128)), (INT64_C(128))}, "
                  "{(INT64_C(1)), (INT64_C(1))},\n"
                  "        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, "
                  "CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);"))
      << l;
  EXPECT_TRUE(has(l, "data(t_B), (INT64_C(0)), tensor_bytes(t_B),\n        {(ax_K), (ax_N)}"));
  EXPECT_TRUE(has(l, "void* args[] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8};"));
  EXPECT_TRUE(has(l, "const int64_t ax_num_k_blocks = t_A_scale.size(1);"));
  EXPECT_TRUE(has(l,
                  "kx_min(kx_cdiv(ax_M, INT64_C(128)) * kx_cdiv(ax_N, INT64_C(128)), "
                  "INT64_C(132))"));
  EXPECT_TRUE(has(l, "INT64_C(5) * (INT64_C(128) + INT64_C(128)) * INT64_C(128) + INT64_C(1024)"));
  EXPECT_TRUE(has(e.kernel,
                  "*/\n// kharness export: the arch-specific target these kernels need\n"
                  "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
                  "#error \"these kernels need sm_90a: build with TVM_FFI_CUDA_ARCH_LIST=9.0a"));
  EXPECT_TRUE(has(e.solution["description"].get<std::string>(),
                  "Needs sm_90a: run FlashInfer-Bench with TVM_FFI_CUDA_ARCH_LIST=\"9.0a\""));
}

// The sm_90a fp16 GEMM seed: tensor maps, a workspace the first launch writes and the second (PDL)
// reads, both sized by the plan's workspace expression.
TEST(FibExport, Sm90aGemmSeedEncodesMapsAndChainsThePdlReduction) {
  TempDir dir;
  Exported e = export_seed(dir, kGemmSeed, "gemm_n6144_k4096");
  const std::string& l = e.launcher;
  EXPECT_TRUE(has(l,
                  "const int64_t ws_bytes = (INT64_C(16) + kx_min(INT64_C(1), INT64_C(64) / "
                  "ax_M) * INT64_C(16) * ax_M * ax_N);\n  void* ws = workspace(guard.device, "
                  "ws_bytes);"))
      << l;
  EXPECT_TRUE(has(l, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 2,\n        data(t_A)"));
  EXPECT_TRUE(has(l, "{(ax_K), (ax_N)}, {(ax_K)}, {(INT64_C(64)), (INT64_C(256))}"));
  EXPECT_TRUE(has(l, "extern \"C\" void kharness_stub_1(void) __asm__(\"gemm_split_k_reduce\");"));
  // The reduction is the PDL launch; the GEMM opts into 193 KiB of shared memory.
  EXPECT_TRUE(has(l, "\"shared_bytes\"), stream, args, true, false);"));
  EXPECT_TRUE(has(l, "INT64_C(4) * (INT64_C(128) + INT64_C(256)) * INT64_C(128) + INT64_C(1024)"));
  EXPECT_TRUE(has(e.kernel, "__CUDA_ARCH_FEAT_SM90_ALL"));
}

// A map over the workspace takes the workspace's address and size; a view's strides are written
// as the plan gives them.
TEST(FibExport, WorkspaceMapsAndViews) {
  Definition d = parse_definition_text(R"({
    "name": "mapped", "op_type": "probe",
    "axes": {"M": {"type": "var"}, "K": {"type": "const", "value": 256}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}},
    "outputs": {"C": {"shape": ["M", "K"], "dtype": "float32"}}
  })",
                                       "mapped.json");
  Solution s = parse_single_file_solution(
      R"(/* kharness {"definition": "mapped", "launches": [{"kernel": "k", "grid": [1, 1, 1],
      "block": [128, 1, 1], "tensor_maps": {
        "v": {"tensor": "A", "shape": ["M", 2, 128], "strides": ["K", 128], "box": [8, 1, 64],
              "oob_fill": "nan", "interleave": "none"},
        "w": {"tensor": "workspace", "dtype": "float32", "shape": ["M", 64],
              "offset_bytes": 256, "box": [16, 32], "l2_promotion": "128B"}},
      "args": [{"tensor_map": "v"}, {"tensor_map": "w"}, "C"]}],
      "workspace_bytes": "256 + M * 256"} */
extern "C" __global__ void k() {}
)",
      "mapped.cu");
  KernelInfo k;
  k.name = k.mangled = "k";
  k.params = {{"b8", 128, 64}, {"b8", 128, 64}, {"u64", 8, 8}};
  std::string l = exchange::fib_launcher_source(s, d, {k}, "run", "mapped.cu");
  EXPECT_TRUE(has(l,
                  "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, 2,\n        data(t_A), (INT64_C(0)), "
                  "tensor_bytes(t_A),\n        {(INT64_C(128)), (INT64_C(2)), (ax_M)}, "
                  "{(INT64_C(128)), (ax_K)}, {(INT64_C(64)), (INT64_C(1)), (INT64_C(8))}"))
      << l;
  EXPECT_TRUE(has(l, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"));
  EXPECT_TRUE(has(l,
                  "CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, 4,\n        ws, (INT64_C(256)), "
                  "ws_bytes,\n        {(INT64_C(64)), (ax_M)}, {(INT64_C(64))}"))
      << l;
  EXPECT_TRUE(has(l, "CU_TENSOR_MAP_L2_PROMOTION_L2_128B"));
  EXPECT_TRUE(has(l, "void* args[] = {&a0, &a1, &a2};"));
  // A map parameter of the wrong size is refused.
  k.params[1].size = 8;
  try {
    exchange::fib_launcher_source(s, d, {k}, "run", "mapped.cu");
    ADD_FAILURE() << "exported a map into an 8-byte parameter";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a tensor map needs a 128-byte CUtensorMap parameter"),
              std::string::npos)
        << e.what();
  }
}

// What comes back from the exported JSON is the plan and the kernels kharness checked: the same
// plan, the same kernel source after the export's guard, and the same kernels with the same
// parameters when kharness compiles it.
TEST(FibExport, Sm90aRoundTripGivesTheSamePlanAndKernels) {
  TempDir dir;
  for (auto [seed, op] : {std::pair<std::string, std::string>{kFp8Seed, "gemm_fp8"},
                          {kGemmSeed, "gemm_n6144_k4096"},
                          {"tests/fixtures/launch/pdl_cooperative_copy.cu", "copy_f32"}}) {
    export_seed(dir, seed, op);
    std::string file = (dir.path() / (op + ".json")).string();
    Solution back = load_solution(file);
    Solution original = load_solution(testing::source_dir() / seed);
    EXPECT_EQ(back.plan.raw, original.plan.raw) << op;
    ASSERT_EQ(back.plan.launches.size(), original.plan.launches.size());
    for (std::size_t i = 0; i < back.plan.launches.size(); ++i) {
      EXPECT_EQ(back.plan.launches[i].pdl, original.plan.launches[i].pdl);
      EXPECT_EQ(back.plan.launches[i].cooperative, original.plan.launches[i].cooperative);
      EXPECT_EQ(back.plan.launches[i].tensor_maps.size(),
                original.plan.launches[i].tensor_maps.size());
    }
    EXPECT_EQ(back.sources.size(), 1u) << "the generated launcher is left out";
    auto a = testing::kharness("compile '" + file + "' --operator " + op + " --arch sm_90a --json");
    auto b = testing::kharness("compile '" + (testing::source_dir() / seed).string() +
                               "' --operator " + op + " --arch sm_90a --json");
    ASSERT_EQ(a.exit_code, 0) << a.out;
    ASSERT_EQ(b.exit_code, 0) << b.out;
    json ja = json::parse(a.out.substr(a.out.find('{')));
    json jb = json::parse(b.out.substr(b.out.find('{')));
    EXPECT_EQ(ja["kernels"], jb["kernels"]) << op;
  }
}

// PDL and cooperative launches become cudaLaunchKernelEx attributes.
TEST(FibExport, PdlAndCooperativeBecomeLaunchAttributes) {
  TempDir dir;
  Exported e = export_seed(dir, "tests/fixtures/launch/pdl_cooperative_copy.cu", "copy_f32");
  EXPECT_TRUE(has(e.launcher, "stream, args, false, true);")) << e.launcher;
  EXPECT_TRUE(has(e.launcher, "stream, args, true, false);")) << e.launcher;
  EXPECT_TRUE(has(e.launcher, "cudaLaunchAttributeProgrammaticStreamSerialization"));
  EXPECT_TRUE(has(e.launcher, "cudaLaunchAttributeCooperative"));
}

}  // namespace
}  // namespace kharness
