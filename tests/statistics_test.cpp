#include "bench/statistics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kharness/error.hpp"

namespace kharness::bench {
namespace {

// A clock the test advances by hand.
struct FakeClock {
  double now = 0.0;
  StdRelCriterion::Clock fn() {
    return [this] { return now; };
  }
};

// n samples evenly spread over [center - half, center + half], shuffled: a fixed spread.
std::vector<double> spread(std::size_t n, double center, double half, unsigned seed = 1) {
  std::vector<double> v;
  for (std::size_t i = 0; i < n; ++i) {
    v.push_back(center - half +
                2.0 * half * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
  }
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

// ---- Summaries --------------------------------------------------------------------------------

TEST(Statistics, PercentilesInterpolateLinearlyBetweenClosestRanks) {
  LatencyStats s = summarize({4.0, 1.0, 3.0, 2.0}, 0.005);
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.median, 2.5);  // mean of the two middle samples
  EXPECT_DOUBLE_EQ(s.p10, 1.3);     // h = 0.3: 1 + 0.3 * (2 - 1)
  EXPECT_DOUBLE_EQ(s.p90, 3.7);     // h = 2.7: 3 + 0.7 * (4 - 3)
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.stdev, std::sqrt(5.0 / 3.0), 1e-12);  // sum of squares 5, n - 1 = 3
  EXPECT_NEAR(s.cv, std::sqrt(5.0 / 3.0) / 2.5, 1e-12);

  LatencyStats odd = summarize({5.0, 1.0, 3.0}, 0.005);
  EXPECT_DOUBLE_EQ(odd.median, 3.0);
  EXPECT_DOUBLE_EQ(odd.p10, 1.4);  // h = 0.2: 1 + 0.2 * (3 - 1)
  EXPECT_DOUBLE_EQ(odd.p90, 4.6);  // h = 1.8: 3 + 0.8 * (5 - 3)

  std::vector<double> sorted = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 0.0), 10);
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 1.0), 50);
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 0.25), 20);
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 0.625), 35);
}

TEST(Statistics, NoiseIsTheMcKeanSchraderStandardErrorOverTheMedian) {
  // n = 10: c = round(5.5 - 1.96 * sqrt(2.5)) = round(2.40) = 2, so the interval is
  // [x_(2), x_(9)] = [2, 9]; SE = 7 / (2 * 1.96); median 5.5.
  LatencyStats s = summarize({3, 1, 4, 10, 5, 9, 2, 6, 8, 7}, 0.005);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_NEAR(s.noise, 7.0 / (2.0 * kMedianCiZ) / 5.5, 1e-12);
  EXPECT_FALSE(s.noise_met);
  EXPECT_TRUE(summarize({3, 1, 4, 10, 5, 9, 2, 6, 8, 7}, 0.4).noise_met);
}

TEST(Statistics, NoiseFallsLikeOneOverRootNForAFixedSpread) {
  double previous = std::numeric_limits<double>::infinity();
  std::vector<double> noises;
  for (std::size_t n : {10, 40, 160, 640, 2560}) {
    LatencyStats s = summarize(spread(n, 1.0, 0.05), 0.005);
    EXPECT_LT(s.noise, previous) << "n = " << n;
    EXPECT_NEAR(s.cv, 0.05 / std::sqrt(3.0), 0.005) << "the spread itself does not shrink";
    previous = s.noise;
    noises.push_back(s.noise);
  }
  // Four times the samples, about half the noise.
  for (std::size_t i = 1; i < noises.size(); ++i) {
    EXPECT_NEAR(noises[i - 1] / noises[i], 2.0, 0.35) << i;
  }
  // Uniform on [0.95, 1.05]: SE(median) = 1 / (2 f sqrt(n)) = 0.05 / sqrt(n).
  EXPECT_NEAR(noises.back(), 0.05 / std::sqrt(2560.0), 0.1 * 0.05 / std::sqrt(2560.0));
}

TEST(Statistics, NoiseIgnoresARareOutlierThatTheStandardDeviationDoesNot) {
  std::vector<double> v = spread(19, 1.0, 0.001);
  v.push_back(10.0);  // one preempted iteration
  LatencyStats s = summarize(v, 0.005);
  EXPECT_GT(s.cv, 1.0);
  EXPECT_LT(s.noise, 0.001);
  EXPECT_TRUE(s.noise_met);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
}

TEST(Statistics, FewSamplesHaveInfiniteNoise) {
  LatencyStats one = summarize({2e-6}, 0.5);
  EXPECT_EQ(one.count, 1u);
  EXPECT_DOUBLE_EQ(one.median, 2e-6);
  EXPECT_DOUBLE_EQ(one.p10, 2e-6);
  EXPECT_DOUBLE_EQ(one.stdev, 0.0);
  EXPECT_TRUE(std::isinf(one.noise));
  EXPECT_FALSE(one.noise_met);
  EXPECT_TRUE(std::isinf(summarize({1, 1, 1, 1}, 0.5).noise));
  EXPECT_DOUBLE_EQ(summarize({1, 1, 1, 1, 1}, 0.5).noise, 0.0);  // five equal samples: pinned
}

TEST(Statistics, EmptySamplesGiveNaNAndNullInJson) {
  LatencyStats s = summarize({}, 0.005);
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(std::isnan(s.median));
  EXPECT_FALSE(s.noise_met);
  nlohmann::json j = to_json(s);
  EXPECT_TRUE(j["median"].is_null());
  EXPECT_TRUE(j["noise"].is_null());
  EXPECT_EQ(j["count"], 0);
}

TEST(Statistics, JsonCarriesEveryField) {
  nlohmann::json j = to_json(summarize(spread(20, 1e-5, 1e-8), 0.005));
  for (const char* key : {"count", "median", "mean", "min", "max", "p10", "p90", "stdev", "cv",
                          "noise", "noise_met"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["count"], 20);
  EXPECT_NEAR(j["median"].get<double>(), 1e-5, 1e-12);
  EXPECT_EQ(j["noise_met"], true);
}

TEST(Statistics, OfficialLatencyIsTheMeanOfTrialMedians) {
  EXPECT_EQ(kOfficialWarmup, 10);
  EXPECT_EQ(kOfficialIterations, 50);
  EXPECT_EQ(kOfficialTrials, 3);
  // Medians 2.5, 5 and 7: (2.5 + 5 + 7) / 3.
  EXPECT_DOUBLE_EQ(official_latency({{4, 1, 3, 2}, {10, 0, 5}, {7}}), 14.5 / 3.0);
  std::vector<std::vector<double>> trials(kOfficialTrials);
  for (int t = 0; t < kOfficialTrials; ++t) {
    for (int i = 0; i < kOfficialIterations; ++i) trials[t].push_back(t + 1.0 + i * 0.01);
  }
  // Trial t's median: t + 1 + 0.01 * (24 + 25) / 2 = t + 1.245; mean over t = 0, 1, 2: 2.245.
  EXPECT_NEAR(official_latency(trials), 2.245, 1e-12);
  // Medians, not means: one slow iteration per trial leaves the result alone.
  for (auto& t : trials) t.back() = 100.0;
  EXPECT_NEAR(official_latency(trials), 2.245, 1e-12);
  EXPECT_DOUBLE_EQ(official_latency({{}, {2.0}}), 2.0);
  EXPECT_TRUE(std::isnan(official_latency({})));
}

TEST(Statistics, ClockThrottledBelowEightyPercentOfMax) {
  EXPECT_FALSE(clock_throttled(1980, 1980));
  EXPECT_FALSE(clock_throttled(1584, 1980));  // exactly 80%
  EXPECT_TRUE(clock_throttled(1583, 1980));
  EXPECT_TRUE(clock_throttled(345, 1980));
  EXPECT_FALSE(clock_throttled(345, 0));  // maximum unknown
}

// ---- Stopping criteria ------------------------------------------------------------------------

TEST(StoppingCriterion, StdRelStopsAtMinSamplesWhenSamplesAreTight) {
  FakeClock clock;
  StdRelCriterion c(StdRelCriterion::Params{}, clock.fn());
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> tight(0.999, 1.001);
  while (!c.is_finished()) {
    clock.now += 1e-3;
    c.add_measurement(tight(rng));
    ASSERT_LT(c.count(), 1000u);
  }
  EXPECT_EQ(c.count(), 10u);
  EXPECT_EQ(c.stop_reason(), StopReason::kNoiseMet);
  EXPECT_EQ(stop_reason_name(c.stop_reason()), "noise_met");
  EXPECT_LE(c.noise(), 0.005);
  EXPECT_NEAR(c.total_seconds(), 10.0, 0.01);
  EXPECT_EQ(c.name(), "stdrel");
}

TEST(StoppingCriterion, StdRelKeepsGoingOnNoisySamplesUntilTheTimeLimit) {
  FakeClock clock;
  StdRelCriterion c(StdRelCriterion::Params{}, clock.fn());
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noisy(0.5, 1.5);  // needs ~10^4 samples for 0.5%
  while (!c.is_finished()) {
    clock.now += 1e-3;  // one iteration per millisecond of wall-clock time
    c.add_measurement(noisy(rng));
    ASSERT_LT(c.count(), 100000u);
  }
  EXPECT_EQ(c.stop_reason(), StopReason::kTimeLimit);
  EXPECT_EQ(stop_reason_name(c.stop_reason()), "time_limit");
  EXPECT_NEAR(static_cast<double>(c.count()), 2000.0, 1.0);
  EXPECT_GE(c.elapsed_seconds(), 2.0);
  EXPECT_GT(c.noise(), 0.005);
  EXPECT_LT(c.noise(), 0.02);  // but it did shrink: about 0.5 / sqrt(2000) = 0.011
  EXPECT_FALSE(summarize(c.samples(), 0.005).noise_met);
}

TEST(StoppingCriterion, StdRelConvergesOnModerateNoiseBeforeTheTimeLimit) {
  FakeClock clock;
  StdRelCriterion c(StdRelCriterion::Params{0.005, 10, 60.0}, clock.fn());
  std::mt19937 rng(3);
  std::normal_distribution<double> moderate(1.0, 0.02);  // 2%: about 25 samples for 0.5%
  while (!c.is_finished()) {
    clock.now += 1e-3;
    c.add_measurement(moderate(rng));
  }
  EXPECT_EQ(c.stop_reason(), StopReason::kNoiseMet);
  EXPECT_GT(c.count(), 10u);
  EXPECT_LT(c.count(), 200u);
  EXPECT_TRUE(summarize(c.samples(), 0.005).noise_met);
}

TEST(StoppingCriterion, StdRelTimeLimitWinsOverMinSamples) {
  FakeClock clock;
  StdRelCriterion c(StdRelCriterion::Params{}, clock.fn());
  clock.now += 1.5;
  c.add_measurement(1.4);
  EXPECT_FALSE(c.is_finished());
  clock.now += 1.5;
  c.add_measurement(1.4);
  EXPECT_TRUE(c.is_finished());
  EXPECT_EQ(c.stop_reason(), StopReason::kTimeLimit);
  EXPECT_EQ(c.count(), 2u);

  c.reset();  // restarts the clock and forgets the samples
  EXPECT_EQ(c.count(), 0u);
  EXPECT_FALSE(c.is_finished());
  EXPECT_DOUBLE_EQ(c.total_seconds(), 0.0);
}

TEST(StoppingCriterion, FixedCountStopsAtItsCount) {
  FixedCountCriterion c(3);
  EXPECT_EQ(c.stop_reason(), StopReason::kNotFinished);
  c.add_measurement(1.0);
  c.add_measurement(100.0);
  EXPECT_FALSE(c.is_finished());
  c.add_measurement(1.0);
  EXPECT_TRUE(c.is_finished());
  EXPECT_EQ(c.stop_reason(), StopReason::kSampleCount);
  EXPECT_EQ(c.params().at("count"), 3.0);
}

TEST(StoppingCriterion, RegistryMakesCriteriaByNameWithNamedParameters) {
  EXPECT_EQ(criterion_names(), (std::vector<std::string>{"stdrel", "fixed"}));
  auto stdrel = make_criterion("stdrel", {{"max_noise", 0.01}, {"min_samples", 20}});
  ASSERT_NE(dynamic_cast<StdRelCriterion*>(stdrel.get()), nullptr);
  EXPECT_DOUBLE_EQ(stdrel->params().at("max_noise"), 0.01);
  EXPECT_DOUBLE_EQ(stdrel->params().at("min_samples"), 20.0);
  EXPECT_DOUBLE_EQ(stdrel->params().at("max_seconds"), 2.0);  // default

  auto fixed = make_criterion("fixed", {{"count", 50}});
  EXPECT_EQ(fixed->name(), "fixed");
  for (int i = 0; i < 49; ++i) fixed->add_measurement(1e-6);
  EXPECT_FALSE(fixed->is_finished());
  fixed->add_measurement(1e-6);
  EXPECT_TRUE(fixed->is_finished());
  EXPECT_EQ(make_criterion("fixed")->params().at("count"), kOfficialIterations);
}

TEST(StoppingCriterion, RegistryRejectsUnknownNamesAndBadParameters) {
  auto expect_error = [](auto fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  };
  expect_error([] { make_criterion("stdrell"); }, "did you mean 'stdrel'");
  expect_error([] { make_criterion("stdrel", {{"max_noize", 0.01}}); }, "did you mean 'max_noise'");
  expect_error([] { make_criterion("fixed", {{"max_noise", 0.01}}); }, "unknown parameter");
  expect_error([] { make_criterion("stdrel", {{"min_samples", 2.5}}); }, "whole number");
  expect_error([] { make_criterion("stdrel", {{"max_noise", 0.0}}); }, "> 0");
  expect_error([] { make_criterion("fixed", {{"count", 0}}); }, "whole number");
}

// ---- Scores -----------------------------------------------------------------------------------

TEST(Score, MeanGeomeanAndFastPByHand) {
  ScoreSummary s = summarize_speedups({1.0, 2.0, 4.0, 0.5});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean_speedup, 7.5 / 4.0);
  EXPECT_NEAR(s.geomean_speedup, std::sqrt(2.0), 1e-12);  // (1 * 2 * 4 * 0.5)^(1/4) = 4^(1/4)
  ASSERT_EQ(s.fast_p.size(), 3u);
  EXPECT_DOUBLE_EQ(s.fast_p.at(1.0), 0.5);  // strictly faster: 1.0 is not fast_1
  EXPECT_DOUBLE_EQ(s.fast_p.at(1.5), 0.5);
  EXPECT_DOUBLE_EQ(s.fast_p.at(2.0), 0.25);  // 2.0 is not fast_2
}

TEST(Score, FastPCountsFailedWorkloadsInTheDenominator) {
  // Four timed workloads out of eight: the four that failed are not fast.
  ScoreSummary s = summarize_speedups({1.0, 2.0, 4.0, 0.5}, 8);
  EXPECT_DOUBLE_EQ(s.fast_p.at(1.0), 0.25);
  EXPECT_DOUBLE_EQ(s.mean_speedup, 1.875);  // mean and geomean are over timed workloads
  // Non-positive or non-finite speedups are failures too.
  ScoreSummary f = summarize_speedups({2.0, 0.0, std::nan("")});
  EXPECT_EQ(f.count, 1u);
  EXPECT_DOUBLE_EQ(f.mean_speedup, 2.0);
  EXPECT_DOUBLE_EQ(f.geomean_speedup, 2.0);
  EXPECT_DOUBLE_EQ(f.fast_p.at(1.5), 1.0 / 3.0);
}

TEST(Score, NoSpeedupsGiveZeros) {
  ScoreSummary s = summarize_speedups({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_DOUBLE_EQ(s.mean_speedup, 0.0);
  EXPECT_DOUBLE_EQ(s.geomean_speedup, 0.0);
  EXPECT_DOUBLE_EQ(s.fast_p.at(2.0), 0.0);
}

}  // namespace
}  // namespace kharness::bench
