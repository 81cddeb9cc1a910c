// The "sampling" comparator: outputs that are random draws (FlashInfer-Bench's sampling
// definitions: top-k, top-p and top-k-then-top-p sampling from probabilities). Elementwise
// comparison cannot judge a draw, so a candidate's draws are judged against the distribution the
// definition's reference text samples from, computed here in double precision from the trial's
// inputs (probs, and top_k / top_p where the definition has them):
//  1. support: every draw lies in its row's truncated support (ties at the top-k boundary and
//     tokens whose top-p membership float rounding decides are allowed);
//  2. distribution: over the batch, the draws match the truncated, renormalised distributions
//     (a Pearson chi-square test on pooled rank cells, see sampling_compare.cpp for the maths),
//     failing when its p-value is below kSamplingAlpha.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "verify/compare.hpp"

namespace kharness::verify {

// Per comparison (one output of one trial). A verdict holds at most 100 of them (workloads x
// trials), so the false-failure rate of a verdict of a correct sampler is at most 100 * 1e-8 =
// 1e-6 (union bound).
inline constexpr double kSamplingAlpha = 1e-8;

// The distribution one row is sampled from: cells by decreasing probability (a token of its own,
// or the tokens tied at the top-k boundary together), the renormalised mass of each cell, and the
// cell of every token that may be drawn (optional tokens map to -1: allowed, not expected).
struct TruncatedRow {
  std::vector<double> mass;
  std::unordered_map<std::int64_t, int> cell_of;
};

// The row as FlashInfer-Bench's reference text truncates it: top_k (k <= 0 or k >= vocab: no
// filter; has_k false: the definition has none) then top_p (p <= 0: argmax; p >= 1: no filter).
TruncatedRow truncate_row(const float* probs, std::int64_t vocab, bool has_k, std::int64_t k,
                          bool has_p, double p);

struct SamplingJudgement {
  std::uint64_t draws = 0;
  std::uint64_t outside = 0;  // draws outside their row's support
  std::int64_t first_outside_row = -1;
  std::int64_t first_outside_token = 0;
  double statistic = 0.0;  // Pearson chi-square over the pooled cells
  int degrees_of_freedom = 0;
  double p_value = 1.0;
  bool ok() const { return outside == 0 && p_value >= kSamplingAlpha; }
};

SamplingJudgement judge_samples(const std::vector<TruncatedRow>& rows,
                                const std::vector<std::int64_t>& samples);

// Upper regularised incomplete gamma Q(a, x) = P(chi2_{2a} > 2x), for the p-value.
double upper_gamma_q(double a, double x);

OutputCheck compare_sampling(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                             const std::uint8_t* got, std::uint64_t count,
                             const Tolerance& tolerance, unsigned threads,
                             const CompareContext& context);

}  // namespace kharness::verify
