#include "bench/statistics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// 1-based index c of McKean-Schrader's lower order statistic for n samples.
std::size_t median_ci_rank(std::size_t n) {
  double c = std::round((static_cast<double>(n) + 1.0) / 2.0 -
                        kMedianCiZ * std::sqrt(static_cast<double>(n) / 4.0));
  double upper = std::floor((static_cast<double>(n) + 1.0) / 2.0);
  return static_cast<std::size_t>(std::clamp(c, 1.0, upper));
}

// The order statistics x_(c) and x_(n-c+1) of unsorted `v` (reordered in place), in O(n).
std::pair<double, double> median_ci_bounds(std::vector<double>& v) {
  std::size_t n = v.size();
  std::size_t lo = median_ci_rank(n) - 1;  // 0-based
  std::size_t hi = n - 1 - lo;
  auto lo_it = v.begin() + static_cast<std::ptrdiff_t>(lo);
  std::nth_element(v.begin(), lo_it, v.end());
  double low = *lo_it;
  auto hi_it = v.begin() + static_cast<std::ptrdiff_t>(hi);
  if (hi != lo) std::nth_element(lo_it + 1, hi_it, v.end());
  return {low, *hi_it};
}

// Linear-interpolation median of unsorted `v` (reordered in place), in O(n).
double median_unsorted(std::vector<double>& v) {
  std::size_t n = v.size();
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(v.begin(), mid, v.end());
  double upper = *mid;
  if (n % 2 == 1) return upper;
  double lower = *std::max_element(v.begin(), mid);
  return lower + 0.5 * (upper - lower);
}

double relative_noise(double low, double high, double median) {
  if (!(median > 0.0)) return kInf;
  return (high - low) / (2.0 * kMedianCiZ) / median;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- Latency summaries ------------------------------------------------------------------------

double percentile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return kNaN;
  double h = std::clamp(p, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(h));
  auto hi = static_cast<std::size_t>(std::ceil(h));
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double relative_median_noise(const std::vector<double>& sorted) {
  std::size_t n = sorted.size();
  if (n < kMinSamplesForNoise) return kInf;
  std::size_t lo = median_ci_rank(n) - 1;
  return relative_noise(sorted[lo], sorted[n - 1 - lo], percentile_sorted(sorted, 0.5));
}

LatencyStats summarize(std::vector<double> samples, double max_noise) {
  LatencyStats s;
  s.count = samples.size();
  if (samples.empty()) {
    s.median = s.mean = s.min = s.max = s.p10 = s.p90 = s.stdev = s.cv = kNaN;
    s.noise = kInf;
    return s;
  }
  std::sort(samples.begin(), samples.end());
  double n = static_cast<double>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.median = percentile_sorted(samples, 0.5);
  s.p10 = percentile_sorted(samples, 0.10);
  s.p90 = percentile_sorted(samples, 0.90);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  double ss = 0.0;
  for (double x : samples) ss += (x - s.mean) * (x - s.mean);
  s.stdev = samples.size() > 1 ? std::sqrt(ss / (n - 1.0)) : 0.0;
  s.cv = s.mean > 0.0 ? s.stdev / s.mean : kNaN;
  s.noise = relative_median_noise(samples);
  s.noise_met = s.noise <= max_noise;
  return s;
}

// ---- Stopping criteria ------------------------------------------------------------------------

void StoppingCriterion::add_measurement(double seconds) {
  samples_.push_back(seconds);
  total_seconds_ += seconds;
  do_add_measurement(seconds);
}

bool StoppingCriterion::is_finished() const { return stop_reason() != StopReason::kNotFinished; }

StopReason StoppingCriterion::stop_reason() const { return do_stop_reason(); }

void StoppingCriterion::reset() {
  samples_.clear();
  total_seconds_ = 0.0;
  do_reset();
}

StdRelCriterion::StdRelCriterion(Params params, Clock clock)
    : StoppingCriterion("stdrel"),
      params_(params),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      noise_(kInf) {
  params_.min_samples = std::max<std::size_t>(params_.min_samples, 1);
  do_reset();
}

CriterionParams StdRelCriterion::params() const {
  return {{"max_noise", params_.max_noise},
          {"min_samples", static_cast<double>(params_.min_samples)},
          {"max_seconds", params_.max_seconds}};
}

void StdRelCriterion::do_reset() {
  start_ = clock_();
  elapsed_ = 0.0;
  noise_ = kInf;
  next_check_ = std::max(params_.min_samples, kMinSamplesForNoise);
  scratch_.clear();
}

void StdRelCriterion::do_add_measurement(double) {
  elapsed_ = clock_() - start_;
  std::size_t n = count();
  if (n < next_check_) return;
  scratch_.assign(samples().begin(), samples().end());
  auto [low, high] = median_ci_bounds(scratch_);
  noise_ = relative_noise(low, high, median_unsorted(scratch_));
  next_check_ = n + std::max<std::size_t>(1, n / 64);
}

StopReason StdRelCriterion::do_stop_reason() const {
  if (count() >= params_.min_samples && noise_ <= params_.max_noise) return StopReason::kNoiseMet;
  if (count() > 0 && elapsed_ >= params_.max_seconds) return StopReason::kTimeLimit;
  return StopReason::kNotFinished;
}

FixedCountCriterion::FixedCountCriterion(std::size_t count)
    : StoppingCriterion("fixed"), target_(std::max<std::size_t>(count, 1)) {}

CriterionParams FixedCountCriterion::params() const {
  return {{"count", static_cast<double>(target_)}};
}

StopReason FixedCountCriterion::do_stop_reason() const {
  return count() >= target_ ? StopReason::kSampleCount : StopReason::kNotFinished;
}

namespace {

struct CriterionEntry {
  const char* name;
  std::vector<std::string> params;
  std::unique_ptr<StoppingCriterion> (*make)(const CriterionParams&);
};

double param_or(const CriterionParams& p, const char* key, double fallback) {
  auto it = p.find(key);
  return it == p.end() ? fallback : it->second;
}

std::size_t whole_param(const std::string& criterion, const CriterionParams& p, const char* key,
                        std::size_t fallback) {
  double v = param_or(p, key, static_cast<double>(fallback));
  if (!(v >= 1.0) || v != std::floor(v) || v > 1e15) {
    throw input_error(fmt::format("criterion {}: {}", criterion, key),
                      fmt::format("expected a whole number >= 1, got {}", v));
  }
  return static_cast<std::size_t>(v);
}

double positive_param(const std::string& criterion, const CriterionParams& p, const char* key,
                      double fallback) {
  double v = param_or(p, key, fallback);
  if (!(v > 0.0) || !std::isfinite(v)) {
    throw input_error(fmt::format("criterion {}: {}", criterion, key),
                      fmt::format("expected a finite number > 0, got {}", v));
  }
  return v;
}

const std::vector<CriterionEntry>& registry() {
  static const std::vector<CriterionEntry> entries = {
      {"stdrel",
       {"max_noise", "min_samples", "max_seconds"},
       [](const CriterionParams& p) -> std::unique_ptr<StoppingCriterion> {
         StdRelCriterion::Params d;
         StdRelCriterion::Params q;
         q.max_noise = positive_param("stdrel", p, "max_noise", d.max_noise);
         q.min_samples = whole_param("stdrel", p, "min_samples", d.min_samples);
         q.max_seconds = positive_param("stdrel", p, "max_seconds", d.max_seconds);
         return std::make_unique<StdRelCriterion>(q);
       }},
      {"fixed",
       {"count"},
       [](const CriterionParams& p) -> std::unique_ptr<StoppingCriterion> {
         return std::make_unique<FixedCountCriterion>(
             whole_param("fixed", p, "count", static_cast<std::size_t>(kOfficialIterations)));
       }},
  };
  return entries;
}

}  // namespace

std::vector<std::string> criterion_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<StoppingCriterion> make_criterion(const std::string& name,
                                                  const CriterionParams& params) {
  for (const auto& e : registry()) {
    if (name != e.name) continue;
    for (const auto& [key, value] : params) {
      if (std::find(e.params.begin(), e.params.end(), key) != e.params.end()) continue;
      auto close = close_matches(key, e.params, 1);
      throw input_error(fmt::format("criterion {}: {}", name, key),
                        close.empty()
                            ? fmt::format("unknown parameter (known: {})", join(e.params, ", "))
                            : fmt::format("unknown parameter (did you mean '{}'?)", close[0]));
    }
    return e.make(params);
  }
  auto names = criterion_names();
  auto close = close_matches(name, names, 1);
  throw input_error(
      "criterion",
      close.empty() ? fmt::format("unknown criterion '{}' (known: {})", name, join(names, ", "))
                    : fmt::format("unknown criterion '{}' (did you mean '{}'?)", name, close[0]));
}

// ---- Official protocol ------------------------------------------------------------------------

double official_latency(const std::vector<std::vector<double>>& trials) {
  double sum = 0.0;
  std::size_t used = 0;
  for (const auto& trial : trials) {
    if (trial.empty()) continue;
    std::vector<double> v = trial;
    sum += median_unsorted(v);
    ++used;
  }
  return used ? sum / static_cast<double>(used) : kNaN;
}

// ---- Scores -----------------------------------------------------------------------------------

ScoreSummary summarize_speedups(const std::vector<double>& speedups, std::size_t total_workloads) {
  ScoreSummary s;
  std::size_t denominator = total_workloads ? total_workloads : speedups.size();
  double sum = 0.0;
  double log_sum = 0.0;
  std::map<double, std::size_t> fast;
  for (double p : kFastPThresholds) fast[p] = 0;
  for (double x : speedups) {
    if (!(x > 0.0) || !std::isfinite(x)) continue;
    ++s.count;
    sum += x;
    log_sum += std::log(x);
    for (auto& [p, n] : fast) n += x > p ? 1 : 0;
  }
  if (s.count) {
    s.mean_speedup = sum / static_cast<double>(s.count);
    s.geomean_speedup = std::exp(log_sum / static_cast<double>(s.count));
  }
  for (const auto& [p, n] : fast) {
    s.fast_p[p] = denominator ? static_cast<double>(n) / static_cast<double>(denominator) : 0.0;
  }
  return s;
}

// ---- Clocks -----------------------------------------------------------------------------------

bool clock_throttled(int sm_clock_mhz, int max_sm_clock_mhz) {
  if (max_sm_clock_mhz <= 0) return false;
  // sm < 0.8 * max, in integers.
  return static_cast<long long>(sm_clock_mhz) * 5 < static_cast<long long>(max_sm_clock_mhz) * 4;
}

}  // namespace kharness::bench
