// Top-k index outputs compared as sets, not in raw order (comparator "topk_set").
//
// An output of shape [rows, k] holds, per row, the indices of the k highest-scoring candidates
// (fewer when the row has fewer than k candidates), padded with -1. Two correct kernels may list
// the same set in a different order, and where several candidates tie at the k-th score (up to
// float32 rounding) may pick different ones. So a candidate row passes when:
//   - every entry is -1 or an index that is valid for the row (the scorer says so), with no
//     index listed twice;
//   - it selects as many indices as the reference row;
//   - every index it selects that the reference did not has a score >= T - tol, and every index
//     the reference selected that it did not has a score <= T + tol, where T is the lowest score
//     in the reference's set and tol = atol + rtol * |T| (the definition's tolerance pair, read
//     as a score tie tolerance).
//   - where the definition fixes where the padding goes (TopkPadding::kAfterIds), no valid id
//     follows a -1 in the row: each one that does is a mismatch, and the check fails with kind
//     "topk_padding" (evidence: the row, the positions of the -1 and of the id) whatever the
//     matched ratio, since a consumer that stops at the first -1 would lose those ids.
// Scores are recomputed on the host in double precision by a scorer for the operator, only for
// rows whose sets differ. Each bad entry counts as one mismatch (its element index is
// row * k + position); the matched ratio is over all row * k entries.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "verify/compare.hpp"

namespace kharness::verify {

// Scores of one row: the exact score of `index`, or NaN when `index` is not a valid choice for the
// row (out of range, not one of the row's candidates).
using TopkRowScore = std::function<double(std::int64_t index)>;
// Makes the scorer of a row; called once per row whose sets differ, possibly from several threads.
using TopkScorer = std::function<TopkRowScore(std::uint64_t row)>;

// Where a row's -1 padding may sit.
enum class TopkPadding {
  kAnywhere,  // any position: the row is a set
  kAfterIds,  // after every valid id (the row's tail)
};

// The set comparison above over `rows` rows of `k` int32 or int64 indices.
OutputCheck compare_topk_rows(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                              const std::uint8_t* got, std::uint64_t rows, std::uint64_t k,
                              const TopkScorer& scorer, const Tolerance& tolerance,
                              unsigned threads = 0, TopkPadding padding = TopkPadding::kAnywhere);

// Where the definition of `context` puts the padding: kAfterIds for "dsa_topk_indexer" (its output
// is "-1 padding after the min(topk, seq_len) valid ids"), else kAnywhere.
TopkPadding topk_padding_for(const CompareContext& context);

// The scorer for the operator of `context` (by its definition's family); throws kharness::Error
// (exit 2) when the family has none. Families: "dsa_topk_indexer" (FlashInfer-Bench
// dsa_topk_indexer_*: score = sum_h weights[b,h] * relu(q[b,h,:] . dequant(K[token,:])), index =
// page * page_size + slot of a token of request b).
TopkScorer topk_scorer_for(const CompareContext& context);

// The registered "topk_set" comparator: compare_topk_rows with the context's scorer; rows and k
// from the output's shape.
OutputCheck compare_topk_set(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                             const std::uint8_t* got, std::uint64_t count,
                             const Tolerance& tolerance, unsigned threads,
                             const CompareContext& context);

// The DeepSeek-V3.2 indexer's score of token `token` (global index page * page_size + slot) for
// query row `b`: sum_h weights[b,h] * relu(sum_d q[b,h,d] * k_fp8[token,d] * k_scale[token]).
// q is e4m3 [batch, heads, dim]; the cache is deep_gemm's paged layout, per page page_size * dim
// e4m3 bytes then page_size float32 scales. Exposed for tests.
double dsa_indexer_score(const std::uint8_t* q_fp8, const std::uint8_t* k_cache,
                         const float* weights, std::int64_t b, std::int64_t token,
                         std::int64_t num_heads, std::int64_t head_dim, std::int64_t page_size);

}  // namespace kharness::verify
