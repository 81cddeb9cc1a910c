#include "verify/index_inputs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

namespace kharness::verify {
namespace {

TEST(IndexInputs, IndptrStartsAtZeroNeverDecreasesAndEndsAtTotal) {
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    auto v = make_indptr(65, 1000, seed);
    ASSERT_EQ(v.size(), 65u);
    EXPECT_EQ(v.front(), 0);
    EXPECT_EQ(v.back(), 1000);
    for (std::size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i - 1], v[i]);
  }
  EXPECT_NE(make_indptr(65, 1000, 1), make_indptr(65, 1000, 2));  // fresh data per seed
  EXPECT_EQ(make_indptr(65, 1000, 1), make_indptr(65, 1000, 1));  // and replayable
  EXPECT_EQ(make_indptr(2, 7, 5), (std::vector<std::int64_t>{0, 7}));
  EXPECT_EQ(make_indptr(1, 7, 5), (std::vector<std::int64_t>{0}));
}

TEST(IndexInputs, IndicesAreDistinctAndInRange) {
  for (auto [n, max] :
       {std::pair<std::uint64_t, std::int64_t>{100, 99}, {100, 1'000'000}, {1, 0}}) {
    auto v = make_indices(n, max, 9);
    ASSERT_EQ(v.size(), n);
    std::set<std::int64_t> distinct(v.begin(), v.end());
    EXPECT_EQ(distinct.size(), n);
    EXPECT_GE(*distinct.begin(), 0);
    EXPECT_LE(*distinct.rbegin(), max);
  }
  EXPECT_THROW(make_indices(11, 9, 1), std::invalid_argument);
}

TEST(IndexInputs, RoleParametersAreExpressionsOverAxes) {
  TensorSpec indptr{"kv_indptr", std::vector<std::string>{"len_indptr"}, DType::kInt32, ""};
  InputGenerator gen;
  gen.distribution = "indptr";
  gen.extra["total"] = "num_kv_indices";
  Bindings axes{{"len_indptr", 5}, {"num_kv_indices", 40}};
  auto bytes = make_index_input(indptr, gen, axes, 5, 3);
  ASSERT_EQ(bytes.size(), 20u);
  EXPECT_EQ(to_double(DType::kInt32, &bytes[16]), 40.0);
  TensorSpec pages{"kv_indices", std::vector<std::string>{"num_kv_indices"}, DType::kInt64, ""};
  InputGenerator ids;
  ids.distribution = "indices";
  ids.extra["max"] = "num_pages - 1";
  Bindings more{{"num_kv_indices", 40}, {"num_pages", 30}};
  EXPECT_THROW(make_index_input(pages, ids, more, 40, 3), Error);  // 40 distinct pages of 30
  more["num_pages"] = 64;
  EXPECT_EQ(make_index_input(pages, ids, more, 40, 3).size(), 320u);
  TensorSpec floats{"x", std::vector<std::string>{"n"}, DType::kFloat32, ""};
  EXPECT_THROW(make_index_input(floats, ids, more, 4, 3), Error);
}

// Probability rows (the host generator; the device's equals it bit for bit, a GPU test checks):
// the values follow the documented construction (verify/probability_rows_core.hpp), here
// recomputed independently, with a plain sequential sum.
std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(IndexInputs, ProbabilityRowsFollowTheirConstruction) {
  const std::vector<double> table = make_probability_table(1.5);
  ASSERT_EQ(table.size(), 65537u);
  EXPECT_DOUBLE_EQ(table[32768], 1.0);                      // exp(1.5 * the median)
  EXPECT_NEAR(std::log(table[65536]) / 1.5, 4.3249, 1e-3);  // the 1 - 2^-17 quantile
  EXPECT_TRUE(std::is_sorted(table.begin(), table.end()));
  constexpr std::uint64_t kRows = 3, kVocab = 1000, kSeed = 77;
  const std::vector<float> rows = make_probability_rows(kRows, kVocab, 1.5, kSeed);
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const std::uint64_t key = splitmix64(kSeed ^ splitmix64(r + 1));
    std::vector<double> w(kVocab);
    long double sum = 0;
    for (std::uint64_t j = 0; j < kVocab; ++j) {
      const std::uint64_t bits = splitmix64(key + j);
      const std::size_t i = bits >> 48;
      const double f = static_cast<double>((bits >> 16) & 0xffffffffu) / 4294967296.0;
      sum += w[j] = table[i] + f * (table[i + 1] - table[i]);
    }
    for (std::uint64_t j = 0; j < kVocab; ++j) {
      const double want = w[j] / static_cast<double>(sum);
      EXPECT_NEAR(rows[r * kVocab + j], want, 2e-7 * want) << "row " << r << " token " << j;
    }
  }
}

TEST(IndexInputs, ProbabilityRowsAreSeededAndIndependentOfTheThreads) {
  // 64 rows of 65536: made by several threads (where there are cores); row 0 alone by one.
  const std::vector<float> many = make_probability_rows(64, 65536, 1.5, 5);
  const std::vector<float> one = make_probability_rows(1, 65536, 1.5, 5);
  EXPECT_EQ(std::vector<float>(many.begin(), many.begin() + 65536), one);
  EXPECT_EQ(many, make_probability_rows(64, 65536, 1.5, 5));  // reproducible from the seed
  EXPECT_NE(one, make_probability_rows(1, 65536, 1.5, 6));    // fresh data for another seed
  // Rows are distributions of log-spread 1.5: sum 1, log-values' standard deviation ~1.5.
  for (std::uint64_t r : {0ull, 63ull}) {
    double sum = 0, l1 = 0, l2 = 0;
    for (std::uint64_t j = 0; j < 65536; ++j) {
      const double v = many[r * 65536 + j];
      sum += v;
      l1 += std::log(v);
      l2 += std::log(v) * std::log(v);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    const double mean = l1 / 65536;
    EXPECT_NEAR(std::sqrt(l2 / 65536 - mean * mean), 1.5, 0.02);
  }
}

TEST(IndexInputs, ProbabilityRowsShapeAndParameters) {
  TensorSpec probs{"probs", std::vector<std::string>{"batch_size", "vocab_size"}, DType::kFloat32,
                   ""};
  InputGenerator gen;
  gen.distribution = "probability_rows";
  gen.std = 1.5;
  const Bindings axes{{"batch_size", 3}, {"vocab_size", 50}};
  const ProbabilityRowsShape shape = probability_rows_shape(probs, gen, axes, 150);
  EXPECT_EQ(shape.rows, 3u);
  EXPECT_EQ(shape.vocab, 50u);
  const auto bytes = make_index_input(probs, gen, axes, 150, 9);
  const std::vector<float> rows = make_probability_rows(3, 50, 1.5, 9);
  ASSERT_EQ(bytes.size(), 600u);
  std::vector<float> made(150);
  std::memcpy(made.data(), bytes.data(), 600);
  EXPECT_EQ(made, rows);
  gen.std = 0;
  EXPECT_THROW(probability_rows_shape(probs, gen, axes, 150), Error);
  gen.std = 1.5;
  probs.dtype = DType::kFloat16;
  EXPECT_THROW(probability_rows_shape(probs, gen, axes, 150), Error);
}

}  // namespace
}  // namespace kharness::verify
