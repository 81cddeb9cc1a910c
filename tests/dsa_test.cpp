// The DeepSeek-V3.2 sparse-attention (DSA) operators on the CPU: the "topk_set" comparator (sets,
// score ties, duplicates, padding, out-of-range ids, unwritten entries) with a synthetic scorer
// and with the dsa_topk_indexer scorer over a hand-made fp8 cache; the sparse_indices and
// fp8_cache_with_scales input roles; the definitions and workloads load; and `kharness operators
// check` compiles each operator's reference, seed and baseline for sm_90a.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "test_util.hpp"
#include "verify/compare.hpp"
#include "verify/index_inputs.hpp"
#include "verify/topk_compare.hpp"

namespace kharness::verify {
namespace {

constexpr const char* kAttention = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64";
constexpr const char* kIndexer = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64";

std::vector<std::uint8_t> i32(const std::vector<std::int32_t>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Scores: score(i) = table[i] for 0 <= i < table.size(), NaN (not a candidate) otherwise; the same
// for every row.
TopkScorer table_scorer(std::vector<double> table) {
  return [table](std::uint64_t) -> TopkRowScore {
    return [table](std::int64_t i) {
      if (i < 0 || i >= static_cast<std::int64_t>(table.size()))
        return std::numeric_limits<double>::quiet_NaN();
      return table[static_cast<std::size_t>(i)];
    };
  };
}

OutputCheck rows(const std::vector<std::int32_t>& expected, const std::vector<std::int32_t>& got,
                 std::uint64_t k, const TopkScorer& scorer, double atol = 1e-3, double rtol = 0.0) {
  const auto e = i32(expected), g = i32(got);
  return compare_topk_rows("topk_indices", DType::kInt32, e.data(), g.data(), expected.size() / k,
                           k, scorer, Tolerance{atol, rtol, 1.0});
}

// Candidates 0..9 score 9, 8, ..., 0 except 4 and 5, which tie at 4.5 (within 1e-3 apart).
const std::vector<double> kScores = {9, 8, 7, 6, 4.5, 4.5005, 3, 2, 1, 0};

TEST(TopkSet, SameSetInAnyOrderPasses) {
  auto c = rows({0, 1, 2, 3}, {3, 1, 0, 2}, 4, table_scorer(kScores));
  EXPECT_EQ(c.comparison.mismatches, 0u);
  EXPECT_DOUBLE_EQ(c.comparison.matched_ratio, 1.0);
  EXPECT_FALSE(output_failure(c, Tolerance{1e-3, 0, 1.0}));
}

TEST(TopkSet, TieAtTheThresholdMaySwapWithinTolerance) {
  // Top 5: 0..3 and one of the tied 4 / 5.
  const auto scorer = table_scorer(kScores);
  EXPECT_EQ(rows({0, 1, 2, 3, 5}, {0, 1, 2, 3, 4}, 5, scorer).comparison.mismatches, 0u);
  EXPECT_EQ(rows({0, 1, 2, 3, 4}, {5, 3, 2, 1, 0}, 5, scorer).comparison.mismatches, 0u);
  // A tighter tie tolerance than the gap (5e-4) fails the swap: the extra id scores below T - tol
  // (the left-out id is T itself, which is no fault of its own).
  auto tight = rows({0, 1, 2, 3, 5}, {0, 1, 2, 3, 4}, 5, scorer, 1e-4);
  EXPECT_EQ(tight.comparison.mismatches, 1u);
  EXPECT_EQ(tight.comparison.first_bad_index, 4);
  EXPECT_NEAR(tight.comparison.max_abs_error, 5e-4, 1e-9);
  // rtol scales with |T|: 1e-4 * 4.5005 = 4.5e-4 < 5e-4 fails; 2e-4 * 4.5005 passes.
  EXPECT_EQ(rows({0, 1, 2, 3, 5}, {0, 1, 2, 3, 4}, 5, scorer, 0.0, 1e-4).comparison.mismatches, 1u);
  EXPECT_EQ(rows({0, 1, 2, 3, 5}, {0, 1, 2, 3, 4}, 5, scorer, 0.0, 2e-4).comparison.mismatches, 0u);
}

TEST(TopkSet, ALowScoringIdInsteadOfAHighOneFails) {
  const auto scorer = table_scorer(kScores);
  // 9 (score 0) instead of 3 (score 6, the threshold itself): the extra id is bad.
  auto c = rows({0, 1, 2, 3}, {0, 1, 2, 9}, 4, scorer);
  EXPECT_EQ(c.comparison.mismatches, 1u);
  EXPECT_EQ(c.comparison.first_bad_index, 3);
  EXPECT_DOUBLE_EQ(c.comparison.expected, 3.0);
  EXPECT_DOUBLE_EQ(c.comparison.got, 9.0);
  auto f = output_failure(c, Tolerance{1e-3, 0, 1.0});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "tolerance");
  // Dropping the best id for a tied one is not a tie: 0 (score 9) left out for 5.
  EXPECT_GT(rows({0, 1, 2, 3, 4}, {5, 1, 2, 3, 4}, 5, scorer).comparison.mismatches, 0u);
}

TEST(TopkSet, DuplicatesFail) {
  auto c = rows({0, 1, 2, 3}, {0, 1, 2, 2}, 4, table_scorer(kScores));
  EXPECT_GE(c.comparison.mismatches, 1u);
  EXPECT_EQ(c.comparison.first_bad_index, 3);
  // A duplicate of a tied id does not make up for the other tied id.
  EXPECT_GE(rows({0, 1, 2, 3, 4}, {0, 1, 2, 3, 3}, 5, table_scorer(kScores)).comparison.mismatches,
            1u);
}

TEST(TopkSet, PaddingMustMatchInCountButNotInPosition) {
  const std::vector<double> three = {1, 2, 3};  // a row with only 3 candidates
  const auto scorer = table_scorer(three);
  // -1 anywhere in the row is padding.
  EXPECT_EQ(rows({2, 1, 0, -1, -1}, {-1, 0, -1, 1, 2}, 5, scorer).comparison.mismatches, 0u);
  // One valid id replaced by padding: too few selected.
  EXPECT_GE(rows({2, 1, 0, -1, -1}, {2, 1, -1, -1, -1}, 5, scorer).comparison.mismatches, 1u);
  // All padding where the reference selected ids.
  EXPECT_EQ(rows({2, 1, 0, -1, -1}, {-1, -1, -1, -1, -1}, 5, scorer).comparison.mismatches, 3u);
  // A row the reference left empty must be empty.
  EXPECT_EQ(rows({-1, -1}, {-1, -1}, 2, scorer).comparison.mismatches, 0u);
  EXPECT_GE(rows({-1, -1}, {0, -1}, 2, scorer).comparison.mismatches, 1u);
}

// Where the definition puts the padding after the valid ids (dsa_topk_indexer), a -1 before an id
// fails as topk_padding even when the row holds the right set; the padding at the tail passes.
TEST(TopkSet, PaddingBeforeAnIdFailsWhereTheDefinitionPutsItLast) {
  const auto scorer = table_scorer({1, 2, 3});
  auto after = [&](const std::vector<std::int32_t>& expected,
                   const std::vector<std::int32_t>& got) {
    const auto e = i32(expected), g = i32(got);
    return compare_topk_rows("topk_indices", DType::kInt32, e.data(), g.data(), expected.size() / 5,
                             5, scorer, Tolerance{1e-3, 0, 1.0}, 1, TopkPadding::kAfterIds);
  };
  const Tolerance tol{1e-3, 0, 1.0};
  // Ids in any order, padding at the tail.
  EXPECT_FALSE(output_failure(after({2, 1, 0, -1, -1}, {0, 2, 1, -1, -1}), tol));
  // The same set with a -1 among the ids (the fast path of the set comparison sees no difference).
  auto c = after({2, 1, 0, -1, -1, 2, 1, 0, -1, -1}, {2, 1, 0, -1, -1, 0, -1, 1, 2, -1});
  EXPECT_EQ(c.comparison.mismatches, 2u);
  EXPECT_EQ(c.comparison.first_bad_index, 7);
  auto f = output_failure(c, tol);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "topk_padding");
  EXPECT_EQ(f->evidence["row"], 1);
  EXPECT_EQ(f->evidence["padding_index"], 6);
  EXPECT_EQ(f->evidence["first_bad_index"], 7);
  EXPECT_EQ(f->evidence["got"], 1);
  EXPECT_EQ(f->evidence["misplaced"], 2);
  EXPECT_NE(f->message.find("row 1 has -1 padding at position 1 before id 1 at position 2"),
            std::string::npos)
      << f->message;
  // An id both misplaced and invalid (9 is no candidate) is one mismatch; the id it displaced (0)
  // is one more.
  EXPECT_EQ(after({2, 1, 0, -1, -1}, {2, 1, -1, 9, -1}).comparison.mismatches, 2u);
  // A hard failure: a loose matched ratio does not let it through.
  EXPECT_TRUE(output_failure(c, Tolerance{1e-3, 0, 0.5}));
  // An all-padding row and a full row have nothing to misplace.
  EXPECT_FALSE(output_failure(after({-1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1}), tol));
  // Without the rule (kAnywhere, the default) the same rows pass.
  const auto e = i32({2, 1, 0, -1, -1}), g = i32({-1, 0, 1, -1, 2});
  EXPECT_FALSE(output_failure(
      compare_topk_rows("t", DType::kInt32, e.data(), g.data(), 1, 5, scorer, tol), tol));
}

// The rule comes from the definition: the shipped indexer fixes the padding at the row's tail.
TEST(TopkSet, IndexerDefinitionPutsThePaddingLast) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  const Operator op = registry.load(kIndexer);
  CompareContext context;
  context.definition = &op.definition;
  EXPECT_EQ(topk_padding_for(context), TopkPadding::kAfterIds);
  CompareContext none;
  EXPECT_EQ(topk_padding_for(none), TopkPadding::kAnywhere);
}

TEST(TopkSet, OutOfRangeAndForeignIdsFail) {
  const auto scorer = table_scorer(kScores);
  // 10 is outside the candidates, -7 is neither an id nor padding.
  auto c = rows({0, 1, 2, 3}, {0, 1, 2, 10}, 4, scorer);
  EXPECT_GE(c.comparison.mismatches, 1u);
  EXPECT_EQ(c.comparison.first_bad_index, 3);
  EXPECT_DOUBLE_EQ(c.comparison.got, 10.0);
  EXPECT_GE(rows({0, 1, 2, 3}, {0, 1, 2, -7}, 4, scorer).comparison.mismatches, 1u);
}

TEST(TopkSet, RowsAreIndependentAndRatioIsPerEntry) {
  const auto scorer = table_scorer(kScores);
  // Row 0 right (reordered), row 1 with one bad swap (1 mismatch of 8 entries).
  auto c = rows({0, 1, 2, 3, 0, 1, 2, 3}, {3, 2, 1, 0, 0, 1, 2, 8}, 4, scorer);
  EXPECT_EQ(c.comparison.elements, 8u);
  EXPECT_EQ(c.comparison.mismatches, 1u);
  EXPECT_EQ(c.comparison.first_bad_index, 7);
  EXPECT_DOUBLE_EQ(c.comparison.matched_ratio, 0.875);
  EXPECT_FALSE(output_failure(c, Tolerance{1e-3, 0, 0.875}));
  EXPECT_TRUE(output_failure(c, Tolerance{1e-3, 0, 1.0}));
}

TEST(TopkSet, UnwrittenEntriesAreOutputNotWritten) {
  auto e = i32({0, 1, 2, 3});
  auto g = e;
  const auto poison = poison_element(DType::kInt32);
  std::copy(poison.begin(), poison.end(), g.begin() + 8);
  auto c = compare_topk_rows("topk_indices", DType::kInt32, e.data(), g.data(), 1, 4,
                             table_scorer(kScores), Tolerance{1e-3, 0, 1.0});
  EXPECT_EQ(c.poison_left, 1u);
  EXPECT_EQ(c.first_poison, 2);
  auto f = output_failure(c, Tolerance{1e-3, 0, 1.0});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "output_not_written");
  // Poison in the reference is a broken reference, reported as such.
  EXPECT_EQ(compare_topk_rows("t", DType::kInt32, g.data(), e.data(), 1, 4, table_scorer(kScores),
                              Tolerance{})
                .reference_unwritten,
            1u);
}

TEST(TopkSet, Int64AndNonIntegerOutputs) {
  std::vector<std::int64_t> e = {0, 1, 2, -1}, g = {2, -1, 0, 1};
  auto c = compare_topk_rows("t", DType::kInt64, reinterpret_cast<const std::uint8_t*>(e.data()),
                             reinterpret_cast<const std::uint8_t*>(g.data()), 1, 4,
                             table_scorer(kScores), Tolerance{});
  EXPECT_EQ(c.comparison.mismatches, 0u);
  std::vector<float> f = {0, 1};
  EXPECT_THROW(
      compare_topk_rows("t", DType::kFloat32, reinterpret_cast<const std::uint8_t*>(f.data()),
                        reinterpret_cast<const std::uint8_t*>(f.data()), 1, 2,
                        table_scorer(kScores), Tolerance{}),
      Error);
}

TEST(TopkSet, RegisteredByName) {
  EXPECT_NE(find_comparator("topk_set"), nullptr);
  EXPECT_NE(find_comparator("elementwise"), nullptr);
  const auto names = comparator_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "topk_set"), names.end());
  // A family without a scorer is an input error, raised only when the outputs differ.
  Definition d;
  d.name = "some_topk";
  d.op_type = "topk";
  d.outputs.push_back(TensorSpec{"idx", std::vector<std::string>{"n", "k"}, DType::kInt32, ""});
  CompareContext context;
  context.definition = &d;
  context.axes = {{"n", 1}, {"k", 2}};
  auto same = i32({0, 1});
  auto other = i32({0, 2});
  auto c = find_comparator("topk_set")("idx", DType::kInt32, same.data(), same.data(), 2,
                                       Tolerance{}, 1, context);
  EXPECT_EQ(c.comparison.mismatches, 0u);
  EXPECT_THROW(find_comparator("topk_set")("idx", DType::kInt32, same.data(), other.data(), 2,
                                           Tolerance{}, 1, context),
               Error);
}

// A tiny indexer problem: 2 heads of dim 4, pages of 2 tokens, 4 pages; request 0 owns pages 3, 1
// and has 3 tokens (page 3 slots 0, 1; page 1 slot 0).
struct TinyIndexer {
  static constexpr int kHeads = 2, kDim = 4, kPage = 2, kPages = 4, kMaxPages = 2;
  std::vector<std::uint8_t> q, cache;
  std::vector<float> weights = {1.0f, -0.5f};
  std::vector<std::int32_t> seq_lens = {3};
  std::vector<std::int32_t> block_table = {3, 1};
  Definition def;

  TinyIndexer() {
    q.resize(kHeads * kDim);
    const double qv[kHeads][kDim] = {{1, 2, 0, -1}, {0.5, 0.25, 0.5, 0.25}};
    for (int h = 0; h < kHeads; ++h)
      for (int d = 0; d < kDim; ++d) from_double(DType::kFloat8E4M3, qv[h][d], &q[h * kDim + d]);
    cache.assign(kPages * kPage * (kDim + 4), 0);
    for (int p = 0; p < kPages; ++p) {
      std::uint8_t* base = cache.data() + p * kPage * (kDim + 4);
      for (int s = 0; s < kPage; ++s) {
        for (int d = 0; d < kDim; ++d)
          from_double(DType::kFloat8E4M3, (p + 1) * (d % 2 ? -1.0 : 1.0) + s + 0.25 * d,
                      &base[s * kDim + d]);
        const float scale = 0.5f * static_cast<float>(s + 1);
        std::memcpy(base + kPage * kDim + s * 4, &scale, 4);
      }
    }
    def.name = "dsa_topk_indexer_tiny";
    def.op_type = "dsa_paged";
    def.kharness.family = "dsa_topk_indexer";
    def.outputs.push_back(TensorSpec{"topk_indices", std::vector<std::string>{"batch_size", "topk"},
                                     DType::kInt32, ""});
  }
  // The score by the formula, reading the page block's bytes by their own offsets.
  double exact(std::int64_t token) const {
    const int page = static_cast<int>(token / kPage), slot = static_cast<int>(token % kPage);
    const std::size_t page_base = static_cast<std::size_t>(page) * kPage * (kDim + 4);
    float scale;
    std::memcpy(&scale, &cache[page_base + kPage * kDim + slot * 4], 4);
    double total = 0;
    for (int h = 0; h < kHeads; ++h) {
      double dot = 0;
      for (int d = 0; d < kDim; ++d) {
        dot += to_double(DType::kFloat8E4M3, &q[h * kDim + d]) *
               (to_double(DType::kFloat8E4M3, &cache[page_base + slot * kDim + d]) * scale);
      }
      total += weights[h] * std::max(dot, 0.0);
    }
    return total;
  }
  CompareContext context(int topk) const {
    CompareContext c;
    c.definition = &def;
    c.axes = {{"batch_size", 1},    {"num_index_heads", kHeads},  {"index_head_dim", kDim},
              {"page_size", kPage}, {"max_num_pages", kMaxPages}, {"num_pages", kPages},
              {"topk", topk}};
    c.input = [this](const std::string& name) -> const std::uint8_t* {
      if (name == "q_index_fp8") return q.data();
      if (name == "k_index_cache_fp8") return cache.data();
      if (name == "weights") return reinterpret_cast<const std::uint8_t*>(weights.data());
      if (name == "seq_lens") return reinterpret_cast<const std::uint8_t*>(seq_lens.data());
      if (name == "block_table") return reinterpret_cast<const std::uint8_t*>(block_table.data());
      return nullptr;
    };
    return c;
  }
};

TEST(TopkSet, DsaIndexerScoreIsTheDeepGemmFormula) {
  TinyIndexer t;
  for (std::int64_t token = 0; token < TinyIndexer::kPages * TinyIndexer::kPage; ++token) {
    EXPECT_NEAR(dsa_indexer_score(t.q.data(), t.cache.data(), t.weights.data(), 0, token,
                                  TinyIndexer::kHeads, TinyIndexer::kDim, TinyIndexer::kPage),
                t.exact(token), 1e-12)
        << token;
  }
}

TEST(TopkSet, DsaIndexerScorerKnowsTheRequestsTokens) {
  TinyIndexer t;
  // Request 0's tokens: 6, 7 (page 3) and 2 (page 1, slot 0); 3 (page 1 slot 1) is past seq_len.
  const auto context = t.context(2);
  const TopkScorer scorer = topk_scorer_for(context);
  const TopkRowScore row = scorer(0);
  for (std::int64_t token : {6, 7, 2}) EXPECT_NEAR(row(token), t.exact(token), 1e-12) << token;
  for (std::int64_t token : {3, 0, 1, 4, 5, 8, -1, 100})
    EXPECT_TRUE(std::isnan(row(token))) << token;

  // Top 2 of {6, 7, 2} by score, through the registered comparator.
  std::vector<std::pair<double, std::int32_t>> ranked;
  for (std::int32_t token : {6, 7, 2}) ranked.push_back({t.exact(token), token});
  std::sort(ranked.rbegin(), ranked.rend());
  ASSERT_GT(ranked[1].first, ranked[2].first + 1e-3);  // no tie in this example
  const auto expected = i32({ranked[0].second, ranked[1].second});
  const Comparator cmp = find_comparator("topk_set");
  const Tolerance tol{1e-5, 1e-4, 1.0};
  auto swapped = i32({ranked[1].second, ranked[0].second});
  EXPECT_EQ(cmp("topk_indices", DType::kInt32, expected.data(), swapped.data(), 2, tol, 1, context)
                .comparison.mismatches,
            0u);
  auto worse = i32({ranked[0].second, ranked[2].second});  // the lowest instead of the second
  EXPECT_EQ(cmp("topk_indices", DType::kInt32, expected.data(), worse.data(), 2, tol, 1, context)
                .comparison.mismatches,
            1u);
  auto beyond = i32({ranked[0].second, 3});  // a token past seq_len
  EXPECT_GE(cmp("topk_indices", DType::kInt32, expected.data(), beyond.data(), 2, tol, 1, context)
                .comparison.mismatches,
            1u);
}

TEST(DsaInputs, SparseIndicesRowsAreDistinctInRangeThenPadded) {
  const std::uint64_t rows = 16, k = 64;
  auto v = make_sparse_indices(rows, k, 40, 999, 7);
  ASSERT_EQ(v.size(), rows * k);
  bool some_padding = false;
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::set<std::int64_t> seen;
    std::uint64_t valid = 0;
    bool padding = false;
    for (std::uint64_t j = 0; j < k; ++j) {
      const std::int64_t x = v[r * k + j];
      if (x == -1) {
        padding = true;
        continue;
      }
      EXPECT_FALSE(padding) << "an id after padding in row " << r;
      EXPECT_GE(x, 0);
      EXPECT_LE(x, 999);
      EXPECT_TRUE(seen.insert(x).second) << "duplicate in row " << r;
      ++valid;
    }
    EXPECT_GE(valid, 40u);
    some_padding |= padding;
  }
  EXPECT_TRUE(some_padding);
  EXPECT_EQ(v, make_sparse_indices(rows, k, 40, 999, 7));
  EXPECT_NE(v, make_sparse_indices(rows, k, 40, 999, 8));
  // Full rows when min_valid is k; at most max + 1 ids per row.
  for (auto x : make_sparse_indices(4, 8, 8, 100, 1)) EXPECT_NE(x, -1);
  EXPECT_THROW(make_sparse_indices(1, 8, 8, 6, 1), std::invalid_argument);

  TensorSpec t{"sparse_indices", std::vector<std::string>{"num_tokens", "topk"}, DType::kInt32, ""};
  InputGenerator gen;
  gen.distribution = "sparse_indices";
  gen.extra["max"] = "num_pages * page_size - 1";
  gen.extra["min_valid"] = "topk - topk / 8";
  Bindings axes{{"num_tokens", 3}, {"topk", 16}, {"num_pages", 2}, {"page_size", 8}};
  auto bytes = make_index_input(t, gen, axes, 48, 5);
  ASSERT_EQ(bytes.size(), 48u * 4);
  for (std::size_t i = 0; i < 48; ++i) {
    const double x = to_double(DType::kInt32, &bytes[i * 4]);
    EXPECT_TRUE(x == -1 || (x >= 0 && x <= 15)) << x;
  }
}

TEST(DsaInputs, Fp8CacheHasFiniteValuesAndScalesInRange) {
  const std::int64_t page_size = 64, dim = 128;
  auto bytes = make_fp8_cache_with_scales(3, page_size, dim, 100.0, 0.005, 0.012, 11);
  ASSERT_EQ(bytes.size(), 3u * page_size * (dim + 4));
  double sum_sq = 0;
  std::set<std::uint8_t> codes;
  for (int p = 0; p < 3; ++p) {
    const std::uint8_t* page = bytes.data() + p * page_size * (dim + 4);
    for (std::int64_t i = 0; i < page_size * dim; ++i) {
      const double x = to_double(DType::kFloat8E4M3, &page[i]);
      ASSERT_TRUE(std::isfinite(x));
      EXPECT_LE(std::fabs(x), 448.0);
      sum_sq += x * x;
      codes.insert(page[i]);
    }
    for (std::int64_t s = 0; s < page_size; ++s) {
      float scale;
      std::memcpy(&scale, page + page_size * dim + s * 4, 4);
      EXPECT_GE(scale, 0.005f);
      EXPECT_LE(scale, 0.012f);
    }
  }
  EXPECT_NEAR(std::sqrt(sum_sq / (3.0 * page_size * dim)), 100.0, 10.0);
  EXPECT_GT(codes.size(), 100u);  // spread over the fp8 range, not a few values

  TensorSpec t{"k", std::vector<std::string>{"num_pages", "page_size", "one", "w"}, DType::kInt8,
               ""};
  InputGenerator gen;
  gen.distribution = "fp8_cache_with_scales";
  gen.extra["page_size"] = "page_size";
  gen.extra["head_dim"] = 128;
  gen.std = 100;
  gen.low = 0.005;
  gen.high = 0.012;
  Bindings axes{{"num_pages", 2}, {"page_size", 64}};
  EXPECT_EQ(make_index_input(t, gen, axes, 2 * 64 * 132, 3).size(), 2u * 64 * 132);
  EXPECT_THROW(make_index_input(t, gen, axes, 2 * 64 * 132 + 1, 3), Error);  // not whole pages
  t.dtype = DType::kFloat32;
  EXPECT_THROW(make_index_input(t, gen, axes, 2 * 64 * 132, 3), Error);
}

TEST(DsaOperators, DefinitionsAndWorkloadsLoad) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  const Operator attention = registry.load(kAttention);
  EXPECT_EQ(attention.definition.family(), "dsa_sparse_attention");
  EXPECT_EQ(attention.definition.op_type, "dsa_paged");
  EXPECT_EQ(attention.definition.kharness.inputs.at("sparse_indices").distribution,
            "sparse_indices");
  EXPECT_GE(attention.workloads.size(), 6u);
  ASSERT_TRUE(attention.reference && attention.seed && attention.baseline);
  EXPECT_TRUE(attention.definition.kharness.flops && attention.definition.kharness.bytes);
  std::set<std::int64_t> sizes;
  for (const auto& w : attention.workloads) {
    const Bindings b = w.bindings(attention.definition);
    // Enough cache rows for every token's distinct indices.
    EXPECT_GE(b.at("num_pages") * b.at("page_size"), b.at("topk")) << w.uuid;
    sizes.insert(b.at("num_tokens"));
  }
  EXPECT_TRUE(sizes.count(1) && sizes.count(256)) << "decode batch 1 to 256";

  const Operator indexer = registry.load(kIndexer);
  EXPECT_EQ(indexer.definition.family(), "dsa_topk_indexer");
  EXPECT_EQ(indexer.definition.kharness.comparator, "topk_set");
  EXPECT_GE(indexer.workloads.size(), 6u);
  ASSERT_TRUE(indexer.reference && indexer.seed && indexer.baseline);
  sizes.clear();
  for (const auto& w : indexer.workloads) {
    const Bindings b = w.bindings(indexer.definition);
    EXPECT_LE(b.at("topk"), b.at("max_num_pages") * b.at("page_size")) << w.uuid;
    // block_table holds distinct pages: every request's pages fit in the cache.
    EXPECT_LE(b.at("batch_size") * b.at("max_num_pages"), b.at("num_pages")) << w.uuid;
    sizes.insert(b.at("batch_size"));
  }
  EXPECT_TRUE(sizes.count(1) && sizes.count(256)) << "decode batch 1 to 256";
}

TEST(DsaOperators, InputRolesAreCheckedWhenTheDefinitionIsRead) {
  const auto file = testing::source_dir() / "operators" / kIndexer / "definition.json";
  std::ifstream in(file);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  // Round trip: the roles' parameters survive export.
  const Definition d = parse_definition(j, file.string());
  const nlohmann::ordered_json back = to_json(d);
  const auto& cache = back["kharness"]["inputs"]["k_index_cache_fp8"];
  EXPECT_EQ(cache["distribution"], "fp8_cache_with_scales");
  EXPECT_EQ(cache["head_dim"], "index_head_dim");
  EXPECT_DOUBLE_EQ(cache["std"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(cache["high"].get<double>(), 0.012);
  EXPECT_EQ(parse_definition(back, "back.json").kharness.inputs.at("k_index_cache_fp8").std, 100.0);
  // A role without its size parameter is an input error naming the field.
  auto broken = j;
  broken["kharness"]["inputs"]["k_index_cache_fp8"].erase("head_dim");
  try {
    parse_definition(broken, "d.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(e.message().find("k_index_cache_fp8"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("head_dim"), std::string::npos) << e.message();
  }
  const auto afile = testing::source_dir() / "operators" / kAttention / "definition.json";
  std::ifstream ain(afile);
  nlohmann::ordered_json a = nlohmann::ordered_json::parse(ain);
  a["kharness"]["inputs"]["sparse_indices"].erase("max");
  EXPECT_THROW(parse_definition(a, "a.json"), Error);
}

// FlashInfer-Bench's own DSA definitions get the families' references and defaults.
TEST(DsaOperators, FlashInferBenchDefinitionsUseTheFamilies) {
  const std::filesystem::path fib =
      std::filesystem::path(KHARNESS_FIB_DIR) / "definitions" / "dsa_paged";
  if (!std::filesystem::exists(fib)) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib;
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  for (const char* name : {"dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1.json",
                           "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.json",
                           "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64.json"}) {
    const Operator op = registry.load((fib / name).string());
    EXPECT_TRUE(op.reference.has_value()) << name;
    EXPECT_FALSE(op.definition.kharness.inputs.empty()) << name;
  }
  EXPECT_EQ(registry.load((fib / "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64.json").string())
                .definition.kharness.comparator,
            "topk_set");
}

TEST(DsaOperators, CheckCompilesReferenceSeedAndBaselineForSm90a) {
  for (const char* name : {kAttention, kIndexer}) {
    auto r = testing::kharness(std::string("operators check ") + name + " --arch sm_90a");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    for (const char* part : {"reference", "seed", "baseline"}) {
      EXPECT_NE(r.out.find(part), std::string::npos) << name << ": " << part << "\n" << r.out;
    }
    EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("COMPILE_ERROR"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace kharness::verify
