#include "verify/index_inputs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

// The probability rows' generator, compiled here as NVRTC compiles it for the device, every
// operation rounded to nearest (verify/probability_rows_core.hpp).
#define KH_HD inline
#define KH_FMA std::fma
#define KH_DIV(a, b) ((a) / (b))
#define KH_TO_FLOAT(x) static_cast<float>(x)
#include "verify/probability_rows_core.hpp"
#undef KH_HD
#undef KH_FMA
#undef KH_DIV
#undef KH_TO_FLOAT

namespace kharness::verify {
namespace {

std::int64_t parameter(const InputGenerator& gen, const char* key, const Bindings& axes,
                       const std::string& where) {
  auto it = gen.extra.find(key);
  if (it == gen.extra.end())
    throw input_error(where, fmt::format("the {} role needs \"{}\"", gen.distribution, key));
  try {
    return it->is_number_integer() ? it->get<std::int64_t>()
                                   : Expr::parse(it->get<std::string>()).eval(axes);
  } catch (const std::exception& e) {
    throw input_error(where + "." + key, e.what());
  }
}

// The values of an earlier index input that a coupled role names in `key`.
const std::vector<std::int64_t>& earlier(const InputGenerator& gen, const char* key,
                                         const IndexValues* made, const std::string& where) {
  auto it = gen.extra.find(key);
  if (it == gen.extra.end() || !it->is_string())
    throw input_error(
        where, fmt::format("the {} role needs \"{}\": an input name", gen.distribution, key));
  const std::string name = it->get<std::string>();
  if (!made || !made->count(name)) {
    throw input_error(where + "." + key,
                      fmt::format("'{}' is not an index input generated before this one", name));
  }
  return made->at(name);
}

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The standard normal quantile: Acklam's rational approximation, then one Halley step on erfc
// (relative error ~1e-15).
double normal_quantile(double u) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (u < 0.02425) {
    const double q = std::sqrt(-2 * std::log(u));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (u > 1 - 0.02425) {
    const double q = std::sqrt(-2 * std::log(1 - u));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    const double q = u - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - u;
  const double g = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - g / (1 + x * g / 2);
}

}  // namespace

std::vector<std::int64_t> make_covering_indptr(const std::vector<std::int64_t>& min_len,
                                               std::int64_t total, std::uint64_t seed) {
  std::int64_t need = 0;
  for (auto m : min_len) need += std::max<std::int64_t>(m, 0);
  if (need > total) {
    throw std::invalid_argument(
        fmt::format("the segments need at least {} in all, more than the total {}", need, total));
  }
  std::vector<std::int64_t> extra = make_indptr(min_len.size() + 1, total - need, seed);
  std::vector<std::int64_t> out(min_len.size() + 1, 0);
  for (std::size_t b = 0; b < min_len.size(); ++b) {
    out[b + 1] = out[b] + std::max<std::int64_t>(min_len[b], 0) + (extra[b + 1] - extra[b]);
  }
  return out;
}

std::vector<double> make_probability_table(double std) {
  constexpr int kSteps = probability_rows_core::kTableSteps;
  std::vector<double> w(kSteps + 1);
  for (int i = 0; i <= kSteps; ++i) {
    const double u = std::clamp(static_cast<double>(i) / kSteps, 0.5 / kSteps, 1 - 0.5 / kSteps);
    w[i] = std::exp(std * normal_quantile(u));
  }
  return w;
}

// Rows in parallel (the values do not depend on the thread count): per row, the lanes' partial
// sums, their tree, then the values, as the device's kh_probability_rows computes them.
std::vector<float> make_probability_rows(std::uint64_t rows, std::uint64_t vocab, double std,
                                         std::uint64_t seed) {
  namespace pr = probability_rows_core;
  const std::vector<double> table = make_probability_table(std);
  std::vector<float> out(rows * vocab);
  auto make_rows = [&](std::uint64_t begin, std::uint64_t end) {
    double lanes[pr::kLanes];
    for (std::uint64_t r = begin; r < end; ++r) {
      const std::uint64_t key = pr::row_key(seed, r);
      for (int t = 0; t < pr::kLanes; ++t) lanes[t] = pr::lane_sum(table.data(), key, vocab, t);
      for (int h = pr::kLanes / 2; h > 0; h /= 2) {
        for (int t = 0; t < h; ++t) pr::tree_step(lanes, h, t);
      }
      float* o = out.data() + r * vocab;
      for (std::uint64_t j = 0; j < vocab; ++j) {
        o[j] = pr::value(pr::weight(table.data(), key, j), lanes[0]);
      }
    }
  };
  const std::uint64_t threads =
      std::clamp<std::uint64_t>(rows * vocab / (1 << 20), 1,
                                std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  const std::uint64_t chunk = (rows + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (std::uint64_t t = 1; t < threads; ++t) {
    pool.emplace_back(make_rows, std::min(rows, t * chunk), std::min(rows, (t + 1) * chunk));
  }
  make_rows(0, std::min(rows, chunk));
  for (auto& th : pool) th.join();
  return out;
}

ProbabilityRowsShape probability_rows_shape(const TensorSpec& tensor, const InputGenerator& gen,
                                            const Bindings& axes, std::uint64_t count) {
  const std::string where = "kharness.inputs." + tensor.name;
  if (tensor.dtype != DType::kFloat32) {
    throw input_error(where, "the probability_rows role needs a float32 tensor");
  }
  if (!(gen.std > 0)) throw input_error(where, "needs std > 0 (the log-probability spread)");
  const auto shape = tensor_shape(tensor, axes);
  const std::uint64_t vocab = shape.empty() ? count : static_cast<std::uint64_t>(shape.back());
  return {vocab == 0 ? 0 : count / vocab, vocab};
}

bool is_index_role(const std::string& distribution) {
  return distribution == "indptr" || distribution == "indices" || distribution == "last_page_len" ||
         distribution == "probability_rows" || distribution == "sparse_indices" ||
         distribution == "packed_topk_ids" || distribution == "fp8_cache_with_scales";
}

std::vector<std::int64_t> make_indptr(std::uint64_t n, std::int64_t total, std::uint64_t seed) {
  if (n == 0) return {};
  std::vector<std::int64_t> out(n, 0);
  if (n == 1) return out;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> cut(0, std::max<std::int64_t>(total, 0));
  for (std::uint64_t i = 1; i + 1 < n; ++i) out[i] = cut(rng);
  std::sort(out.begin() + 1, out.end() - 1);
  out[n - 1] = total;
  return out;
}

std::vector<std::int64_t> make_indices(std::uint64_t n, std::int64_t max, std::uint64_t seed) {
  if (max < 0 || n > static_cast<std::uint64_t>(max) + 1) {
    throw std::invalid_argument(fmt::format("{} distinct values do not fit in [0, {}]", n, max));
  }
  std::mt19937_64 rng(seed);
  const auto range = static_cast<std::uint64_t>(max) + 1;
  std::vector<std::int64_t> out;
  out.reserve(n);
  if (range <= 4 * n) {
    std::vector<std::int64_t> all(range);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    out.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    std::unordered_set<std::int64_t> seen;
    std::uniform_int_distribution<std::int64_t> pick(0, max);
    while (out.size() < n) {
      std::int64_t v = pick(rng);
      if (seen.insert(v).second) out.push_back(v);
    }
  }
  return out;
}

std::vector<std::int64_t> make_sparse_indices(std::uint64_t rows, std::uint64_t k,
                                              std::int64_t min_valid, std::int64_t max,
                                              std::uint64_t seed) {
  const auto lo = static_cast<std::uint64_t>(
      std::clamp<std::int64_t>(min_valid, 0, static_cast<std::int64_t>(k)));
  if (max < 0 || lo > static_cast<std::uint64_t>(max) + 1) {
    throw std::invalid_argument(
        fmt::format("{} distinct values per row do not fit in [0, {}]", lo, max));
  }
  std::mt19937_64 rng(seed);
  const std::uint64_t hi = std::min<std::uint64_t>(k, static_cast<std::uint64_t>(max) + 1);
  std::uniform_int_distribution<std::uint64_t> count(lo, hi);
  std::vector<std::int64_t> out(rows * k, -1);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::uint64_t n = count(rng);
    const std::vector<std::int64_t> ids = make_indices(n, max, rng());
    std::copy(ids.begin(), ids.end(), out.begin() + static_cast<std::ptrdiff_t>(r * k));
  }
  return out;
}

std::vector<std::uint8_t> make_fp8_cache_with_scales(std::uint64_t pages, std::int64_t page_size,
                                                     std::int64_t head_dim, double std,
                                                     double scale_low, double scale_high,
                                                     std::uint64_t seed) {
  // e4m3 codes of normal(0, std) quantiles clamped to the finite range, drawn by table lookup.
  std::vector<std::uint8_t> codes(4096);
  {
    std::mt19937_64 rng(seed ^ 0x5eedull);
    std::normal_distribution<double> normal(0.0, std);
    for (auto& c : codes) {
      from_double(DType::kFloat8E4M3, std::clamp(normal(rng), -448.0, 448.0), &c);
    }
  }
  const auto ps = static_cast<std::uint64_t>(page_size);
  const auto hd = static_cast<std::uint64_t>(head_dim);
  const std::uint64_t page_bytes = ps * (hd + 4);
  std::vector<std::uint8_t> out(pages * page_bytes);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> scale(static_cast<float>(scale_low),
                                              static_cast<float>(scale_high));
  for (std::uint64_t p = 0; p < pages; ++p) {
    std::uint8_t* page = out.data() + p * page_bytes;
    for (std::uint64_t i = 0; i < ps * hd; i += 4) {
      std::uint64_t r = rng();
      for (std::uint64_t j = 0; j < 4 && i + j < ps * hd; ++j, r >>= 16)
        page[i + j] = codes[r & 4095];
    }
    for (std::uint64_t s = 0; s < ps; ++s) {
      const float v = scale(rng);
      std::memcpy(page + ps * hd + s * 4, &v, 4);
    }
  }
  return out;
}

std::vector<std::uint8_t> make_index_input(const TensorSpec& tensor, const InputGenerator& gen,
                                           const Bindings& axes, std::uint64_t count,
                                           std::uint64_t seed, IndexValues* made) {
  const std::string where = "kharness.inputs." + tensor.name;
  if (gen.distribution == "fp8_cache_with_scales") {
    if (tensor.dtype != DType::kInt8 && tensor.dtype != DType::kUInt8) {
      throw input_error(where, fmt::format("the fp8_cache_with_scales role needs an int8 or uint8 "
                                           "tensor, not {}",
                                           dtype_name(tensor.dtype)));
    }
    const std::int64_t page_size = parameter(gen, "page_size", axes, where);
    const std::int64_t head_dim = parameter(gen, "head_dim", axes, where);
    const std::uint64_t page_bytes = static_cast<std::uint64_t>(page_size * (head_dim + 4));
    if (page_size <= 0 || head_dim <= 0 || count % page_bytes != 0) {
      throw input_error(where, fmt::format("{} bytes are not whole pages of {} tokens x ({} + 4) "
                                           "bytes",
                                           count, page_size, head_dim));
    }
    if (!(gen.std > 0) || !(gen.low > 0) || !(gen.low <= gen.high)) {
      throw input_error(where, "needs std > 0 and 0 < low <= high (the scale range)");
    }
    return make_fp8_cache_with_scales(count / page_bytes, page_size, head_dim, gen.std, gen.low,
                                      gen.high, seed);
  }
  if (gen.distribution == "probability_rows") {
    const ProbabilityRowsShape shape = probability_rows_shape(tensor, gen, axes, count);
    std::vector<float> rows = make_probability_rows(shape.rows, shape.vocab, gen.std, seed);
    std::vector<std::uint8_t> bytes(rows.size() * 4);
    if (!rows.empty()) std::memcpy(bytes.data(), rows.data(), bytes.size());
    return bytes;
  }
  if (tensor.dtype != DType::kInt32 && tensor.dtype != DType::kInt64) {
    throw input_error(where, fmt::format("the {} role needs an int32 or int64 tensor, not {}",
                                         gen.distribution, dtype_name(tensor.dtype)));
  }
  std::vector<std::int64_t> values;
  const std::int64_t page_size =
      gen.extra.contains("page_size") ? parameter(gen, "page_size", axes, where) : 1;
  if (page_size <= 0) throw input_error(where + ".page_size", "must be > 0");
  if (gen.distribution == "indptr" && gen.extra.contains("cover")) {
    const auto& cover = earlier(gen, "cover", made, where);
    if (cover.size() != count) {
      throw input_error(where, fmt::format("has {} offsets, its cover {} has {}", count,
                                           gen.extra["cover"].get<std::string>(), cover.size()));
    }
    std::vector<std::int64_t> min_len;
    for (std::size_t b = 0; b + 1 < cover.size(); ++b)
      min_len.push_back(cdiv(cover[b + 1] - cover[b], page_size));
    try {
      values = make_covering_indptr(min_len, parameter(gen, "total", axes, where), seed);
    } catch (const std::invalid_argument& e) {
      throw input_error(where, e.what());
    }
  } else if (gen.distribution == "indptr") {
    values = make_indptr(count, parameter(gen, "total", axes, where), seed);
  } else if (gen.distribution == "last_page_len") {
    // Without "cover" (decode: one query that sees every token) any 1..page_size will do.
    // One entry per request (the indptr's segments); some FlashInfer-Bench prefill definitions
    // shape it [len_indptr] (one more than the requests, which their reference never reads): that
    // trailing entry gets a valid length too.
    const auto& pages = earlier(gen, "indptr", made, where);
    const std::uint64_t requests = pages.empty() ? 0 : pages.size() - 1;
    const std::vector<std::int64_t> no_cover(pages.size(), 0);
    const auto& cover = gen.extra.contains("cover") ? earlier(gen, "cover", made, where) : no_cover;
    if (pages.empty() || (count != requests && count != requests + 1)) {
      throw input_error(where, fmt::format("has {} entries; its indptr {} has {} offsets, so {} "
                                           "(one per request) or {} were expected",
                                           count, gen.extra["indptr"].get<std::string>(),
                                           pages.size(), requests, requests + 1));
    }
    if (cover.size() != pages.size()) {
      throw input_error(where,
                        fmt::format("its indptr has {} offsets, its cover {} has {}", pages.size(),
                                    gen.extra["cover"].get<std::string>(), cover.size()));
    }
    std::mt19937_64 rng(seed);
    for (std::uint64_t b = 0; b < count; ++b) {
      const std::int64_t np = b < requests ? pages[b + 1] - pages[b] : 1;
      const std::int64_t q = b < requests ? cover[b + 1] - cover[b] : 0;
      const std::int64_t lo = std::clamp<std::int64_t>(q - (np - 1) * page_size, 1, page_size);
      values.push_back(std::uniform_int_distribution<std::int64_t>(lo, page_size)(rng));
    }
  } else if (gen.distribution == "packed_topk_ids") {
    const auto shape = tensor_shape(tensor, axes);
    const std::uint64_t k = shape.empty() ? count : static_cast<std::uint64_t>(shape.back());
    const std::int64_t experts = parameter(gen, "experts", axes, where);
    const bool sigmoid = gen.extra.value("sigmoid", false);
    if (experts < static_cast<std::int64_t>(k) || experts > 32767) {
      throw input_error(
          where + ".experts",
          fmt::format("needs top_k {} <= experts <= 32767 (an int16 id), not {}", k, experts));
    }
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::uint64_t r = 0; k > 0 && r < count / k; ++r) {
      const auto ids = make_indices(k, experts - 1, rng());
      std::vector<double> logit(k);
      double m = -1e300, sum = 0;
      for (auto& x : logit) m = std::max(m, x = normal(rng));
      for (double x : logit) sum += std::exp(x - m);
      for (std::uint64_t j = 0; j < k; ++j) {
        const double w = sigmoid ? 1.0 / (1.0 + std::exp(-logit[j])) : std::exp(logit[j] - m) / sum;
        std::uint8_t bf16[2];
        from_double(DType::kBFloat16, w, bf16);
        const std::uint32_t bits = static_cast<std::uint32_t>(bf16[0]) | (bf16[1] << 8);
        values.push_back(
            static_cast<std::int64_t>((static_cast<std::uint32_t>(ids[j]) << 16) | bits));
      }
    }
  } else if (gen.distribution == "sparse_indices") {
    const auto shape = tensor_shape(tensor, axes);
    const std::uint64_t k = shape.empty() ? count : static_cast<std::uint64_t>(shape.back());
    const std::int64_t max = parameter(gen, "max", axes, where);
    const std::int64_t min_valid = gen.extra.contains("min_valid")
                                       ? parameter(gen, "min_valid", axes, where)
                                       : static_cast<std::int64_t>(k);
    try {
      values = make_sparse_indices(k == 0 ? 0 : count / k, k, min_valid, max, seed);
    } catch (const std::invalid_argument& e) {
      throw input_error(where, e.what());
    }
  } else {
    try {
      values = make_indices(count, parameter(gen, "max", axes, where), seed);
    } catch (const std::invalid_argument& e) {
      throw input_error(where, e.what());
    }
  }
  const std::size_t size = dtype_size(tensor.dtype);
  if (made) (*made)[tensor.name] = values;
  std::vector<std::uint8_t> bytes(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) {
    from_double(tensor.dtype, static_cast<double>(values[i]), &bytes[i * size]);
  }
  return bytes;
}

}  // namespace kharness::verify
