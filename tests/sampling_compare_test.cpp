// The sampling comparator (verify/sampling_compare.hpp) on a plain host sampler written from
// FlashInfer-Bench's reference text, batch 256 over a vocabulary of 256, seeded.
// In CI (well under 20 s): a correct sampler passes a fixed seeded set of verdicts per mode (no
// false failure), and an argmax sampler and a top-k off by one (either way) fail every verdict.
// KHARNESS_SAMPLING_RATES=1 runs the measurement behind the numbers instead: 1000 seeded
// verdicts per case, rates printed. Measured (alpha 1e-8 per comparison):
//   correct sampler        top-k 0/1000, top-p 0/1000, top-k-then-top-p 0/1000 failures;
//   argmax                 top-k, top-p, top-k-then-top-p: 1000/1000 failures each;
//   top-k k+1 / k-1        1000/1000 failures each (k+1 also under top-k-then-top-p);
//   temperature 0.7        top-k 0/1000, top-p 143/1000, top-k-then-top-p 0/1000: NOT reliably
//                          detected at batch 256 (a temperature sharpens each row a little; 256
//                          draws cannot see it), so its rate is printed, not asserted. With 8192
//                          draws a verdict: 100/100, 100/100, 99/100 detected, and a correct
//                          sampler failed 0/100 per mode (smallest p-value 1.9e-4): detection
//                          needs batches of ~8192 rows (probs is made on the host today, ~1e9
//                          exp() for a 128k vocabulary: too slow per trial).
#include "verify/sampling_compare.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

#include "verify/index_inputs.hpp"

namespace kharness::verify {
namespace {

constexpr std::int64_t kVocab = 256;
constexpr std::int64_t kBatch = 256;      // rows (draws) per verdict, as the smallest workload
constexpr std::int64_t kBigBatch = 8192;  // the sampling families' largest workload

enum class Mode { kTopK, kTopP, kTopKTopP };
enum class Fault { kNone, kArgmax, kTemperature, kKPlusOne, kKMinusOne };

struct Batch {
  std::vector<float> probs;
  std::vector<std::int64_t> k;
  std::vector<double> p;
};

Batch make_batch(std::uint64_t seed, std::int64_t rows) {
  Batch b;
  b.probs = make_probability_rows(rows, kVocab, 1.5, seed);
  std::mt19937_64 rng(seed ^ 0x9e37);
  for (std::int64_t i = 0; i < rows; ++i) {
    b.k.push_back(std::uniform_int_distribution<std::int64_t>(1, 10)(rng));
    b.p.push_back(std::uniform_real_distribution<double>(0.5, 0.95)(rng));
  }
  return b;
}

// A plain sampler written from FlashInfer-Bench's reference text (sort, filter, renormalise,
// inverse CDF), with a fault to inject.
std::int64_t draw(const float* row, std::int64_t k, double p, Mode mode, Fault fault,
                  std::mt19937_64& rng) {
  std::vector<std::int64_t> idx(kVocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return row[a] > row[b]; });
  if (fault == Fault::kArgmax) return idx[0];
  std::vector<double> w(kVocab, 0.0);
  for (std::int64_t j = 0; j < kVocab; ++j) w[j] = row[j];
  if (mode != Mode::kTopP) {
    std::int64_t kk = k + (fault == Fault::kKPlusOne) - (fault == Fault::kKMinusOne);
    if (kk > 0 && kk < kVocab) {
      for (std::int64_t r = kk; r < kVocab; ++r) w[idx[r]] = 0;
    }
  }
  if (mode != Mode::kTopK) {
    double z = std::accumulate(w.begin(), w.end(), 0.0), before = 0;
    for (std::int64_t r = 0; r < kVocab; ++r) {
      const double v = w[idx[r]] / z;
      if (r > 0 && before > p) w[idx[r]] = 0;
      before += v;
    }
  }
  if (fault == Fault::kTemperature) {
    for (auto& x : w) x = std::pow(x, 1.0 / 0.7);  // temperature 0.7 applied, 1 expected
  }
  const double z = std::accumulate(w.begin(), w.end(), 0.0);
  double u = std::uniform_real_distribution<double>(0.0, z)(rng), acc = 0;
  std::int64_t last = 0;
  for (std::int64_t j = 0; j < kVocab; ++j) {
    if (w[j] <= 0) continue;
    last = j;
    acc += w[j];
    if (u < acc) break;
  }
  return last;
}

SamplingJudgement verdict(std::uint64_t seed, Mode mode, Fault fault, std::int64_t n_rows) {
  Batch b = make_batch(seed, n_rows);
  std::mt19937_64 rng(seed * 31 + 7);
  std::vector<TruncatedRow> rows;
  std::vector<std::int64_t> samples;
  for (std::int64_t i = 0; i < n_rows; ++i) {
    const float* row = b.probs.data() + i * kVocab;
    rows.push_back(
        truncate_row(row, kVocab, mode != Mode::kTopP, b.k[i], mode != Mode::kTopK, b.p[i]));
    samples.push_back(draw(row, b.k[i], b.p[i], mode, fault, rng));
  }
  return judge_samples(rows, samples);
}

int failures(Mode mode, Fault fault, int verdicts, double* worst_p = nullptr,
             std::int64_t rows = kBatch) {
  int failed = 0;
  double worst = 1.0;
  for (int s = 0; s < verdicts; ++s) {
    SamplingJudgement j =
        verdict(1000003ull * s + static_cast<int>(mode) * 17 + 1, mode, fault, rows);
    failed += !j.ok();
    worst = std::min(worst, j.outside ? 0.0 : j.p_value);
  }
  if (worst_p) *worst_p = worst;
  return failed;
}

TEST(SamplingCompare, UpperGammaMatchesKnownChiSquareTails) {
  // P(chi2_1 > 3.841459) = 0.05, P(chi2_10 > 18.307) = 0.05, P(chi2_2 > x) = exp(-x / 2).
  EXPECT_NEAR(upper_gamma_q(0.5, 3.841459 / 2), 0.05, 1e-6);
  EXPECT_NEAR(upper_gamma_q(5.0, 18.307 / 2), 0.05, 1e-4);
  EXPECT_NEAR(upper_gamma_q(1.0, 40.0 / 2), std::exp(-20.0), 1e-15);
  EXPECT_NEAR(upper_gamma_q(3.0, 0.5), 0.9856123, 1e-6);
}

TEST(SamplingCompare, TruncationFollowsTheReferenceText) {
  const float row[6] = {0.1f, 0.4f, 0.2f, 0.2f, 0.05f, 0.05f};
  TruncatedRow k2 = truncate_row(row, 6, true, 2, false, 1.0);
  // Rank 0 is token 1; tokens 2 and 3 tie at the boundary: one of them is kept, either may be
  // drawn.
  ASSERT_EQ(k2.mass.size(), 2u);
  EXPECT_NEAR(k2.mass[0], 0.4 / 0.6, 1e-6);
  EXPECT_EQ(k2.cell_of.count(2), 1u);
  EXPECT_EQ(k2.cell_of.count(3), 1u);
  EXPECT_EQ(k2.cell_of.at(2), k2.cell_of.at(3));
  EXPECT_EQ(k2.cell_of.count(0), 0u);
  // Top-p 0.5: 0.4 (before 0) kept, 0.2 (before 0.4) kept, next 0.2 (before 0.6) removed.
  TruncatedRow p5 = truncate_row(row, 6, false, 0, true, 0.5);
  EXPECT_EQ(p5.cell_of.count(1), 1u);
  EXPECT_EQ(p5.cell_of.count(0), 0u);
  double kept = 0;
  for (double m : p5.mass) kept += m;
  EXPECT_NEAR(kept, 1.0, 1e-12);
  // p <= 0: the argmax only.
  TruncatedRow arg = truncate_row(row, 6, false, 0, true, 0.0);
  EXPECT_EQ(arg.cell_of.size(), 1u);
  EXPECT_EQ(arg.cell_of.count(1), 1u);
  // k out of range: no filter.
  EXPECT_EQ(truncate_row(row, 6, true, 0, false, 1.0).cell_of.size(), 6u);
}

// KHARNESS_SAMPLING_RATES=1: the 1000-verdict measurement; otherwise CI's fixed seeded subset.
bool measuring_rates() {
  const char* v = std::getenv("KHARNESS_SAMPLING_RATES");
  return v && std::string(v) == "1";
}

TEST(SamplingCompare, CorrectSamplerNeverFails) {
  const int verdicts = measuring_rates() ? 1000 : 100;
  for (Mode mode : {Mode::kTopK, Mode::kTopP, Mode::kTopKTopP}) {
    double worst = 1;
    const int failed = failures(mode, Fault::kNone, verdicts, &worst);
    std::printf("mode %d: correct sampler failed %d of %d verdicts (smallest p-value %.3g)\n",
                static_cast<int>(mode), failed, verdicts, worst);
    EXPECT_EQ(failed, 0);
  }
}

TEST(SamplingCompare, ArgmaxAndTopKOffByOneFailEveryVerdict) {
  struct Case {
    Mode mode;
    Fault fault;
    const char* name;
  };
  const Case cases[] = {{Mode::kTopK, Fault::kArgmax, "top-k argmax"},
                        {Mode::kTopP, Fault::kArgmax, "top-p argmax"},
                        {Mode::kTopKTopP, Fault::kArgmax, "top-k-top-p argmax"},
                        {Mode::kTopK, Fault::kKPlusOne, "top-k k+1"},
                        {Mode::kTopK, Fault::kKMinusOne, "top-k k-1"},
                        {Mode::kTopKTopP, Fault::kKPlusOne, "top-k-top-p k+1"}};
  const int verdicts = measuring_rates() ? 1000 : 10;
  for (const Case& c : cases) {
    const int failed = failures(c.mode, c.fault, verdicts);
    std::printf("%s: failed %d of %d verdicts\n", c.name, failed, verdicts);
    EXPECT_EQ(failed, verdicts) << c.name;
  }
}

// Printed, not asserted (see the top of the file); only with KHARNESS_SAMPLING_RATES=1: 1000
// verdicts of 256 draws and 100 of 8192 per mode.
TEST(SamplingCompare, TemperatureDetectionRateIsMeasured) {
  if (!measuring_rates()) GTEST_SKIP() << "set KHARNESS_SAMPLING_RATES=1 to measure";
  for (Mode mode : {Mode::kTopK, Mode::kTopP, Mode::kTopKTopP}) {
    const int failed = failures(mode, Fault::kTemperature, 1000);
    const int failed_big = failures(mode, Fault::kTemperature, 100, nullptr, kBigBatch);
    double worst = 1;
    const int false_big = failures(mode, Fault::kNone, 100, &worst, kBigBatch);
    std::printf(
        "mode %d temperature 0.7: failed %d of 1000 verdicts of %lld draws, %d of 100 of %lld "
        "draws (correct sampler at %lld draws: %d of 100, smallest p %.3g)\n",
        static_cast<int>(mode), failed, static_cast<long long>(kBatch), failed_big,
        static_cast<long long>(kBigBatch), static_cast<long long>(kBigBatch), false_big, worst);
  }
}

}  // namespace
}  // namespace kharness::verify
