#include "verify/index_inputs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <unordered_set>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

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

}  // namespace

bool is_index_role(const std::string& distribution) {
  return distribution == "indptr" || distribution == "indices" ||
         distribution == "sparse_indices" || distribution == "fp8_cache_with_scales";
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
                                           std::uint64_t seed) {
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
  if (tensor.dtype != DType::kInt32 && tensor.dtype != DType::kInt64) {
    throw input_error(where, fmt::format("the {} role needs an int32 or int64 tensor, not {}",
                                         gen.distribution, dtype_name(tensor.dtype)));
  }
  std::vector<std::int64_t> values;
  if (gen.distribution == "indptr") {
    values = make_indptr(count, parameter(gen, "total", axes, where), seed);
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
  std::vector<std::uint8_t> bytes(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) {
    from_double(tensor.dtype, static_cast<double>(values[i]), &bytes[i * size]);
  }
  return bytes;
}

}  // namespace kharness::verify
