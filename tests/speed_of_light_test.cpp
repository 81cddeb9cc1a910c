#include "bench/speed_of_light.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "kharness/definition.hpp"
#include "kharness/error.hpp"
#include "test_util.hpp"

namespace kharness::bench {
namespace {

using testing::source_dir;
using testing::TempDir;

std::vector<GpuSpec> shipped_specs() { return load_gpu_specs(source_dir() / "configs" / "gpus"); }

const GpuSpec& h200() {
  static const std::vector<GpuSpec> specs = shipped_specs();
  const GpuSpec* g = match_gpu(specs, "NVIDIA H200");
  if (!g) throw std::runtime_error("configs/gpus has no H200");
  return *g;
}

// A GEMM over a var axis M: C[M, N] = A[M, K] * B[N, K]^T, all `dtype`.
std::string gemm_json(const std::string& dtype, const std::string& extra_inputs = "",
                      bool formulas = true) {
  std::string k = formulas ? R"J(, "kharness": {"flops": "2 * M * N * K",
                                    "bytes": "2 * (M * K + N * K + M * N)"})J"
                           : "";
  return R"J({"name": "gemm_n4096_k4096", "op_type": "gemm",
  "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4096},
           "K": {"type": "const", "value": 4096}},
  "inputs": {"A": {"shape": ["M", "K"], "dtype": ")J" +
         dtype + R"J("}, "B": {"shape": ["N", "K"], "dtype": ")J" + dtype + "\"}" + extra_inputs +
         R"J(},
  "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}})J" +
         k + "}";
}

Bindings gemm_axes(std::int64_t m) { return {{"M", m}, {"N", 4096}, {"K", 4096}}; }

void write(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

const char* kValidSpec = R"J({
  "match": "TestGPU", "arch": "sm_90a", "sm_count": 132, "l2_bytes": 52428800,
  "dram_bandwidth_bytes_per_s": 3.35e12, "max_sm_clock_mhz": 1980,
  "peak_flops": {"float32": 6.7e13, "bfloat16": 9.895e14}, "schema": "kharness.gpu/1"})J";

// Expects loading `dir` to throw an input Error whose location contains `where` and message `what`.
void expect_spec_error(const std::filesystem::path& dir, const std::string& where,
                       const std::string& what) {
  try {
    load_gpu_specs(dir);
    ADD_FAILURE() << "no error; expected " << where << ": " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage) << e.message();
    EXPECT_NE(e.where().find(where), std::string::npos) << e.message();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.message();
  }
}

TEST(SpeedOfLight, LoadsTheShippedGpuSpecs) {
  auto specs = shipped_specs();
  ASSERT_GE(specs.size(), 3u);
  const GpuSpec& g = h200();
  EXPECT_EQ(g.arch, "sm_90a");
  EXPECT_EQ(g.sm_count, 132);
  EXPECT_EQ(g.l2_bytes, 62914560);
  EXPECT_DOUBLE_EQ(g.dram_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(g.measured_copy_bandwidth, 4.0e12);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980);
  EXPECT_DOUBLE_EQ(g.peak_flops.at("bfloat16"), 989.5e12);

  const GpuSpec* b200 = match_gpu(specs, "NVIDIA B200");
  ASSERT_NE(b200, nullptr);
  EXPECT_EQ(b200->sm_count, 148);
  EXPECT_EQ(b200->arch, "sm_100a");
  EXPECT_DOUBLE_EQ(b200->peak_flops.at("bfloat16"), 2.25e15);
  EXPECT_DOUBLE_EQ(b200->peak_flops.at("float8_e4m3fn"), 4.5e15);
  EXPECT_DOUBLE_EQ(b200->measured_copy_bandwidth, 0.0);  // none measured yet
}

TEST(SpeedOfLight, MatchesTheDriverNameBySubstringMostSpecificFirst) {
  auto specs = shipped_specs();
  ASSERT_NE(match_gpu(specs, "NVIDIA H200"), nullptr);
  EXPECT_EQ(match_gpu(specs, "NVIDIA H200")->match, "H200");
  ASSERT_NE(match_gpu(specs, "NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_EQ(match_gpu(specs, "NVIDIA H100 80GB HBM3")->match, "H100");
  EXPECT_EQ(match_gpu(specs, "NVIDIA GB200"), nullptr);  // not a B200
  EXPECT_EQ(match_gpu(specs, "NVIDIA A100-SXM4-80GB"), nullptr);
  EXPECT_EQ(match_gpu(specs, ""), nullptr);

  GpuSpec any = parse_gpu_spec(kValidSpec, "a.json");
  GpuSpec h100 = any, pcie = any;
  h100.match = "H100";
  pcie.match = "H100 PCIe";
  std::vector<GpuSpec> two = {h100, pcie};
  EXPECT_EQ(match_gpu(two, "NVIDIA H100 PCIe")->match, "H100 PCIe");
  EXPECT_EQ(match_gpu(two, "NVIDIA H100 80GB HBM3")->match, "H100");
}

TEST(SpeedOfLight, RmsnormAtBatch16384IsMemoryBoundOnH200) {
  Definition d = load_definition(source_dir() / "operators" / "rmsnorm_h4096" / "definition.json");
  Bindings axes = {{"batch_size", 16384}, {"hidden_size", 4096}};
  SolEstimate e = speed_of_light(h200(), d, axes, false);
  // bytes = 2 * 16384 * 4096 * 2 + 4096 * 2: read and write the activation, read the weight.
  const double bytes = 2.0 * 16384 * 4096 * 2 + 4096 * 2;
  const double flops = 4.0 * 16384 * 4096;
  EXPECT_DOUBLE_EQ(e.bytes, bytes);
  EXPECT_DOUBLE_EQ(e.flops, flops);
  EXPECT_EQ(e.bound, "memory");
  EXPECT_DOUBLE_EQ(e.memory_seconds, bytes / 4.8e12);
  EXPECT_DOUBLE_EQ(e.seconds, bytes / 4.8e12);  // about 55.9 us
  EXPECT_NEAR(e.seconds, 55.93e-6, 0.01e-6);
  EXPECT_EQ(e.peak_dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(e.compute_seconds, flops / 989.5e12);
  EXPECT_DOUBLE_EQ(e.bandwidth, 4.8e12);
  EXPECT_TRUE(e.note.empty()) << e.note;

  SolEstimate measured = speed_of_light(h200(), d, axes, true);
  EXPECT_DOUBLE_EQ(measured.seconds, bytes / 4.0e12);
  EXPECT_DOUBLE_EQ(measured.bandwidth, 4.0e12);

  // A kernel at 70 us reaches 80% of speed of light.
  EXPECT_NEAR(sol_fraction(e.seconds, 69.91e-6), 0.8, 1e-3);
}

TEST(SpeedOfLight, GemmIsComputeBoundAtLargeMAndMemoryBoundAtSmallM) {
  Definition d = parse_definition_text(gemm_json("bfloat16"), "gemm.json");
  SolEstimate large = speed_of_light(h200(), d, gemm_axes(8192), false);
  const double flops = 2.0 * 8192 * 4096 * 4096;
  const double bytes = 2.0 * (8192.0 * 4096 + 4096.0 * 4096 + 8192.0 * 4096);
  EXPECT_EQ(large.bound, "compute");
  EXPECT_EQ(large.peak_dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(large.compute_seconds, flops / 989.5e12);  // about 278 us
  EXPECT_DOUBLE_EQ(large.memory_seconds, bytes / 4.8e12);     // about 35 us
  EXPECT_DOUBLE_EQ(large.seconds, large.compute_seconds);

  SolEstimate decode = speed_of_light(h200(), d, gemm_axes(1), false);
  EXPECT_EQ(decode.bound, "memory");  // reading B dominates
  EXPECT_DOUBLE_EQ(decode.seconds, 2.0 * (4096.0 + 4096.0 * 4096 + 4096.0) / 4.8e12);

  // The ridge: 2MNK / 989.5e12 = 2(MK + NK + MN) / 4.8e12 at M ~ 229 for N = K = 4096.
  EXPECT_EQ(speed_of_light(h200(), d, gemm_axes(128), false).bound, "memory");
  EXPECT_EQ(speed_of_light(h200(), d, gemm_axes(512), false).bound, "compute");
}

TEST(SpeedOfLight, ComputeDtypeIsTheFastestFloatingTensorInput) {
  const GpuSpec& g = h200();
  // fp8 operands with float32 scale tensors and a float32 scalar: the fp8 peak.
  std::string scales = R"J(, "a_scale": {"shape": ["M"], "dtype": "float32"},
                            "alpha": {"shape": null, "dtype": "float32"})J";
  Definition fp8 = parse_definition_text(gemm_json("float8_e4m3fn", scales), "fp8.json");
  EXPECT_EQ(compute_dtype(g, fp8), "float8_e4m3fn");
  SolEstimate e = speed_of_light(g, fp8, gemm_axes(8192), false);
  EXPECT_DOUBLE_EQ(e.compute_seconds, 2.0 * 8192 * 4096 * 4096 / 1979e12);

  EXPECT_EQ(compute_dtype(g, parse_definition_text(gemm_json("float8_e5m2"), "e5.json")),
            "float8_e4m3fn");  // no e5m2 peak listed: the same tensor-core rate
  EXPECT_EQ(compute_dtype(g, parse_definition_text(gemm_json("float16"), "h.json")), "float16");
  EXPECT_EQ(compute_dtype(g, parse_definition_text(gemm_json("float32"), "f.json")), "float32");
  // Integer tensors only (an index kernel): float32 as the fallback.
  EXPECT_EQ(compute_dtype(g, parse_definition_text(gemm_json("int32"), "i.json")), "float32");

  GpuSpec no_fp8 = g;
  no_fp8.peak_flops.erase("float8_e4m3fn");
  EXPECT_EQ(compute_dtype(no_fp8, fp8), "float32");  // the next floating input is the scale
}

TEST(SpeedOfLight, MissingFormulasLeaveTheirTermZeroAndSaySo) {
  Definition none = parse_definition_text(gemm_json("bfloat16", "", false), "none.json");
  SolEstimate e = speed_of_light(h200(), none, gemm_axes(64), false);
  EXPECT_DOUBLE_EQ(e.seconds, 0.0);
  EXPECT_EQ(e.bound, "");
  EXPECT_NE(e.note.find("kharness.flops"), std::string::npos) << e.note;
  EXPECT_NE(e.note.find("kharness.bytes"), std::string::npos) << e.note;
  EXPECT_DOUBLE_EQ(sol_fraction(e.seconds, 1e-5), 0.0);

  Definition bytes_only = parse_definition_text(
      R"J({"name": "copy", "op_type": "copy", "axes": {"n": {"type": "var"}},
           "inputs": {"x": {"shape": ["n"], "dtype": "bfloat16"}},
           "outputs": {"y": {"shape": ["n"], "dtype": "bfloat16"}},
           "kharness": {"bytes": "4 * n"}})J",
      "copy.json");
  SolEstimate c = speed_of_light(h200(), bytes_only, {{"n", 1 << 20}}, false);
  EXPECT_EQ(c.bound, "memory");
  EXPECT_DOUBLE_EQ(c.seconds, 4.0 * (1 << 20) / 4.8e12);
  EXPECT_DOUBLE_EQ(c.compute_seconds, 0.0);
  EXPECT_NE(c.note.find("flops"), std::string::npos);

  // An axis left unbound: the formula cannot be evaluated, the estimate says why, nothing throws.
  Definition d = parse_definition_text(gemm_json("bfloat16"), "gemm.json");
  SolEstimate unbound = speed_of_light(h200(), d, {{"N", 4096}, {"K", 4096}}, false);
  EXPECT_DOUBLE_EQ(unbound.seconds, 0.0);
  EXPECT_NE(unbound.note.find("cannot be evaluated"), std::string::npos) << unbound.note;
}

TEST(SpeedOfLight, SolFraction) {
  EXPECT_DOUBLE_EQ(sol_fraction(1e-5, 2e-5), 0.5);
  EXPECT_DOUBLE_EQ(sol_fraction(0.0, 2e-5), 0.0);
  EXPECT_DOUBLE_EQ(sol_fraction(1e-5, 0.0), 0.0);
}

TEST(SpeedOfLight, ReadsEveryJsonFileInFileNameOrder) {
  TempDir dir;
  std::string b = kValidSpec;
  b.replace(b.find("TestGPU"), 7, "OtherGPU");
  write(dir.path() / "b.json", b);
  write(dir.path() / "a.json", kValidSpec);
  write(dir.path() / "README.md", "not a spec");
  auto specs = load_gpu_specs(dir.path());
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].match, "TestGPU");
  EXPECT_EQ(specs[1].match, "OtherGPU");
  EXPECT_DOUBLE_EQ(specs[0].measured_copy_bandwidth, 0.0);
  EXPECT_EQ(specs[0].source.filename(), "a.json");
}

TEST(SpeedOfLight, MalformedSpecFilesNameTheFileAndField) {
  struct Case {
    std::string from, to;  // replacement in kValidSpec
    std::string where, what;
  };
  const std::vector<Case> cases = {
      {"\"sm_count\": 132,", "\"sm_count\": 132", "bad.json:", "not valid JSON"},
      {"\"dram_bandwidth_bytes_per_s\": 3.35e12, ", "", "bad.json: dram_bandwidth_bytes_per_s",
       "missing required field"},
      {"3.35e12", "-1", "bad.json: dram_bandwidth_bytes_per_s", "must be > 0"},
      {"\"bfloat16\": 9.895e14", "\"bfloat16\": \"lots\"", "bad.json: peak_flops.bfloat16",
       "expected a number"},
      {"\"bfloat16\": 9.895e14", "\"bfloat17\": 9.895e14", "bad.json: peak_flops.bfloat17",
       "did you mean 'bfloat16'"},
      {"\"sm_count\"", "\"sm_cont\"", "bad.json: sm_cont", "did you mean 'sm_count'"},
      {"\"sm_count\": 132", "\"sm_count\": 13.5", "bad.json: sm_count", "expected an integer"},
      {"\"match\": \"TestGPU\"", "\"match\": 7", "bad.json: match", "expected a string"},
      {"\"kharness.gpu/1\"", "\"kharness.gpu/2\"", "bad.json: schema", "unsupported schema"},
      {"\"sm_90a\"", "\"hopper\"", "bad.json: arch", "expected sm_XY"},
      {"{\"float32\": 6.7e13, \"bfloat16\": 9.895e14}", "{}", "bad.json: peak_flops",
       "no peak given"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.where + " " + c.what);
    TempDir dir;
    std::string text = kValidSpec;
    auto at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    write(dir.path() / "bad.json", text);
    expect_spec_error(dir.path(), c.where, c.what);
  }
  {
    TempDir dir;
    write(dir.path() / "top.json", "[1, 2]");
    expect_spec_error(dir.path(), "top.json", "expected an object");
  }
  {
    TempDir dir;  // two files claiming the same GPU
    write(dir.path() / "a.json", kValidSpec);
    write(dir.path() / "b.json", kValidSpec);
    expect_spec_error(dir.path(), "b.json: match", "also the match of");
  }
  expect_spec_error(source_dir() / "no-such-folder", "no-such-folder", "no such folder");
}

}  // namespace
}  // namespace kharness::bench
