#include "verify/compare.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// The reduction compare_output finishes with elementwise_check (the device comparison of the
// correctness trials returns the same totals: tests/gpu/harness_kernels_test.cpp holds the two
// together): every kind of element lands in its count, the first index of each kind and the bits
// of the elements there.
TEST(ElementwiseTotals, EveryKindOfElementIsCountedWithItsFirstIndexAndBits) {
  const DType f32 = DType::kFloat32;
  const double nan = std::nan("");
  const double inf = INFINITY;
  //                         0    1    2    3    4    5    6    7     8    9     10   11
  auto e = encode(f32, {1.0, 2.0, 0.0, 4.0, 5.0, 6.0, 7.0, 8.0, inf, nan, 0.0, 3.0});
  auto g = encode(f32, {1.0, 2.0, 9.0, 0.0, nan, 0.0, 7.5, 9.0, -inf, 1.0, -0.0, 3.0});
  const auto poison = poison_element(f32);
  std::copy(poison.begin(), poison.end(), e.begin() + 4 * 2);  // the reference left 2 unwritten
  std::copy(poison.begin(), poison.end(), g.begin() + 4 * 3);  // the candidate 3 and 5
  std::copy(poison.begin(), poison.end(), g.begin() + 4 * 5);
  std::copy(poison.begin(), poison.end(), e.begin() + 4 * 11);  // both: still the reference's
  std::copy(poison.begin(), poison.end(), g.begin() + 4 * 11);
  const ElementwiseTotals t = elementwise_totals(f32, e.data(), g.data(), 12, tol(0.1, 0.01));
  auto bits = [&](const std::vector<std::uint8_t>& v, int i) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v[4 * i], 4);
    return static_cast<std::uint64_t>(b);
  };
  EXPECT_EQ(t.elements, 12u);
  EXPECT_EQ(t.reference_poison, 2u);  // 2 and 11
  EXPECT_EQ(t.poison, 2u);            // 3 and 5
  EXPECT_EQ(t.first_poison, 3);
  EXPECT_EQ(t.nonfinite, 1u);  // 4: NaN where 5 is expected
  EXPECT_EQ(t.first_nonfinite, 4);
  EXPECT_EQ(t.nonfinite_expected, bits(e, 4));
  EXPECT_EQ(t.nonfinite_got, bits(g, 4));
  // 6 (abs 0.5, rel 0.071), 7 (abs 1, rel 0.125), 8 (-inf for inf), 9 (1 for NaN); 10 (-0 for 0)
  // is no error at all.
  EXPECT_EQ(t.mismatches, 4u);
  EXPECT_EQ(t.first_bad, 6);
  EXPECT_EQ(t.first_bad_expected, bits(e, 6));
  EXPECT_EQ(t.first_bad_got, bits(g, 6));
  EXPECT_EQ(t.max_abs, 1.0);
  EXPECT_EQ(t.max_rel, 0.125);

  const OutputCheck c = elementwise_check("y", f32, t);
  const OutputCheck direct = compare_output("y", f32, e.data(), g.data(), 12, tol(0.1, 0.01));
  for (const OutputCheck* o : {&c, &direct}) {
    EXPECT_EQ(o->comparison.tensor, "y");
    EXPECT_EQ(o->comparison.elements, 12u);
    EXPECT_EQ(o->comparison.mismatches, 4u);
    EXPECT_EQ(o->comparison.first_bad_index, 6);
    EXPECT_EQ(o->comparison.expected, 7.0);
    EXPECT_EQ(o->comparison.got, 7.5);
    EXPECT_EQ(o->comparison.max_abs_error, 1.0);
    EXPECT_EQ(o->comparison.max_rel_error, 0.125);
    EXPECT_EQ(o->comparison.matched_ratio, 1.0 - 7.0 / 12.0);  // 4 mismatches, 2 unwritten, 1 NaN
    EXPECT_EQ(o->poison_left, 2u);
    EXPECT_EQ(o->first_poison, 3);
    EXPECT_EQ(o->nonfinite, 1u);
    EXPECT_EQ(o->first_nonfinite, 4);
    EXPECT_EQ(o->nonfinite_expected, 5.0);
    EXPECT_TRUE(std::isnan(o->nonfinite_got));
    EXPECT_EQ(o->reference_unwritten, 2u);
  }
  // Nothing found: no first indices, the values there 0, a matched ratio of 1 (also for no
  // elements at all).
  const OutputCheck none = elementwise_check("y", f32, ElementwiseTotals{});
  EXPECT_EQ(none.comparison.first_bad_index, -1);
  EXPECT_EQ(none.comparison.expected, 0.0);
  EXPECT_EQ(none.first_nonfinite, -1);
  EXPECT_EQ(none.comparison.matched_ratio, 1.0);
}

// element_value is compare_output's decoding of an element: to_double for every bit pattern but
// the NaNs of bfloat16, which keep their sign as a float's would ("-nan" in a message).
TEST(ElementwiseTotals, ElementValueDecodesAsTheComparisonDoes) {
  auto same = [](double a, double b) {
    std::uint64_t x = 0, y = 0;
    std::memcpy(&x, &a, sizeof a);
    std::memcpy(&y, &b, sizeof b);
    return (std::isnan(a) && std::isnan(b)) || x == y;
  };
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2,
                      DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::uint64_t patterns = dtype_size(dtype) == 1 ? 256 : 65536;
    for (std::uint64_t b = 0; b < patterns; ++b) {
      std::uint8_t bytes[8] = {};
      std::memcpy(bytes, &b, dtype_size(dtype));
      ASSERT_TRUE(same(element_value(dtype, b), to_double(dtype, bytes))) << b;
    }
  }
  EXPECT_TRUE(std::signbit(element_value(DType::kBFloat16, 0xFFC0)));  // -NaN
  EXPECT_FALSE(std::signbit(element_value(DType::kFloat16, 0xFE00)));  // to_double's NaN
  EXPECT_TRUE(std::signbit(element_value(DType::kFloat32, 0xFFC00000u)));
  EXPECT_EQ(element_value(DType::kFloat32, 0x00000001u), std::ldexp(1.0, -149));  // denormal
  EXPECT_EQ(element_value(DType::kInt32, 0xFFFFFFFFu), -1.0);
  EXPECT_EQ(element_value(DType::kInt64, 0x8000000000000000ull), -std::ldexp(1.0, 63));
  EXPECT_EQ(element_value(DType::kInt64, 0x7FFFFFFFFFFFFFFFull), std::ldexp(1.0, 63));  // rounded
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
