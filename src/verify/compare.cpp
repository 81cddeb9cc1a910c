#include "verify/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "kharness/numeric.hpp"
#include "verify/sampling_compare.hpp"
#include "verify/topk_compare.hpp"

namespace kharness::verify {
namespace {

struct Partial {
  std::uint64_t mismatches = 0;
  std::int64_t first_bad = -1;
  double first_expected = 0, first_got = 0;
  double max_abs = 0, max_rel = 0;
  std::uint64_t poison = 0;
  std::int64_t first_poison = -1;
  std::uint64_t nonfinite = 0;
  std::int64_t first_nonfinite = -1;
  double nf_expected = 0, nf_got = 0;
  std::uint64_t reference_poison = 0;
};

// Element access by dtype, inlined into the comparison loop: raw bits for the poison test, a
// double for the arithmetic. Common float types get fast paths; the rest go through to_double.
template <DType D>
struct Elem;

template <>
struct Elem<DType::kFloat32> {
  using Bits = std::uint32_t;
  static double value(Bits b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
};

template <>
struct Elem<DType::kBFloat16> {
  using Bits = std::uint16_t;
  static double value(Bits b) {
    std::uint32_t w = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
};

template <>
struct Elem<DType::kFloat16> {
  using Bits = std::uint16_t;
  static double value(Bits b) {
    static const std::vector<float> table = [] {
      std::vector<float> t(65536);
      for (std::uint32_t i = 0; i < 65536; ++i) {
        auto h = static_cast<std::uint16_t>(i);
        t[i] = static_cast<float>(
            to_double(DType::kFloat16, reinterpret_cast<const std::uint8_t*>(&h)));
      }
      return t;
    }();
    return table[b];
  }
};

struct Generic {
  DType dtype;
  std::size_t size;
  std::vector<std::uint8_t> poison;
  bool is_poison(const std::uint8_t* p) const { return std::memcmp(p, poison.data(), size) == 0; }
  double value(const std::uint8_t* p) const { return to_double(dtype, p); }
};

// One element pair; returns nothing, updates `p`.
inline void compare_one(std::uint64_t i, bool e_poison, bool g_poison, double e, double g,
                        const Tolerance& tol, Partial& p) {
  if (e_poison) {
    ++p.reference_poison;
    return;
  }
  if (g_poison) {
    if (p.first_poison < 0) p.first_poison = static_cast<std::int64_t>(i);
    ++p.poison;
    return;
  }
  if (!std::isfinite(e)) {
    // Where the reference is NaN/Inf the candidate must be the same kind of non-finite.
    bool same = (std::isnan(e) && std::isnan(g)) || (std::isinf(e) && g == e);
    if (!same) {
      ++p.mismatches;
      if (p.first_bad < 0) {
        p.first_bad = static_cast<std::int64_t>(i);
        p.first_expected = e;
        p.first_got = g;
      }
    }
    return;
  }
  if (!std::isfinite(g)) {
    if (p.first_nonfinite < 0) {
      p.first_nonfinite = static_cast<std::int64_t>(i);
      p.nf_expected = e;
      p.nf_got = g;
    }
    ++p.nonfinite;
    return;
  }
  const double abs_err = std::fabs(g - e);
  if (abs_err == 0) return;
  const double rel_err = e == 0 ? std::numeric_limits<double>::infinity() : abs_err / std::fabs(e);
  p.max_abs = std::max(p.max_abs, abs_err);
  if (std::isfinite(rel_err)) p.max_rel = std::max(p.max_rel, rel_err);
  if (abs_err > tol.atol && rel_err > tol.rtol) {
    ++p.mismatches;
    if (p.first_bad < 0) {
      p.first_bad = static_cast<std::int64_t>(i);
      p.first_expected = e;
      p.first_got = g;
    }
  }
}

template <DType D>
void compare_typed(const std::uint8_t* expected, const std::uint8_t* got, std::uint64_t begin,
                   std::uint64_t end, const Tolerance& tol, Partial& p) {
  using Bits = typename Elem<D>::Bits;
  Bits poison;
  std::memcpy(&poison, poison_element(D).data(), sizeof(Bits));
  for (std::uint64_t i = begin; i < end; ++i) {
    Bits eb, gb;
    std::memcpy(&eb, expected + i * sizeof(Bits), sizeof(Bits));
    std::memcpy(&gb, got + i * sizeof(Bits), sizeof(Bits));
    if (eb == gb && eb != poison) continue;  // identical and written: nothing to count
    compare_one(i, eb == poison, gb == poison, Elem<D>::value(eb), Elem<D>::value(gb), tol, p);
  }
}

void compare_range(DType dtype, const std::uint8_t* expected, const std::uint8_t* got,
                   std::uint64_t begin, std::uint64_t end, const Tolerance& tol, Partial& p) {
  switch (dtype) {
    case DType::kFloat32:
      return compare_typed<DType::kFloat32>(expected, got, begin, end, tol, p);
    case DType::kBFloat16:
      return compare_typed<DType::kBFloat16>(expected, got, begin, end, tol, p);
    case DType::kFloat16:
      return compare_typed<DType::kFloat16>(expected, got, begin, end, tol, p);
    default:
      break;
  }
  Generic gen{dtype, dtype_size(dtype), poison_element(dtype)};
  for (std::uint64_t i = begin; i < end; ++i) {
    const std::uint8_t* e = expected + i * gen.size;
    const std::uint8_t* g = got + i * gen.size;
    if (std::memcmp(e, g, gen.size) == 0 && !gen.is_poison(e)) continue;
    compare_one(i, gen.is_poison(e), gen.is_poison(g), gen.value(e), gen.value(g), tol, p);
  }
}

}  // namespace

OutputCheck compare_output(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                           const std::uint8_t* got, std::uint64_t count, const Tolerance& tolerance,
                           unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Small tensors are not worth a thread each.
  const std::uint64_t min_chunk = 1 << 18;
  threads = static_cast<unsigned>(
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(threads, count / min_chunk)));
  std::vector<Partial> parts(threads);
  std::vector<std::thread> pool;
  const std::uint64_t chunk = (count + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t begin = std::min<std::uint64_t>(count, t * chunk);
    const std::uint64_t end = std::min<std::uint64_t>(count, begin + chunk);
    if (t + 1 == threads) {
      compare_range(dtype, expected, got, begin, end, tolerance, parts[t]);
    } else {
      pool.emplace_back(compare_range, dtype, expected, got, begin, end, std::cref(tolerance),
                        std::ref(parts[t]));
    }
  }
  for (auto& th : pool) th.join();
  // Chunks are in index order, so the first chunk with a hit has the first index.
  OutputCheck out;
  Comparison& c = out.comparison;
  c.tensor = tensor;
  c.elements = count;
  for (const auto& p : parts) {
    c.mismatches += p.mismatches;
    c.max_abs_error = std::max(c.max_abs_error, p.max_abs);
    c.max_rel_error = std::max(c.max_rel_error, p.max_rel);
    if (c.first_bad_index < 0 && p.first_bad >= 0) {
      c.first_bad_index = p.first_bad;
      c.expected = p.first_expected;
      c.got = p.first_got;
    }
    out.poison_left += p.poison;
    if (out.first_poison < 0) out.first_poison = p.first_poison;
    out.nonfinite += p.nonfinite;
    out.reference_unwritten += p.reference_poison;
    if (out.first_nonfinite < 0 && p.first_nonfinite >= 0) {
      out.first_nonfinite = p.first_nonfinite;
      out.nonfinite_expected = p.nf_expected;
      out.nonfinite_got = p.nf_got;
    }
  }
  // Unwritten and non-finite elements count against the matched ratio too.
  const std::uint64_t bad = c.mismatches + out.poison_left + out.nonfinite;
  c.matched_ratio = count == 0 ? 1.0 : 1.0 - static_cast<double>(bad) / static_cast<double>(count);
  return out;
}

std::optional<Failure> output_failure(const OutputCheck& check, const Tolerance& tolerance) {
  const Comparison& c = check.comparison;
  if (check.poison_left > 0) {
    Failure f{"output_not_written",
              fmt::format("{}: {} of {} elements were never written (first at index {})", c.tensor,
                          check.poison_left, c.elements, check.first_poison),
              {{"tensor", c.tensor},
               {"unwritten", check.poison_left},
               {"elements", c.elements},
               {"first_bad_index", check.first_poison}}};
    return f;
  }
  if (check.nonfinite > 0) {
    Failure f{"nan_or_inf",
              fmt::format("{}: {} NaN/Inf elements where the reference is finite (first at index "
                          "{}: expected {}, got {})",
                          c.tensor, check.nonfinite, check.first_nonfinite,
                          check.nonfinite_expected, check.nonfinite_got),
              {{"tensor", c.tensor},
               {"count", check.nonfinite},
               {"first_bad_index", check.first_nonfinite},
               {"expected", check.nonfinite_expected},
               {"got", std::isnan(check.nonfinite_got)
                           ? nlohmann::json("nan")
                           : nlohmann::json(check.nonfinite_got > 0 ? "inf" : "-inf")}}};
    return f;
  }
  if (check.failure) return check.failure;
  if (c.matched_ratio < tolerance.required_matched_ratio) {
    Failure f{
        "tolerance",
        fmt::format(
            "{}: {} of {} elements out of tolerance (atol {}, rtol {}); matched ratio {:.6f} < {}; "
            "first at index {}: expected {}, got {}; max abs error {:.4g}, max rel error {:.4g}",
            c.tensor, c.mismatches, c.elements, tolerance.atol, tolerance.rtol, c.matched_ratio,
            tolerance.required_matched_ratio, c.first_bad_index, c.expected, c.got, c.max_abs_error,
            c.max_rel_error),
        {{"tensor", c.tensor},
         {"mismatches", c.mismatches},
         {"elements", c.elements},
         {"first_bad_index", c.first_bad_index},
         {"expected", c.expected},
         {"got", c.got},
         {"max_abs_error", c.max_abs_error},
         {"max_rel_error", c.max_rel_error},
         {"matched_ratio", c.matched_ratio},
         {"atol", tolerance.atol},
         {"rtol", tolerance.rtol},
         {"required_matched_ratio", tolerance.required_matched_ratio}}};
    return f;
  }
  return std::nullopt;
}

namespace {
OutputCheck compare_elementwise(const std::string& tensor, DType dtype,
                                const std::uint8_t* expected, const std::uint8_t* got,
                                std::uint64_t count, const Tolerance& tolerance, unsigned threads,
                                const CompareContext& /*context*/) {
  return compare_output(tensor, dtype, expected, got, count, tolerance, threads);
}

const std::vector<std::pair<std::string, Comparator>>& comparators() {
  static const std::vector<std::pair<std::string, Comparator>> table = {
      {"elementwise", &compare_elementwise},
      {"topk_set", &compare_topk_set},
      {"sampling", &compare_sampling}};
  return table;
}
}  // namespace

Comparator find_comparator(const std::string& name) {
  for (const auto& [n, c] : comparators()) {
    if (n == name) return c;
  }
  return nullptr;
}

std::vector<std::string> comparator_names() {
  std::vector<std::string> names;
  for (const auto& [n, c] : comparators()) names.push_back(n);
  return names;
}

std::uint64_t bitwise_differences(const std::uint8_t* a, const std::uint8_t* b,
                                  std::uint64_t bytes) {
  if (std::memcmp(a, b, bytes) == 0) return 0;
  std::uint64_t n = 0;
  for (std::uint64_t i = 0; i < bytes; ++i) n += a[i] != b[i];
  return n;
}

}  // namespace kharness::verify
