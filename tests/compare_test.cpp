#include "verify/compare.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"

namespace kharness::verify {
namespace {

std::vector<std::uint8_t> encode(DType dtype, const std::vector<double>& values) {
  std::vector<std::uint8_t> out(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i)
    from_double(dtype, values[i], &out[i * dtype_size(dtype)]);
  return out;
}

Tolerance tol(double atol, double rtol, double ratio = 1.0) { return Tolerance{atol, rtol, ratio}; }

TEST(Compare, MismatchNeedsBothAbsAndRelBeyondTolerance) {
  auto e = encode(DType::kFloat32, {1.0, 100.0, 0.001, 0.0});
  // abs 0.5 > atol but rel 0.005 <= rtol: match. 0.001 -> 0.0015: rel 0.5 but abs tiny: match.
  auto g = encode(DType::kFloat32, {1.0, 100.5, 0.0015, 0.0});
  auto c = compare_output("y", DType::kFloat32, e.data(), g.data(), 4, tol(0.01, 0.01));
  EXPECT_EQ(c.comparison.mismatches, 0u);
  EXPECT_DOUBLE_EQ(c.comparison.matched_ratio, 1.0);
  EXPECT_FALSE(output_failure(c, tol(0.01, 0.01)));
  auto bad = encode(DType::kFloat32, {1.0, 103.0, 0.0015, 0.5});
  c = compare_output("y", DType::kFloat32, e.data(), bad.data(), 4, tol(0.01, 0.01));
  EXPECT_EQ(c.comparison.mismatches, 2u);
  EXPECT_EQ(c.comparison.first_bad_index, 1);
  EXPECT_DOUBLE_EQ(c.comparison.expected, 100.0);
  EXPECT_DOUBLE_EQ(c.comparison.got, 103.0);
  EXPECT_DOUBLE_EQ(c.comparison.matched_ratio, 0.5);
  auto f = output_failure(c, tol(0.01, 0.01));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "tolerance");
  EXPECT_EQ(f->evidence["first_bad_index"], 1);
  // A matched-ratio threshold of 0.5 lets the same output pass.
  EXPECT_FALSE(output_failure(c, tol(0.01, 0.01, 0.5)));
}

TEST(Compare, PoisonLeftIsOutputNotWritten) {
  std::vector<double> values(1000, 1.0);
  auto e = encode(DType::kBFloat16, values);
  auto g = e;
  auto poison = poison_element(DType::kBFloat16);
  for (int i = 600; i < 1000; ++i) std::copy(poison.begin(), poison.end(), g.begin() + 2 * i);
  auto c = compare_output("output", DType::kBFloat16, e.data(), g.data(), 1000, tol(0.01, 0.01));
  EXPECT_EQ(c.poison_left, 400u);
  EXPECT_EQ(c.first_poison, 600);
  auto f = output_failure(c, tol(0.01, 0.01));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "output_not_written");
  EXPECT_EQ(f->evidence["unwritten"], 400);
}

TEST(Compare, NanWhereReferenceIsFiniteFailsEvenWithALooseRatio) {
  auto e = encode(DType::kFloat16, {1, 2, 3, 4});
  auto g = encode(DType::kFloat16, {1, 2, std::nan(""), 4});
  auto c = compare_output("o", DType::kFloat16, e.data(), g.data(), 4, tol(0.01, 0.01, 0.5));
  EXPECT_EQ(c.nonfinite, 1u);
  auto f = output_failure(c, tol(0.01, 0.01, 0.5));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "nan_or_inf");
  EXPECT_EQ(f->evidence["first_bad_index"], 2);
  // Where the reference is itself NaN or Inf, the same value matches.
  auto e2 = encode(DType::kFloat32, {std::nan(""), INFINITY});
  auto g2 = encode(DType::kFloat32, {std::nan(""), INFINITY});
  auto c2 = compare_output("o", DType::kFloat32, e2.data(), g2.data(), 2, tol(0.01, 0.01));
  EXPECT_FALSE(output_failure(c2, tol(0.01, 0.01)));
}

TEST(Compare, ParallelResultEqualsSerialOnALargeTensor) {
  const std::uint64_t n = 3'000'001;
  std::vector<double> ev(n), gv(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    ev[i] = std::sin(static_cast<double>(i));
    gv[i] = ev[i] + ((i % 100'003 == 7) ? 0.5 : 0.0);
  }
  auto e = encode(DType::kFloat32, ev);
  auto g = encode(DType::kFloat32, gv);
  auto serial = compare_output("t", DType::kFloat32, e.data(), g.data(), n, tol(1e-3, 1e-3), 1);
  auto parallel = compare_output("t", DType::kFloat32, e.data(), g.data(), n, tol(1e-3, 1e-3), 8);
  EXPECT_EQ(serial.comparison.mismatches, parallel.comparison.mismatches);
  EXPECT_EQ(serial.comparison.first_bad_index, 7);
  EXPECT_EQ(parallel.comparison.first_bad_index, 7);
  EXPECT_DOUBLE_EQ(serial.comparison.max_abs_error, parallel.comparison.max_abs_error);
  EXPECT_GT(serial.comparison.mismatches, 20u);
}

TEST(Compare, ComparatorsByName) {
  EXPECT_NE(find_comparator("elementwise"), nullptr);
  EXPECT_EQ(find_comparator("topk_sets"), nullptr);
  EXPECT_EQ(comparator_names(), (std::vector<std::string>{"elementwise", "topk_set", "sampling"}));
  // "elementwise" is compare_output behind the comparator signature.
  auto e = encode(DType::kFloat32, {1.0, 2.0});
  auto g = encode(DType::kFloat32, {1.0, 2.5});
  auto c = find_comparator("elementwise")("y", DType::kFloat32, e.data(), g.data(), 2,
                                          tol(0.01, 0.01), 1, CompareContext{});
  EXPECT_EQ(c.comparison.mismatches, 1u);
}

TEST(Verdict, JsonRoundTripKeepsWorkloadsTrialsAndNonFiniteNumbers) {
  Verdict v;
  v.solution = "s";
  v.definition = "rmsnorm_h4096";
  v.status = Status::kIncorrectNumerical;
  v.failure = Failure{"tolerance", "bad", {{"first_bad_index", 3}}};
  v.seed = 42;
  WorkloadVerdict w;
  w.uuid = "u1";
  w.axes = {{"batch_size", 7}};
  w.status = Status::kIncorrectNumerical;
  TrialResult t;
  t.seed = 99;
  t.status = Status::kIncorrectNumerical;
  Comparison c;
  c.tensor = "output";
  c.max_abs_error = INFINITY;
  c.got = std::nan("");
  t.comparisons.push_back(c);
  w.trials.push_back(t);
  v.workloads.push_back(w);
  nlohmann::json j = to_json(v);
  auto text = j.dump();  // must be valid JSON: no bare NaN/Infinity
  Verdict back = verdict_from_json(nlohmann::json::parse(text));
  EXPECT_EQ(back.status, Status::kIncorrectNumerical);
  EXPECT_EQ(back.failure->kind, "tolerance");
  EXPECT_EQ(back.seed, 42u);
  ASSERT_EQ(back.workloads.size(), 1u);
  EXPECT_EQ(back.workloads[0].trials[0].seed, 99u);
  EXPECT_TRUE(std::isinf(back.workloads[0].trials[0].comparisons[0].max_abs_error));
  EXPECT_TRUE(std::isnan(back.workloads[0].trials[0].comparisons[0].got));
  EXPECT_THROW(verdict_from_json(nlohmann::json::parse(R"({"status": "MAYBE"})")), Error);
}

TEST(CheckCli, WithoutAGpuCompileProblemsStillReportAndGpuWorkExitsThree) {
  auto probe = testing::kharness("doctor --json");
  if (probe.out.find("\"available\": true") != std::string::npos)
    GTEST_SKIP() << "this machine has a driver";
  // A compile error needs no GPU: it is a verdict (exit 1).
  auto bad = testing::kharness("check '" + testing::fixture("bad/syntax_error_line37.cu").string() +
                               "' --no-cache");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("COMPILE_ERROR"), std::string::npos) << bad.out;
  // A solution that compiles needs the GPU: exit 3 and one line saying so.
  auto good =
      testing::kharness("check '" + testing::fixture("good/rmsnorm_simple.cu").string() + "'");
  EXPECT_EQ(good.exit_code, 3) << good.out;
  EXPECT_NE(good.out.find("no NVIDIA driver"), std::string::npos) << good.out;
  auto seed = testing::kharness("check '" + testing::fixture("good/rmsnorm_simple.cu").string() +
                                "' --seed banana");
  EXPECT_EQ(seed.exit_code, 2) << seed.out;
}

TEST(CheckCli, BenchAndValidateFlags) {
  std::string good = "'" + testing::fixture("good/rmsnorm_simple.cu").string() + "'";
  auto timing = testing::kharness("bench " + good + " --timing fast");
  EXPECT_EQ(timing.exit_code, 2) << timing.out;
  EXPECT_NE(timing.out.find("--timing"), std::string::npos) << timing.out;
  auto sets = testing::kharness("validate " + good + " --input-sets 1");
  EXPECT_EQ(sets.exit_code, 2) << sets.out;
  EXPECT_NE(sets.out.find("--input-sets"), std::string::npos) << sets.out;
  auto noise = testing::kharness("bench " + good + " --max-noise 0");
  EXPECT_EQ(noise.exit_code, 2) << noise.out;
  // bench has no correctness trials, so no --trials.
  EXPECT_EQ(testing::kharness("bench " + good + " --trials 3").exit_code, 2);
  auto probe = testing::kharness("doctor --json");
  if (probe.out.find("\"available\": true") == std::string::npos) {
    auto r = testing::kharness("validate " + good);
    EXPECT_EQ(r.exit_code, 3) << r.out;  // compiles, then needs the GPU
  }
}

TEST(CheckCli, UnknownComparatorInADefinitionIsBadInput) {
  testing::TempDir dir;
  auto def = nlohmann::ordered_json::parse(
      read_file((testing::source_dir() / "operators/rmsnorm_h4096/definition.json").string()));
  def["name"] = "rmsnorm_bogus";
  def["kharness"]["comparator"] = "bogus";
  def["kharness"].erase("baseline");
  std::filesystem::create_directories(dir.path() / "rmsnorm_bogus");
  write_file_atomic((dir.path() / "rmsnorm_bogus/definition.json").string(), def.dump(2));
  auto r = testing::kharness("--operators-dir '" + dir.path().string() + "' check '" +
                             testing::fixture("good/rmsnorm_simple.cu").string() +
                             "' --operator rmsnorm_bogus");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("kharness.comparator"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unknown comparator 'bogus'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness::verify
