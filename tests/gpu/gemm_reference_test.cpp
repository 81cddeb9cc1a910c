// The gemm family's reference kernel against a plain double-precision GEMM on the host.
// The reference serves every gemm_n*_k* definition (ours and FlashInfer-Bench's), so it is run
// through its own plan with PlanLauncher on small inline definitions (odd M, N and K that are not
// multiples of its 16x16 tile) and on real definitions at small M. Inputs are made on the host
// as fp16; every output element must be within fp16 rounding of the exact C = A @ B^T:
// |got - exact| <= 2^-10 |exact| + 1e-4 (one fp16 ulp relative, plus room for float32
// accumulation error near zero). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

std::string gemm_definition_json(std::int64_t n, std::int64_t k) {
  const std::string name = "gemm_n" + std::to_string(n) + "_k" + std::to_string(k);
  return R"({"name": ")" + name + R"(", "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": )" +
         std::to_string(n) + R"(},
             "K": {"type": "const", "value": )" +
         std::to_string(k) + R"(}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "float16"},
               "B": {"shape": ["N", "K"], "dtype": "float16"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float16"}},
    "reference": "", "kharness": {"family": "gemm"}})";
}

// Rounds host values to fp16 in place and returns the fp16 bytes.
std::vector<std::uint8_t> to_fp16(std::vector<double>* values) {
  std::vector<std::uint8_t> out(values->size() * 2);
  for (std::size_t i = 0; i < values->size(); ++i) {
    from_double(DType::kFloat16, (*values)[i], &out[2 * i]);
    (*values)[i] = to_double(DType::kFloat16, &out[2 * i]);
  }
  return out;
}

// Runs `solution` (compiled for `definition`) on fp16 A [M, K] and B [N, K]; returns C's bytes.
std::vector<std::uint8_t> run_gemm(const Solution& solution, const Definition& definition,
                                   std::int64_t m, const std::vector<std::uint8_t>& a_bytes,
                                   const std::vector<std::uint8_t>& b_bytes) {
  const std::int64_t n = definition.find_axis("N")->value, k = definition.find_axis("K")->value;
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  const CompileResult compiled = compile_solution(solution, &definition, nullptr, options);
  EXPECT_TRUE(compiled.ok()) << compiled.log;
  if (!compiled.ok()) return {};

  device::PrimaryContext context(0);
  device::Module module(compiled.cubin);
  device::PlanLauncher launcher(solution.plan, compiled.kernels, module);
  device::Stream stream;
  const std::size_t c_size = static_cast<std::size_t>(m * n) * 2;
  device::DeviceBuffer da(a_bytes.size()), db(b_bytes.size()), dc(c_size);
  da.upload(a_bytes.data(), a_bytes.size());
  db.upload(b_bytes.data(), b_bytes.size());
  dc.fill(0xFF);  // 0xFFFF: an fp16 NaN, so an unwritten element fails

  device::LaunchEnv env;
  env.definition = &definition;
  env.axes = {{"M", m}, {"N", n}, {"K", k}};
  env.tensors = {{"A", da.ptr()}, {"B", db.ptr()}, {"C", dc.ptr()}};
  const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
  EXPECT_TRUE(outcome.ok) << outcome.message;
  std::vector<std::uint8_t> c_bytes(c_size);
  dc.download(c_bytes.data(), c_bytes.size());
  return c_bytes;
}

// Runs the family reference (compiled for `definition`) at M rows and checks every element; with
// `twin`, runs it on the same inputs too and requires the same bytes.
void run_and_check(const Solution& reference, const Definition& definition, std::int64_t m,
                   std::uint64_t seed, const Solution* twin = nullptr) {
  const std::int64_t n = definition.find_axis("N")->value, k = definition.find_axis("K")->value;
  SCOPED_TRACE(definition.name + " at M = " + std::to_string(m));

  // A ~ normal(0, 1) with row r scaled by 2^(r % 5 - 2) (magnitudes 1/4 to 4), B ~ normal(0,
  // 1/sqrt(K)): |C| is O(1), the definitions' own input ranges.
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < m; ++r) {
    const double scale = std::ldexp(1.0, static_cast<int>(r % 5) - 2);
    for (std::int64_t i = 0; i < k; ++i) a[r * k + i] = scale * normal(rng);
  }
  const double b_std = 1.0 / std::sqrt(static_cast<double>(k));
  for (auto& v : b) v = b_std * normal(rng);
  const auto a_bytes = to_fp16(&a), b_bytes = to_fp16(&b);
  const std::vector<std::uint8_t> c_bytes = run_gemm(reference, definition, m, a_bytes, b_bytes);
  ASSERT_EQ(c_bytes.size(), static_cast<std::size_t>(m * n) * 2);
  if (twin) {
    const std::vector<std::uint8_t> twin_bytes = run_gemm(*twin, definition, m, a_bytes, b_bytes);
    std::size_t differ = 0;
    for (std::size_t i = 0; i + 1 < c_bytes.size() && i + 1 < twin_bytes.size(); i += 2)
      differ += (c_bytes[i] != twin_bytes[i] || c_bytes[i + 1] != twin_bytes[i + 1]) ? 1 : 0;
    EXPECT_EQ(twin_bytes.size(), c_bytes.size());
    EXPECT_EQ(differ, 0u) << "elements that differ from the one-thread-per-element reference";
  }

  int bad = 0;
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t col = 0; col < n; ++col) {
      double exact = 0.0;
      for (std::int64_t i = 0; i < k; ++i) exact += a[r * k + i] * b[col * k + i];
      const double got = to_double(DType::kFloat16, &c_bytes[2 * (r * n + col)]);
      const double limit = std::ldexp(std::fabs(exact), -10) + 1e-4;
      if (!std::isfinite(got) || std::fabs(got - exact) > limit) {
        if (++bad <= 10) {
          ADD_FAILURE() << "C[" << r << ", " << col << "]: expected " << exact << ", got " << got
                        << " (|diff| " << std::fabs(got - exact) << " > " << limit << ")";
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements off by more than fp16 rounding";
}

TEST(GemmReference, SmallShapesMatchDoublePrecision) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_n4096_k14336");
  ASSERT_TRUE(op.reference.has_value());
  ASSERT_EQ(op.definition.family(), "gemm");
  const Solution reference = load_solution(*op.reference);

  const Definition small = parse_definition_text(gemm_definition_json(64, 128), "gemm_n64_k128");
  for (std::int64_t m : {1, 3, 16}) run_and_check(reference, small, m, 7000 + m);
  // N and K not multiples of 16: partial tiles in every direction.
  const Definition odd = parse_definition_text(gemm_definition_json(100, 200), "gemm_n100_k200");
  for (std::int64_t m : {1, 17, 33}) run_and_check(reference, odd, m, 8000 + m);
  const Definition wide = parse_definition_text(gemm_definition_json(96, 256), "gemm_n96_k256");
  run_and_check(reference, wide, 17, 9017);
}

TEST(GemmReference, RealDefinitionsAtSmallM) {
  SKIP_WITHOUT_GPU();
  const OperatorRegistry registry = OperatorRegistry::from_environment({});
  for (const char* name : {"gemm_n4096_k14336", "gemm_n6144_k4096", "gemm_n28672_k4096"}) {
    const Operator op = registry.load(name);
    ASSERT_TRUE(op.reference.has_value()) << name;
    const Solution reference = load_solution(*op.reference);
    run_and_check(reference, op.definition, 1, 100);
    run_and_check(reference, op.definition, 3, 103);
  }
}

// The 4x4-per-thread reference against the one-thread-per-element tiling it replaced: the same
// float32 multiply-adds in the same order per element, so the same bytes, on partial tiles in
// every direction and on real shapes. gemm_fp8's pair is compared through `check` (the old one as
// the candidate: every trial's largest difference must be exactly 0).
TEST(ReferenceGpu, GemmReferencesAgreeBitForBitWithOneThreadPerElement) {
  SKIP_WITHOUT_GPU();
  const OperatorRegistry registry = OperatorRegistry::from_environment({});
  const Solution reference = load_solution(*registry.load("gemm_n6144_k4096").reference);
  const Solution old = load_solution(testing::fixture("reference/gemm_one_per_thread.cu"));
  const Definition odd = parse_definition_text(gemm_definition_json(100, 200), "gemm_n100_k200");
  for (std::int64_t m : {1, 17, 65, 130}) run_and_check(reference, odd, m, 500 + m, &old);
  const Operator real = registry.load("gemm_n6144_k4096");
  for (std::int64_t m : {7, 972, 2053}) run_and_check(reference, real.definition, m, 600 + m, &old);

  auto r = testing::run_command(
      std::string("'") + KHARNESS_BINARY + "' check '" +
      testing::fixture("reference/gemm_fp8_one_per_thread.cu").string() +
      "' --operator gemm_fp8 --seed 3 --json --workloads d8ea2ff1,deae70b3,4801a294,899889d8,"
      "253b07e0,47e35e04 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  const nlohmann::json v = nlohmann::json::parse(r.out);
  ASSERT_EQ(v["workloads"].size(), 6u);
  for (const auto& w : v["workloads"]) {
    for (const auto& t : w["trials"]) {
      for (const auto& c : t["comparisons"]) {
        EXPECT_EQ(c["max_abs_error"].get<double>(), 0.0) << w["axes"].dump() << c.dump();
        EXPECT_EQ(c["mismatches"].get<std::uint64_t>(), 0u) << w["axes"].dump();
      }
    }
  }
}

}  // namespace
}  // namespace kharness
