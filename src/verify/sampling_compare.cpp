#include "verify/sampling_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

namespace kharness::verify {
namespace {

// Tokens whose top-p membership depends on how the prefix sums are rounded: FlashInfer-Bench's
// reference sums float32 probabilities, kernels sum them in other orders (or never form them),
// so a token whose exclusive prefix mass lies within this of p may be kept or not.
constexpr double kTopPSlack = 1e-4;
// Draws per bin of the bins test (at most kMaxBins bins): enough that a bin that a filter empties
// is far below its expected count.
constexpr std::uint64_t kDrawsPerBin = 128;
constexpr int kMaxBins = 64;
constexpr double kTests = 3;  // mean, score, bins: Bonferroni

std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The smallest value v of `vals` whose mass above, the sum of the values > v, is <= budget
// (>= 0, so the largest value qualifies): a weighted quickselect, expected O(n). Reorders vals.
float smallest_within(std::vector<float>& vals, double budget) {
  std::size_t lo = 0, hi = vals.size();
  double above = 0;  // mass of the values greater than every candidate in [lo, hi)
  std::uint64_t state = vals.size();
  while (hi > lo) {
    state = mix(state);
    const float pivot = vals[lo + state % (hi - lo)];
    auto* first = vals.data() + lo;
    auto* last = vals.data() + hi;
    auto* e = std::partition(first, last, [&](float v) { return v > pivot; });
    auto* l = std::partition(e, last, [&](float v) { return v == pivot; });
    double s_greater = 0, s_equal = 0;
    for (auto* v = first; v < e; ++v) s_greater += *v;
    for (auto* v = e; v < l; ++v) s_equal += *v;
    if (above + s_greater > budget) {  // the pivot does not qualify: the answer is greater
      hi = lo + static_cast<std::size_t>(e - first);
      continue;
    }
    if (l == last || above + s_greater + s_equal > budget) return pivot;
    above += s_greater + s_equal;  // the largest smaller value qualifies: the answer is smaller
    lo += static_cast<std::size_t>(l - first);
  }
  return vals.empty() ? 0.0f : vals.front();  // not reached for budget >= 0
}

// A row's values, or some of them: a view of the row itself or of a buffer.
struct Values {
  const float* data = nullptr;
  std::size_t size = 0;
  Values() = default;
  Values(const float* d, std::size_t n) : data(d), size(n) {}
  Values(const std::vector<float>& v) : data(v.data()), size(v.size()) {}  // implicit: a view
  const float* begin() const { return data; }
  const float* end() const { return data + size; }
  float operator[](std::size_t i) const { return data[i]; }
};

// The sum of `vals` in double, in four interleaved partial sums (no chain of dependent
// additions: a 128k-token row is summed at the loads' speed).
double sum_of(Values vals) {
  double s[4] = {0, 0, 0, 0};
  const std::size_t n = vals.size, whole = n - n % 4;
  for (std::size_t i = 0; i < whole; i += 4) {
    for (std::size_t l = 0; l < 4; ++l) s[l] += vals[i + l];
  }
  for (std::size_t i = whole; i < n; ++i) s[i - whole] += vals[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

std::size_t count_above(Values vals, float v) {
  std::size_t n = 0;
  for (float u : vals) n += u > v;
  return n;
}

std::size_t count_equal(Values vals, float v) {
  std::size_t n = 0;
  for (float u : vals) n += u == v;
  return n;
}

// The values of `vals` greater than `t` into `out` (not `vals`' storage), in order, without
// branches; returns their count.
std::size_t compact_above(Values vals, float t, std::vector<float>& out) {
  out.resize(vals.size);
  std::size_t n = 0;
  for (std::size_t i = 0; i < vals.size; ++i) {
    const float v = vals[i];
    out[n] = v;
    n += v > t;
  }
  out.resize(n);
  return n;
}

// The row's positive values: the row itself where every value is (as the harness's inputs
// are: a counting pass), else a compacted copy in `copy`.
Values positives_of(Values row, std::vector<float>& copy) {
  std::size_t positive = 0;
  for (float v : row) positive += v > 0;
  if (positive == row.size) return row;
  compact_above(row, 0.0f, copy);
  return copy;
}

// Top-k for small k: the k largest positive values of `row` as a multiset (of a tie at the k-th
// largest, as many as make k), or every positive value where there are at most k, into `out`,
// in one pass (a value enters only above the k-th largest so far: rarely, after the first few
// thousand); returns the count of positive values.
constexpr std::size_t kSmallK = 64;
std::size_t largest(Values row, std::size_t k, std::vector<float>& out) {
  out.clear();
  std::size_t positive = 0;
  float floor = 0;  // a value must exceed it to enter: 0, then out's smallest once out is full
  for (float v : row) {
    positive += v > 0;
    if (!(v > floor)) continue;
    if (out.size() < k) {
      out.push_back(v);
      if (out.size() == k) floor = *std::min_element(out.begin(), out.end());
      continue;
    }
    *std::min_element(out.begin(), out.end()) = v;  // replaces one of the smallest
    floor = *std::min_element(out.begin(), out.end());
  }
  return positive;
}

// A row's kept values (> 0) bucketed by the top 12 bits of their float bits (the exponent and 3
// bits of the significand: 2048 buckets ordered as the values, an eighth of an octave each),
// with each bucket's count and mass. A rank or a mass above is then found in one pass over the
// values (the counts and masses), a pass gathering one bucket and a selection within it: O(n)
// with a few well-predicted branches an element, where a quickselect over the whole row
// mispredicts about every other comparison. A row of 128k tokens has ~150 buckets in use, a
// few thousand values in the fullest.
class ValueBuckets {
 public:
  explicit ValueBuckets(Values vals) : vals_(vals) {
    count_.fill(0);
    mass_.fill(0.0);
    for (float v : vals) {
      const unsigned b = bucket(v);
      ++count_[b];
      mass_[b] += v;
    }
  }

  // The k-th largest value (1 <= k <= the values' count).
  float kth_largest(std::size_t k) const {
    std::size_t above = 0;
    for (unsigned b = kBuckets; b-- > 0;) {
      if (above + count_[b] < k) {
        above += count_[b];
        continue;
      }
      std::vector<float>& in = gather(b);
      const auto nth = in.begin() + static_cast<std::ptrdiff_t>(k - above - 1);
      std::nth_element(in.begin(), nth, in.end(), std::greater<float>());
      return *nth;
    }
    return 0.0f;  // not reached for k <= the count
  }

  // Top-p's thresholds: for `budget` and `wider` (0 <= budget <= wider), the smallest value v
  // whose mass above (the sum of the values > v) is within the budget, as
  // smallest_within(vals, budget) finds it, and how many values equal the first. Their buckets
  // are gathered in one pass.
  struct Cuts {
    float within = 0.0f;        // for `budget`
    float within_wider = 0.0f;  // for `wider`
    std::size_t ties = 0;       // the values equal to `within`
  };
  Cuts cuts(double budget, double wider) const {
    const Place a = locate(budget), b = locate(wider);
    Cuts c;
    if (a.bucket == kBuckets) return c;  // no values
    thread_local std::vector<float> in_a, in_b;
    in_a.clear();
    in_b.clear();
    for (float v : vals_) {
      const unsigned k = bucket(v);
      if (k == a.bucket) in_a.push_back(v);
      if (k == b.bucket && b.bucket != a.bucket) in_b.push_back(v);
    }
    c.within = a.smallest ? *std::min_element(in_a.begin(), in_a.end())
                          : verify::smallest_within(in_a, budget - a.above);
    c.ties = count_equal(in_a, c.within);
    std::vector<float>& in = b.bucket == a.bucket ? in_a : in_b;
    c.within_wider = b.smallest ? *std::min_element(in.begin(), in.end())
                                : verify::smallest_within(in, wider - b.above);
    return c;
  }

 private:
  static constexpr unsigned kBuckets = 2048;
  // Where the smallest value within a mass budget lies: in `bucket`, below the mass `above` of
  // the buckets above it (its largest value qualifies, the next bucket's does not); or, with
  // `smallest`, every value qualifies and it is the smallest, in the lowest bucket `bucket`.
  // bucket == kBuckets: there are no values.
  struct Place {
    unsigned bucket = kBuckets;
    double above = 0;
    bool smallest = false;
  };
  Place locate(double budget) const {
    Place place;
    double above = 0;  // the mass of the buckets above b
    for (unsigned b = kBuckets; b-- > 0;) {
      if (count_[b] == 0) continue;
      place.bucket = b;
      if (above + mass_[b] > budget) {
        place.above = above;
        return place;
      }
      above += mass_[b];
    }
    place.smallest = place.bucket != kBuckets;
    return place;
  }
  static unsigned bucket(float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits >> 20;  // < 2048 for a positive float (the sign bit is 0)
  }
  // The values of bucket b (a pass over the values), in thread-local storage.
  std::vector<float>& gather(unsigned b) const {
    thread_local std::vector<float> in;
    in.clear();
    for (float v : vals_) {
      if (bucket(v) == b) in.push_back(v);
    }
    return in;
  }
  Values vals_;
  std::array<std::uint32_t, kBuckets> count_;
  std::array<double, kBuckets> mass_;
};

// log P(X >= count) (or P(X <= count) below the mean) for X ~ Binomial(n, pi), by the Chernoff
// bound exp(-n KL(count / n || pi)); 0 (probability 1) on the mean's side.
double log_binomial_tail_bound(std::uint64_t count, std::uint64_t n, double pi) {
  const double x = static_cast<double>(count) / static_cast<double>(n);
  auto term = [](double a, double b) { return a > 0 ? a * std::log(a / b) : 0.0; };
  const double kl = term(x, pi) + term(1 - x, 1 - pi);
  return -static_cast<double>(n) * std::max(kl, 0.0);
}

}  // namespace

std::uint64_t sampling_launches(std::uint64_t rows) {
  if (rows == 0) return 1;
  return std::max<std::uint64_t>(1, (kSamplingDraws + rows - 1) / rows);
}

// The row as FlashInfer-Bench's reference text truncates it, in passes over its positive values:
// top-k keeps the values above the k-th largest and, of a tie at it, as many as make k (torch
// keeps some of such a tie, which ones depends on its sort: any of them may be drawn, the tie is
// one cell of mass kept * value); top-p then keeps, by decreasing value, each token whose
// exclusive prefix mass (renormalised after top-k) is <= p, the first always: every value above
// the cut value v (the smallest whose mass above is <= p * Z) and, of v's tie, those whose
// prefix is still <= p. Values whose mass above is within kTopPSlack of p are optional.
PlacedDraw place_draw(const float* probs, std::int64_t vocab, bool has_k, std::int64_t k,
                      bool has_p, double p, std::int64_t token) {
  PlacedDraw d;
  if (token < 0 || token >= vocab || !(probs[token] > 0)) return d;
  const float x = probs[token];
  thread_local std::vector<float> positives, top, above_cut;
  // Top-k: `kept` becomes the values above the k-th largest, then `tie_kept` copies of it.
  const Values row(probs, static_cast<std::size_t>(vocab));
  Values kept;
  float kth = 0;
  double tie_kept = 0;
  bool top_k = false;
  const bool filter_k = has_k && k > 0 && k < vocab;
  if (filter_k && static_cast<std::size_t>(k) <= kSmallK) {
    const auto k_kept = static_cast<std::size_t>(k);
    top_k = largest(row, k_kept, top) > k_kept;  // else `top` holds every positive value
    kept = top;
    if (top_k) {
      kth = *std::min_element(top.begin(), top.end());
      if (x < kth) return d;
      tie_kept = static_cast<double>(top.size() - count_above(kept, kth));
    }
  } else {
    kept = positives_of(row, positives);
    top_k = filter_k && static_cast<std::size_t>(k) < kept.size;
    if (top_k) {
      kth = ValueBuckets(kept).kth_largest(static_cast<std::size_t>(k));
      if (x < kth) return d;
      const std::size_t above = compact_above(kept, kth, top);
      tie_kept = static_cast<double>(static_cast<std::size_t>(k) - above);
      top.resize(static_cast<std::size_t>(k), kth);
      kept = top;
    }
  }
  const double z = sum_of(kept);
  if (has_p && p <= 0) {  // argmax (any of a tie at the maximum)
    if (x != *std::max_element(kept.begin(), kept.end())) return d;  // kept holds x at least
    d.kind = PlacedDraw::Kind::kExpected;
    d.mass = d.cube_sum = 1.0;
    return d;
  }
  // The count of x's cell, before any top-p cut.
  auto cell_count = [&](float v) {
    if (top_k && v == kth) return tie_kept;
    return static_cast<double>(count_equal(kept, v));
  };
  float cut = 0;         // values >= cut are kept (v == cut: cut_kept of them)
  double cut_kept = -1;  // -1: no top-p cut
  double z_kept = z;     // the kept mass (the renormaliser)
  if (has_p && p < 1) {
    const ValueBuckets::Cuts cuts = ValueBuckets(kept).cuts(p * z, (p + kTopPSlack) * z);
    cut = cuts.within;
    const float optional_from = cuts.within_wider;
    if (x < optional_from) return d;
    if (x < cut) {
      d.kind = PlacedDraw::Kind::kOptional;
      return d;
    }
    compact_above(kept, cut, above_cut);
    const double above = sum_of(above_cut);
    const double count = top_k && cut == kth ? tie_kept : static_cast<double>(cuts.ties);
    cut_kept = std::min(count, std::floor((p * z - above) / cut) + 1);
    cut_kept = std::max(cut_kept, 1.0);
    z_kept = above + cut_kept * static_cast<double>(cut);
  }
  // One pass over the kept tokens (those above the cut, then cut_kept of the cut value): the
  // mass before x, the cubes, the mean of log q and its square (log q = log v - log z_kept).
  const Values kept_above = cut_kept < 0 ? kept : Values(above_cut);
  const double inv_z = 1.0 / z_kept;
  double before = 0, cubes = 0, log_sum = 0, log_square = 0;
  float low = x, high = x;
  for (float f : kept_above) {
    const double v = f, q = v * inv_z, l = std::log(f);
    before += f > x ? v : 0.0;
    cubes += q * q * q;
    log_sum += q * l;
    log_square += q * l * l;
    low = std::min(low, f);
    high = std::max(high, f);
  }
  if (cut_kept >= 0) {
    const double v = cut, n_cut = cut_kept, q = v * inv_z, l = std::log(cut);
    before += cut > x ? n_cut * v : 0.0;
    cubes += n_cut * q * q * q;
    log_sum += n_cut * q * l;
    log_square += n_cut * q * l * l;
    low = std::min(low, cut);
    high = std::max(high, cut);
  }
  const double log_z = std::log(z_kept);
  const double log_mean = log_sum - log_z;
  const double log_variance = std::max(0.0, log_square - log_sum * log_sum);
  const double count = (cut_kept >= 0 && x == cut) ? cut_kept : cell_count(x);
  d.kind = PlacedDraw::Kind::kExpected;
  d.before = before / z_kept;
  d.mass = count * x / z_kept;
  d.cube_sum = cubes;
  d.log_q = std::log(x / z_kept);
  d.log_mean = log_mean;
  d.log_variance = log_variance;
  d.log_range = std::max(std::log(high) - log_z - log_mean, log_mean - (std::log(low) - log_z));
  return d;
}

void SamplingDraws::add(const PlacedDraw& draw, std::int64_t row, std::int64_t token) {
  const std::uint64_t index = added_++;
  if (draw.kind == PlacedDraw::Kind::kOutside) {
    if (support_.outside++ == 0) {
      support_.first_outside_row = row;
      support_.first_outside_token = token;
    }
    return;
  }
  if (draw.kind == PlacedDraw::Kind::kOptional) {
    ++support_.optional;
    return;
  }
  ++support_.draws;
  deviation_ += draw.before + draw.mass / 2 - 0.5;
  variance_ += std::max(0.0, (1.0 - draw.cube_sum) / 12.0);
  score_ += draw.log_q - draw.log_mean;
  score_variance_ += draw.log_variance;
  score_range_ = std::max(score_range_, draw.log_range);
  // The uniform of the randomised PIT: a fixed function of the draw's position.
  const double v = static_cast<double>(mix(index ^ 0x5a3d9e1bull) >> 11) * 0x1.0p-53;
  pit_.push_back(std::min(draw.before + v * draw.mass, std::nextafter(1.0, 0.0)));
}

// The three tests. Under the null hypothesis (draws independent, each from its row's truncated
// distribution q; cells c by decreasing probability, F_c the mass before cell c):
//  mean: the mid-PIT u = F_c + q_c / 2 of a draw has mean exactly 1/2 (sum_c q_c F_c is the sum
//    of q_a q_b over pairs a < b, and 2 sum_{a<b} q_a q_b + sum q^2 = 1) and variance
//    (1 - sum_c q_c^3) / 12 <= (1 - sum over tokens q^3) / 12 =: var_i (the ridit's variance),
//    and lies in [0, 1]. For S = sum (u_i - 1/2) with V = sum var_i, Bernstein's inequality
//    gives P(|S| >= t) <= 2 exp(-t^2 / (2 (V + t / 6))) for every n (no normal approximation).
//  score: X = log q(x) of the drawn token has mean mu_i = sum q log q and variance
//    s_i^2 = sum q (log q - mu_i)^2 (over tokens: each of a tie has the same q), and lies within
//    b_i of mu_i (b_i: the row's largest |log q - mu_i|). For S = sum (X_i - mu_i), Bernstein:
//    P(|S| >= t) <= 2 exp(-t^2 / (2 (sum s_i^2 + max b_i t / 3))). A temperature T scales the
//    log-probabilities by 1 / T: d/d(1/T) log (q^(1/T) / sum q^(1/T)) at T = 1 is log q - mu,
//    so this is the score test of T (T < 1 raises the sum, T > 1 lowers it).
//  bins: the randomised PIT F_c + U q_c (U uniform, independent) is uniform on [0, 1), so the
//    count of B equal bins is Binomial(n, 1/B), and P(count >= a) <= exp(-n KL(a/n || 1/B))
//    above the mean (Chernoff; likewise below). Over the 2B tails (Bonferroni) the bins' bound
//    is 2B times the smallest. A top-k one too small never draws the k-th token, a top-p too
//    small the tail of its nucleus: both leave the top of [0, 1) empty.
// The judgement's p-value is min(1, 3 min(mean, score, bins bounds)) (Bonferroni over the three),
// so a correct sampler fails with probability <= kSamplingAlpha; draws of optional tokens (within
// kTopPSlack of the top-p boundary) are left out of all three.
SamplingJudgement SamplingDraws::judge() const {
  SamplingJudgement j = support_;
  if (j.draws == 0) return j;
  const double n = static_cast<double>(j.draws);
  if (variance_ > 0) {
    const double t = std::fabs(deviation_);
    j.mean_z = deviation_ / std::sqrt(variance_);
    j.mean_p = std::min(1.0, 2 * std::exp(-t * t / (2 * (variance_ + t / 6))));
  } else if (std::fabs(deviation_) > 1e-9 * n) {
    j.mean_p = 0.0;  // every row a single cell, yet the mean moved: impossible for in-support draws
  }
  if (score_variance_ > 0) {
    const double t = std::fabs(score_);
    j.score_z = score_ / std::sqrt(score_variance_);
    j.score_p =
        std::min(1.0, 2 * std::exp(-t * t / (2 * (score_variance_ + score_range_ * t / 3))));
  } else if (std::fabs(score_) > 1e-9 * n) {
    j.score_p = 0.0;
  }
  j.bins = static_cast<int>(std::clamp<std::uint64_t>(j.draws / kDrawsPerBin, 1, kMaxBins));
  if (j.bins >= 2) {
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(j.bins), 0);
    for (double u : pit_) {
      const auto b = static_cast<std::size_t>(u * j.bins);
      ++counts[std::min(b, counts.size() - 1)];
    }
    const double pi = 1.0 / j.bins;
    j.bin_expected = n * pi;
    double worst = 0;  // log of the smallest tail bound
    for (int b = 0; b < j.bins; ++b) {
      const double log_bound = log_binomial_tail_bound(counts[b], j.draws, pi);
      if (j.worst_bin < 0 || log_bound < worst) {
        worst = log_bound;
        j.worst_bin = b;
        j.worst_bin_count = counts[b];
      }
    }
    j.bins_p = std::min(1.0, 2.0 * j.bins * std::exp(worst));
  }
  j.p_value = std::min(1.0, kTests * std::min({j.mean_p, j.score_p, j.bins_p}));
  return j;
}

std::optional<Failure> sampling_failure(const std::string& tensor, const SamplingJudgement& j) {
  if (j.outside > 0) {
    return Failure{
        "outside_support",
        fmt::format("{}: {} draws lie outside their row's truncated support (first: row {} drew "
                    "token {})",
                    tensor, j.outside, j.first_outside_row, j.first_outside_token),
        {{"tensor", tensor},
         {"outside", j.outside},
         {"draws", j.draws + j.optional + j.outside},
         {"first_bad_index", j.first_outside_row},
         {"token", j.first_outside_token}}};
  }
  if (j.ok()) return std::nullopt;
  return Failure{
      "distribution",
      fmt::format("{}: the {} draws do not follow the truncated distributions: p = {:.3g} < {:g} "
                  "(mean PIT: z = {:.2f}, bound {:.3g}; log-probability score: z = {:.2f}, bound "
                  "{:.3g}; of {} PIT bins, bin {} holds {} where {:.1f} are expected, bound "
                  "{:.3g})",
                  tensor, j.draws, j.p_value, kSamplingAlpha, j.mean_z, j.mean_p, j.score_z,
                  j.score_p, j.bins, j.worst_bin, j.worst_bin_count, j.bin_expected, j.bins_p),
      {{"tensor", tensor},
       {"draws", j.draws},
       {"mean_z", j.mean_z},
       {"mean_p", j.mean_p},
       {"score_z", j.score_z},
       {"score_p", j.score_p},
       {"bins", j.bins},
       {"worst_bin", j.worst_bin},
       {"worst_bin_count", j.worst_bin_count},
       {"bin_expected", j.bin_expected},
       {"bins_p", j.bins_p},
       {"p_value", j.p_value},
       {"alpha", kSamplingAlpha}}};
}

OutputCheck compare_sampling(const std::string& tensor, DType dtype,
                             const std::uint8_t* /*expected*/, const std::uint8_t* got,
                             std::uint64_t count, const Tolerance& /*tolerance*/, unsigned threads,
                             const CompareContext& context) {
  const std::string where = "sampling comparator";
  if (dtype != DType::kInt32 && dtype != DType::kInt64) {
    throw input_error(
        where, fmt::format("{} is {}; draws must be int32 or int64", tensor, dtype_name(dtype)));
  }
  const Definition* d = context.definition;
  const TensorSpec* probs_spec = d ? d->find_input("probs") : nullptr;
  if (!probs_spec || probs_spec->dtype != DType::kFloat32 || !probs_spec->shape ||
      probs_spec->shape->size() != 2) {
    throw input_error(where, "needs a float32 input probs of shape [batch, vocab]");
  }
  const auto shape = tensor_shape(*probs_spec, context.axes);
  const std::int64_t batch = shape[0], vocab = shape[1];
  if (static_cast<std::uint64_t>(batch) != count) {
    throw input_error(where, fmt::format("{} has {} draws for {} rows", tensor, count, batch));
  }
  const auto* probs = reinterpret_cast<const float*>(context.input("probs"));
  const TensorSpec* k_spec = d->find_input("top_k");
  const TensorSpec* p_spec = d->find_input("top_p");
  const std::uint8_t* k_bytes = k_spec ? context.input("top_k") : nullptr;
  const std::uint8_t* p_bytes = p_spec ? context.input("top_p") : nullptr;
  if (!probs || (k_spec && !k_bytes) || (p_spec && !p_bytes)) {
    throw input_error(where, "the trial's probs/top_k/top_p inputs are not available");
  }
  if (p_spec && p_spec->dtype != DType::kFloat32) throw input_error(where, "top_p must be float32");
  OutputCheck out;
  Comparison& c = out.comparison;
  c.tensor = tensor;
  c.elements = count;
  // Rows in parallel (each an O(vocab) pass or a few), added in row order.
  const std::vector<std::uint8_t> poison = poison_element(dtype);
  std::vector<PlacedDraw> placed(static_cast<std::size_t>(batch));
  std::vector<char> poisoned(static_cast<std::size_t>(batch), 0);
  auto place_rows = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint8_t* g = got + static_cast<std::size_t>(i) * dtype_size(dtype);
      if (std::memcmp(g, poison.data(), poison.size()) == 0) {
        poisoned[static_cast<std::size_t>(i)] = 1;
        continue;
      }
      double p = 1.0;
      if (p_bytes) {
        float pf;
        std::memcpy(&pf, p_bytes + i * 4, 4);
        p = pf;
      }
      const std::int64_t k = k_bytes ? read_index(k_spec->dtype, k_bytes, i) : 0;
      placed[static_cast<std::size_t>(i)] =
          place_draw(probs + i * vocab, vocab, k_bytes != nullptr, k, p_bytes != nullptr, p,
                     read_index(dtype, got, static_cast<std::uint64_t>(i)));
    }
  };
  if (threads == 0) threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Rows of a small vocabulary are not worth a thread each.
  const std::int64_t min_rows =
      std::max<std::int64_t>(1, (1 << 18) / std::max<std::int64_t>(vocab, 1));
  threads = static_cast<unsigned>(std::clamp<std::int64_t>(batch / min_rows, 1, threads));
  const std::int64_t chunk = (batch + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    const std::int64_t begin = std::min<std::int64_t>(batch, t * chunk);
    pool.emplace_back(place_rows, begin, std::min<std::int64_t>(batch, begin + chunk));
  }
  place_rows(0, std::min<std::int64_t>(batch, chunk));
  for (auto& th : pool) th.join();
  SamplingDraws local;
  SamplingDraws& draws = context.sampling_draws ? *context.sampling_draws : local;
  const std::uint64_t outside_before = draws.support().outside;
  for (std::int64_t i = 0; i < batch; ++i) {
    if (poisoned[static_cast<std::size_t>(i)]) {
      if (out.poison_left++ == 0) out.first_poison = i;
      continue;
    }
    draws.add(placed[static_cast<std::size_t>(i)], i,
              read_index(dtype, got, static_cast<std::uint64_t>(i)));
  }
  const std::uint64_t outside = draws.support().outside - outside_before;
  c.mismatches = outside;
  c.matched_ratio = count == 0 ? 1.0 : 1.0 - static_cast<double>(outside) / count;
  if (outside > 0) {
    // This launch's first draw outside (the pooled record may name an earlier launch's).
    SamplingJudgement j = draws.support();
    for (std::int64_t i = 0; i < batch; ++i) {
      if (!poisoned[static_cast<std::size_t>(i)] &&
          placed[static_cast<std::size_t>(i)].kind == PlacedDraw::Kind::kOutside) {
        j.first_outside_row = i;
        j.first_outside_token = read_index(dtype, got, static_cast<std::uint64_t>(i));
        break;
      }
    }
    j.outside = outside;
    c.first_bad_index = j.first_outside_row;
    c.got = static_cast<double>(j.first_outside_token);
    out.failure = sampling_failure(tensor, j);
  } else if (!context.sampling_draws) {
    out.failure = sampling_failure(tensor, draws.judge());
  }
  return out;
}

}  // namespace kharness::verify
