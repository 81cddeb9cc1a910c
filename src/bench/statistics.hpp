// Statistics of the timing stage (docs/timing.md): latency summaries, the noise of the median
// estimate, stopping criteria as plugins (nvbench's design: public add_measurement()/is_finished()
// over protected hooks, named parameters, a registry), FlashInfer-Bench's official aggregation,
// speedup scores and clock flagging. Pure CPU code; every time is in seconds.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/timing.hpp"

namespace kharness::bench {

// ---- Latency summaries ------------------------------------------------------------------------

// Percentiles use linear interpolation between closest ranks (Hyndman & Fan type 7, the default of
// numpy.percentile and of FlashInfer-Bench's quantiles): with the n samples sorted x[0..n-1],
// percentile p in [0, 1] is x[h] + (h - floor(h)) * (x[ceil(h)] - x[floor(h)]), h = p * (n - 1).
// The median is p = 0.5: the middle sample, or the mean of the two middle ones (as Python's
// statistics.median, which FlashInfer-Bench uses per trial).
//
// `noise` is the relative standard error of the median: SE(median) / median. SE comes from the
// distribution-free order-statistics estimator of McKean & Schrader (1984, "A comparison of
// methods for studentizing the sample median", Commun. Statist. Simul. Comput. 13(6)):
//   SE = (x_(n-c+1) - x_(c)) / (2 z),  c = round((n + 1) / 2 - z * sqrt(n / 4)),  z = 1.959964,
// 1-based order statistics, c clamped to [1, (n + 1) / 2]. The two order statistics bound the
// usual 95% confidence interval of the median, so SE is that interval's half-width over z. Why
// this one and not 1.2533 * s / sqrt(n): GPU latencies are skewed with rare slow outliers (a
// preempted iteration, a clock dip); s is dominated by them and the 1.2533 factor holds only for
// normal data, while the order statistics ignore the tails and need no distribution. It falls
// like 1/sqrt(n) for a fixed spread, so waiting longer always lowers it. With fewer than
// kMinSamplesForNoise samples the noise is +infinity (never "met").
// LatencyStats (kharness/timing.hpp) holds the summary.
using kharness::LatencyStats;

inline constexpr std::size_t kMinSamplesForNoise = 5;
inline constexpr double kMedianCiZ = 1.959963984540054;  // z of a two-sided 95% interval

// Summarizes `samples` (seconds). An empty vector gives count 0, NaN statistics (written as null
// in JSON), noise +inf and noise_met false.
LatencyStats summarize(std::vector<double> samples, double max_noise);

// Percentile p in [0, 1] of already sorted samples, by linear interpolation (see above).
// NaN for an empty vector.
double percentile_sorted(const std::vector<double>& sorted, double p);
// SE(median) / median of already sorted samples (McKean-Schrader, see above).
double relative_median_noise(const std::vector<double>& sorted);

// to_json(LatencyStats) is kharness/timing.hpp's: non-finite values are written as null.

// ---- Stopping criteria ------------------------------------------------------------------------

// Why a loop may stop: kharness/timing.hpp's StopReason; name_of() gives "not_finished",
// "noise_met", "time_limit", "sample_count".
using kharness::StopReason;
inline std::string_view stop_reason_name(StopReason reason) { return name_of(reason); }

// Named numeric parameters of a criterion, e.g. {{"max_noise", 0.005}, {"min_samples", 10}}.
using CriterionParams = std::map<std::string, double>;

// Decides when a measuring loop has enough samples. The loop calls add_measurement() once per
// timed iteration and stops when is_finished(). The base keeps the samples and the bookkeeping;
// subclasses decide through the do_* hooks.
class StoppingCriterion {
 public:
  virtual ~StoppingCriterion() = default;
  StoppingCriterion(const StoppingCriterion&) = delete;  // owns its samples and clock reading:
  StoppingCriterion& operator=(const StoppingCriterion&) = delete;  // a copy would mean nothing

  // One timed iteration's GPU time in seconds.
  void add_measurement(double seconds);
  bool is_finished() const;
  // Why the loop may stop (kNotFinished while it may not).
  StopReason stop_reason() const;
  // Forgets every sample and restarts the clock of time-limited criteria.
  void reset();

  const std::string& name() const { return name_; }
  const std::vector<double>& samples() const { return samples_; }
  std::size_t count() const { return samples_.size(); }
  double total_seconds() const { return total_seconds_; }  // sum of the measurements
  // The parameters in effect, defaults filled in.
  virtual CriterionParams params() const = 0;

 protected:
  explicit StoppingCriterion(std::string name) : name_(std::move(name)) {}
  // Called after the base recorded the sample.
  virtual void do_add_measurement(double seconds) = 0;
  virtual StopReason do_stop_reason() const = 0;
  virtual void do_reset() {}

 private:
  std::string name_;
  std::vector<double> samples_;
  double total_seconds_ = 0.0;
};

// nvbench's default, with the noise of the median instead of the relative standard deviation:
// finished once at least `min_samples` samples are in and their noise (relative SE of the median,
// as in summarize()) is at most `max_noise`, or once `max_seconds` of wall-clock time have passed
// since construction (or reset()), whichever comes first; stop_reason() says which.
//
// The budget is wall-clock, not accumulated GPU time, because wall-clock is what a run costs:
// every iteration also pays for the L2 flush, launch, synchronization and CUPTI bookkeeping, so
// for a 5 us kernel 2 s of GPU time would be several hundred thousand iterations and minutes of
// waiting. The clock is read in add_measurement(), so is_finished() depends only on the
// measurements added so far. The time limit wins over min_samples: a kernel slower than the
// budget yields what fits (and noise_met false says so).
//
// The noise is recomputed every sample up to 64 samples, then every ~1.5% more samples
// (O(n) each), so a long noisy run costs O(n) amortized per sample instead of O(n log n).
class StdRelCriterion final : public StoppingCriterion {
 public:
  struct Params {
    double max_noise = 0.005;
    std::size_t min_samples = 10;
    double max_seconds = 2.0;
  };
  using Clock = std::function<double()>;  // seconds from any fixed origin

  StdRelCriterion() : StdRelCriterion(Params{}) {}
  // `clock` defaults to std::chrono::steady_clock; tests pass a fake one.
  explicit StdRelCriterion(Params params, Clock clock = {});

  CriterionParams params() const override;
  double noise() const { return noise_; }              // as of the last recomputation
  double elapsed_seconds() const { return elapsed_; }  // as of the last measurement

 protected:
  void do_add_measurement(double seconds) override;
  StopReason do_stop_reason() const override;
  void do_reset() override;

 private:
  Params params_;
  Clock clock_;
  double start_ = 0.0;
  double elapsed_ = 0.0;
  double noise_;
  std::size_t next_check_ = 0;
  std::vector<double> scratch_;  // reused by the noise recomputation
};

// Exactly `count` samples (FlashInfer-Bench's protocol, tests, fixed-cost runs).
class FixedCountCriterion final : public StoppingCriterion {
 public:
  explicit FixedCountCriterion(std::size_t count);
  CriterionParams params() const override;

 protected:
  void do_add_measurement(double) override {}
  StopReason do_stop_reason() const override;

 private:
  std::size_t target_;
};

// The registry: "stdrel" (params max_noise, min_samples, max_seconds) and "fixed" (param count).
// Throws kharness::Error (exit 2) for an unknown name (with "did you mean") or parameter, or a
// parameter out of range (max_noise > 0, max_seconds > 0, min_samples >= 1, count >= 1, counts
// whole numbers).
std::unique_ptr<StoppingCriterion> make_criterion(const std::string& name,
                                                  const CriterionParams& params = {});
// The registered names, in registration order.
std::vector<std::string> criterion_names();

// ---- FlashInfer-Bench's official protocol ------------------------------------------------------

// `--timing official` (docs/timing.md#protocols): per trial, warm up, time kOfficialIterations
// iterations and take their median; the latency is the mean of the kOfficialTrials trial medians.
inline constexpr int kOfficialWarmup = 10;
inline constexpr int kOfficialIterations = 50;
inline constexpr int kOfficialTrials = 3;

// Mean over trials of each trial's median (linear-interpolation median, as Python's
// statistics.median). Empty trials are skipped; NaN when no trial has a sample.
double official_latency(const std::vector<std::vector<double>>& trials);

// ---- Scores -----------------------------------------------------------------------------------

// Per-workload speedups (baseline latency / solution latency) summarized for a definition
// (docs/timing.md#speedup-and-score: the score is the mean; geomean and fast_p are reported too).
struct ScoreSummary {
  std::size_t count = 0;            // speedups that entered mean and geomean
  double mean_speedup = 0.0;        // arithmetic mean; 0 when there are none
  double geomean_speedup = 0.0;     // exp(mean(log s)); 0 when there are none
  std::map<double, double> fast_p;  // p -> fraction of workloads with speedup > p
};

inline constexpr double kFastPThresholds[] = {1.0, 1.5, 2.0};

// fast_p follows KernelBench: the fraction of *all* workloads that are correct and faster than p
// times the baseline (strictly greater). `total_workloads` is that denominator, so workloads that
// failed count as not fast; 0 (the default) means speedups.size(). Speedups that are not finite
// and positive are treated as failed workloads: left out of mean and geomean, never fast.
ScoreSummary summarize_speedups(const std::vector<double>& speedups,
                                std::size_t total_workloads = 0);

// ---- Clocks -----------------------------------------------------------------------------------

// True when the SM clock read during timing is below 80% of the GPU's maximum (nvbench flags
// the same scaling). False when the maximum is unknown (<= 0).
bool clock_throttled(int sm_clock_mhz, int max_sm_clock_mhz);

}  // namespace kharness::bench
