// The "sampling" comparator: outputs that are random draws (FlashInfer-Bench's sampling
// definitions: top-k, top-p and top-k-then-top-p sampling from probabilities). Elementwise
// comparison cannot judge a draw, so a candidate's draws are judged against the distribution the
// definition's reference text samples from, computed here in double precision from the inputs the
// draws were made from (probs, and top_k / top_p where the definition has them):
//  1. support: every draw lies in its row's truncated support (ties at the top-k boundary and
//     tokens whose top-p membership float rounding decides are allowed);
//  2. distribution: the draws, pooled over every row of every launch a workload's correctness
//     trials make (at least kSamplingDraws: the trials launch the candidate on
//     sampling_launches(rows) input sets in all), follow the truncated, renormalised
//     distributions. Each draw is placed in its row's distribution (the mass of the tokens more
//     probable than it, the probability integral transform or PIT, and its log-probability), and
//     three tests with exact tail bounds (not asymptotic ones, valid for any rows and any number
//     of draws) judge the pool, each given a third of kSamplingAlpha (Bonferroni):
//       mean: the mean mid-PIT (1/2 for a correct sampler), by Bernstein's inequality; a sharper
//         or flatter distribution (a wrong temperature, an argmax) moves it;
//       score: the sum of the draws' log q minus its expectation, the score of a temperature
//         (the locally most powerful test of one), by Bernstein's inequality;
//       bins: the randomised PIT (uniform on [0, 1) for a correct sampler) in equal bins, each
//         bin's count against its binomial by the Chernoff bound, Bonferroni over the bins' two
//         tails; a filter that is off (top-k one too small, top-p too small) empties the top bins.
//     See sampling_compare.cpp for the maths.
// False failures: at most kSamplingAlpha per workload whatever the inputs, provided the
// candidate's draws are independent given their inputs (a draw must not repeat, for another row or
// launch, the quantile of an earlier one: derive the randomness from the row's values, or from
// state that advances per launch, not from the row index alone). A verdict holds at most 100
// workloads, so a correct sampler's verdict fails with probability at most 1e-6. Measured
// (tests/sampling_compare_test.cpp, operators/_families/README.md): no false failure in 1000
// seeded verdicts per mode; an argmax, a temperature of 0.7 or 1.3 and a top-k off by one fail
// every one of 1000. Reruns and timed iterations are held to the support only (testing their
// distribution again would spend the budget).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verify/compare.hpp"

namespace kharness::verify {

// Per workload: 1e-8, so <= 1e-6 per verdict of <= 100 workloads.
inline constexpr double kSamplingAlpha = 1e-8;
// Draws a workload's correctness trials judge together. 8192 leave a temperature of 1.3 under
// top-k-then-top-p (rows of a few tokens) undetected in some verdicts; 16384 detect it in all.
inline constexpr std::uint64_t kSamplingDraws = 16384;

// Input sets (launches of the candidate) a workload of a sampling definition with `rows` rows
// draws on: ceil(kSamplingDraws / rows), at least 1.
std::uint64_t sampling_launches(std::uint64_t rows);

// Where one draw lies in its row's distribution, as FlashInfer-Bench's reference text truncates
// the row: top_k (k <= 0 or k >= vocab: no filter; has_k false: the definition has none) then
// top_p (p <= 0: argmax; p >= 1: no filter). Cells are the tokens by decreasing probability, a
// tie (equal probabilities) one cell.
struct PlacedDraw {
  enum class Kind { kExpected, kOptional, kOutside };
  // kOptional: allowed, not expected (a token whose top-p membership float rounding decides).
  Kind kind = Kind::kOutside;
  double before = 0.0;    // renormalised mass of the cells more probable than the draw's
  double mass = 0.0;      // renormalised mass of the draw's cell
  double cube_sum = 0.0;  // sum over the row's kept tokens of q^3 (<= the sum over its cells)
  // The score of a temperature: log q of the drawn token, and over the row's distribution its
  // mean, variance and largest distance from the mean.
  double log_q = 0.0;
  double log_mean = 0.0;
  double log_variance = 0.0;
  double log_range = 0.0;
};

// O(vocab), a few branch-free passes over the row (a 128k-token row: ~0.1 ms under top-k with
// k <= 64, ~0.5 ms under top-p, on one core): the thresholds from the values bucketed by their
// float bits, not from sorting.
PlacedDraw place_draw(const float* probs, std::int64_t vocab, bool has_k, std::int64_t k,
                      bool has_p, double p, std::int64_t token);

struct SamplingJudgement {
  std::uint64_t draws = 0;     // draws judged (in support, not optional)
  std::uint64_t outside = 0;   // draws outside their row's support
  std::uint64_t optional = 0;  // draws of optional tokens (allowed, left out of the tests)
  std::int64_t first_outside_row = -1;
  std::int64_t first_outside_token = 0;
  // The mean test: z = (sum of mid-PITs - draws / 2) / sqrt(its variance bound); p its bound.
  double mean_z = 0.0;
  double mean_p = 1.0;
  // The temperature (score) test: z = (sum of log q - its mean) / sqrt(its variance); p its bound.
  double score_z = 0.0;
  double score_p = 1.0;
  // The bins test: `bins` equal bins of the randomised PIT; the bin whose count is least likely.
  int bins = 0;
  int worst_bin = -1;
  std::uint64_t worst_bin_count = 0;
  double bin_expected = 0.0;
  double bins_p = 1.0;
  double p_value = 1.0;  // min(1, 2 min(mean_p, bins_p)): the two tests' Bonferroni combination
  bool ok() const { return outside == 0 && p_value >= kSamplingAlpha; }
};

// The draws of a workload's trials, added launch by launch (in order: the randomised PIT takes
// its uniform from the draw's position, so the judgement is deterministic).
class SamplingDraws {
 public:
  void add(const PlacedDraw& draw, std::int64_t row, std::int64_t token);
  SamplingJudgement judge() const;
  const SamplingJudgement& support() const { return support_; }  // outside and optional so far

 private:
  SamplingJudgement support_;
  std::uint64_t added_ = 0;
  double deviation_ = 0.0;  // sum of (mid-PIT - 1/2)
  double variance_ = 0.0;   // sum of the mid-PITs' variance bounds
  double score_ = 0.0;      // sum of (log q - its mean)
  double score_variance_ = 0.0;
  double score_range_ = 0.0;  // the largest distance of a draw's log q from its mean
  std::vector<double> pit_;   // randomised PITs
};

// The judgement's failure, if any: outside_support, else distribution.
std::optional<Failure> sampling_failure(const std::string& tensor, const SamplingJudgement& j);

// The registered comparator. Places every row's draw (rows in parallel, up to `threads`, 0: all)
// in the distribution of the context's inputs; with context.sampling_draws set, adds them there
// and checks the support only (the caller judges the pooled draws), else judges this launch alone.
OutputCheck compare_sampling(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                             const std::uint8_t* got, std::uint64_t count,
                             const Tolerance& tolerance, unsigned threads,
                             const CompareContext& context);

}  // namespace kharness::verify
