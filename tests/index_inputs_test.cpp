#include "verify/index_inputs.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kharness::verify
