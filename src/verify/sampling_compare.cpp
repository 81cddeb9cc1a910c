#include "verify/sampling_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

namespace kharness::verify {
namespace {

// Tokens whose top-p membership depends on how the prefix sums are rounded: FlashInfer-Bench's
// reference sums float32 probabilities, kernels sum them in other orders (or never form them),
// so a token whose exclusive prefix mass lies within this of p may be kept or not.
constexpr double kTopPSlack = 1e-4;
// Cells are pooled (in rank order) until their expected count reaches this, so the chi-square
// approximation of the Pearson statistic holds in the far tail the threshold sits in.
constexpr double kMinExpected = 20.0;

std::int64_t read_int(DType dtype, const std::uint8_t* base, std::uint64_t i) {
  if (dtype == DType::kInt64) {
    std::int64_t v;
    std::memcpy(&v, base + i * 8, 8);
    return v;
  }
  std::int32_t v;
  std::memcpy(&v, base + i * 4, 4);
  return v;
}

// log Q(a, x) by the series of P (x < a + 1) or Lentz's continued fraction for Q (Numerical
// Recipes 6.2), in logs so that p-values far below 1e-300 do not underflow to 0 early.
double log_upper_gamma_q(double a, double x) {
  if (x <= 0) return 0.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    const double p = std::exp(log_prefix) * sum;
    return std::log1p(-std::min(p, 1.0));
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return log_prefix + std::log(h);
}

}  // namespace

double upper_gamma_q(double a, double x) { return std::exp(log_upper_gamma_q(a, x)); }

TruncatedRow truncate_row(const float* probs, std::int64_t vocab, bool has_k, std::int64_t k,
                          bool has_p, double p) {
  // Tokens of non-zero probability by decreasing probability (index order among equals).
  std::vector<std::int64_t> order;
  for (std::int64_t j = 0; j < vocab; ++j) {
    if (probs[j] > 0) order.push_back(j);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return probs[a] > probs[b]; });
  // Groups of equal probability: `weight` is how many of the group are kept (torch keeps some of
  // a tie at the top-k boundary, which ones depends on its sort), `optional` the group's tokens
  // that may be drawn without being expected.
  struct Group {
    std::size_t begin, end;  // in `order`
    double kept;             // how many tokens of the group are kept
  };
  std::vector<Group> groups;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t e = i;
    while (e < order.size() && probs[order[e]] == probs[order[i]]) ++e;
    groups.push_back({i, e, static_cast<double>(e - i)});
    i = e;
  }
  // Top-k: the first k tokens in sorted order; a tie straddling the boundary keeps part of it.
  if (has_k && k > 0 && k < vocab) {
    std::size_t taken = 0;
    std::size_t g = 0;
    for (; g < groups.size() && taken < static_cast<std::size_t>(k); ++g) {
      const std::size_t size = groups[g].end - groups[g].begin;
      const std::size_t keep = std::min(size, static_cast<std::size_t>(k) - taken);
      groups[g].kept = static_cast<double>(keep);
      taken += keep;
    }
    groups.resize(g);
  }
  double z = 0;
  for (const auto& gr : groups) z += gr.kept * probs[order[gr.begin]];
  TruncatedRow row;
  if (groups.empty() || !(z > 0)) return row;  // nothing can be drawn: every draw is outside
  std::vector<char> optional(groups.size(), 0);
  if (has_p && p <= 0) {
    groups.resize(1);  // argmax (any of a tie at the maximum)
    z = probs[order[groups[0].begin]];
    groups[0].kept = 1;
  } else if (has_p && p < 1) {
    // Kept while the mass before the token (renormalised after top-k) is <= p; the first token
    // always. Within a tie group the mass before grows token by token.
    double before = 0;
    std::size_t last = 0;  // groups [0, last) hold kept tokens
    std::vector<Group> kept;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const double v = probs[order[groups[g].begin]] / z;
      double n_nominal = 0, n_possible = 0;
      for (double i = 0; i < groups[g].kept; ++i) {
        const double b = before + i * v;
        if (b <= p || (g == 0 && i == 0)) n_nominal += 1;
        if (b <= p + kTopPSlack || (g == 0 && i == 0)) n_possible += 1;
      }
      before += groups[g].kept * v;
      if (n_possible == 0) break;
      groups[g].kept = n_nominal;
      optional[g] = n_nominal == 0 ? 1 : 0;
      last = g + 1;
    }
    groups.resize(last);
    optional.resize(last);
    z = 0;
    for (const auto& gr : groups) z += gr.kept * probs[order[gr.begin]];
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int cell = optional[g] ? -1 : static_cast<int>(row.mass.size());
    if (!optional[g]) row.mass.push_back(groups[g].kept * probs[order[groups[g].begin]] / z);
    for (std::size_t i = groups[g].begin; i < groups[g].end; ++i) row.cell_of[order[i]] = cell;
  }
  return row;
}

// The distribution test. Under the null hypothesis (each draw independent, row i's draw from its
// truncated distribution q_i), the count O_r of rows whose draw falls in rank cell r (rank
// within its own row) has mean E_r = sum_i q_i(r). Adjacent rank cells are pooled, in rank order,
// until each pool expects >= kMinExpected draws (the last pool takes the remainder). Pearson's
// X^2 = sum_pools (O - E)^2 / E is then compared with chi-square on (pools - 1) degrees of
// freedom: for identical rows it is the classical multinomial goodness-of-fit test; for rows that
// differ, the pools' counts are sums of independent non-identical categorical draws whose
// covariance diag(E) - sum_i q_i q_i^T is at most the identical-row one diag(E) - E E^T / n, so
// the chi-square tail bounds the statistic's (the test is conservative: the false-failure rate is
// at most the nominal one). The verdict fails when P(chi2_df > X^2) < kSamplingAlpha (1e-8 per
// comparison, 1e-6 per verdict of up to 100 comparisons). Detection: a sampler that returns the
// argmax puts all n draws in cell 0 where E_0 = sum_i q_i(0) < n; one that ignores a truncation or
// a temperature moves mass between pools; one whose top-k is one too large draws outside the
// support (rank k has probability q(k) > 0 in each row), one too small never draws rank k - 1.
SamplingJudgement judge_samples(const std::vector<TruncatedRow>& rows,
                                const std::vector<std::int64_t>& samples) {
  SamplingJudgement j;
  std::vector<double> expected, observed;
  for (std::size_t i = 0; i < rows.size() && i < samples.size(); ++i) {
    ++j.draws;
    const TruncatedRow& row = rows[i];
    auto it = row.cell_of.find(samples[i]);
    if (it == row.cell_of.end()) {
      if (j.outside++ == 0) {
        j.first_outside_row = static_cast<std::int64_t>(i);
        j.first_outside_token = samples[i];
      }
      continue;
    }
    if (row.mass.size() > expected.size()) {
      expected.resize(row.mass.size(), 0.0);
      observed.resize(row.mass.size(), 0.0);
    }
    for (std::size_t r = 0; r < row.mass.size(); ++r) expected[r] += row.mass[r];
    if (it->second >= 0) observed[static_cast<std::size_t>(it->second)] += 1;
  }
  std::vector<double> pool_e, pool_o;
  double e = 0, o = 0;
  for (std::size_t r = 0; r < expected.size(); ++r) {
    e += expected[r];
    o += observed[r];
    if (e >= kMinExpected) {
      pool_e.push_back(e);
      pool_o.push_back(o);
      e = o = 0;
    }
  }
  if (e > 0 || o > 0) {
    if (pool_e.empty()) {
      pool_e.push_back(e);
      pool_o.push_back(o);
    } else {
      pool_e.back() += e;
      pool_o.back() += o;
    }
  }
  j.degrees_of_freedom = static_cast<int>(pool_e.size()) - 1;
  if (j.degrees_of_freedom < 1) return j;  // too few draws to judge their distribution
  for (std::size_t c = 0; c < pool_e.size(); ++c) {
    const double d = pool_o[c] - pool_e[c];
    j.statistic += d * d / pool_e[c];
  }
  j.p_value = upper_gamma_q(j.degrees_of_freedom / 2.0, j.statistic / 2.0);
  return j;
}

OutputCheck compare_sampling(const std::string& tensor, DType dtype,
                             const std::uint8_t* /*expected*/, const std::uint8_t* got,
                             std::uint64_t count, const Tolerance& /*tolerance*/,
                             unsigned /*threads*/, const CompareContext& context) {
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
  std::vector<TruncatedRow> rows;
  std::vector<std::int64_t> samples;
  const std::vector<std::uint8_t> poison = poison_element(dtype);
  OutputCheck out;
  Comparison& c = out.comparison;
  c.tensor = tensor;
  c.elements = count;
  for (std::int64_t i = 0; i < batch; ++i) {
    const std::uint8_t* g = got + static_cast<std::size_t>(i) * dtype_size(dtype);
    if (std::memcmp(g, poison.data(), poison.size()) == 0) {
      if (out.poison_left++ == 0) out.first_poison = i;
      continue;
    }
    double p = 1.0;
    if (p_bytes) {
      float pf;
      std::memcpy(&pf, p_bytes + i * 4, 4);
      p = pf;
    }
    const std::int64_t k = k_bytes ? read_int(k_spec->dtype, k_bytes, i) : 0;
    rows.push_back(
        truncate_row(probs + i * vocab, vocab, k_bytes != nullptr, k, p_bytes != nullptr, p));
    samples.push_back(read_int(dtype, got, i));
  }
  const SamplingJudgement j = judge_samples(rows, samples);
  c.mismatches = j.outside;
  c.matched_ratio = count == 0 ? 1.0 : 1.0 - static_cast<double>(j.outside) / count;
  if (j.outside > 0) {
    c.first_bad_index = j.first_outside_row;
    c.got = static_cast<double>(j.first_outside_token);
    out.failure = Failure{
        "outside_support",
        fmt::format("{}: {} of {} draws lie outside their row's truncated support (first: row "
                    "{} drew token {})",
                    tensor, j.outside, j.draws, j.first_outside_row, j.first_outside_token),
        {{"tensor", tensor},
         {"outside", j.outside},
         {"draws", j.draws},
         {"first_bad_index", j.first_outside_row},
         {"token", j.first_outside_token}}};
  } else if (!j.ok()) {
    out.failure = Failure{
        "distribution",
        fmt::format("{}: the {} draws do not follow the truncated distribution: chi-square {:.1f} "
                    "on {} degrees of freedom, p = {:.3g} < {:g}",
                    tensor, j.draws, j.statistic, j.degrees_of_freedom, j.p_value, kSamplingAlpha),
        {{"tensor", tensor},
         {"draws", j.draws},
         {"chi_square", j.statistic},
         {"degrees_of_freedom", j.degrees_of_freedom},
         {"p_value", j.p_value},
         {"alpha", kSamplingAlpha}}};
  }
  return out;
}

}  // namespace kharness::verify
