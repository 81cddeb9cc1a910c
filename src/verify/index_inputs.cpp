#include "verify/index_inputs.hpp"

#include <fmt/format.h>

#include <algorithm>
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
  return distribution == "indptr" || distribution == "indices";
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

std::vector<std::uint8_t> make_index_input(const TensorSpec& tensor, const InputGenerator& gen,
                                           const Bindings& axes, std::uint64_t count,
                                           std::uint64_t seed) {
  const std::string where = "kharness.inputs." + tensor.name;
  if (tensor.dtype != DType::kInt32 && tensor.dtype != DType::kInt64) {
    throw input_error(where, fmt::format("the {} role needs an int32 or int64 tensor, not {}",
                                         gen.distribution, dtype_name(tensor.dtype)));
  }
  std::vector<std::int64_t> values;
  if (gen.distribution == "indptr") {
    values = make_indptr(count, parameter(gen, "total", axes, where), seed);
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
