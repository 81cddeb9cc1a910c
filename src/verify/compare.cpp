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
  std::uint64_t bits(const std::uint8_t* p) const {
    std::uint64_t b = 0;
    std::memcpy(&b, p, size);  // little-endian: zero-extended
    return b;
  }
};

// One element pair that is not identical-and-written: `eb`, `gb` its bits (zero-extended), `e`,
// `g` their values. Updates `p`.
inline void compare_one(std::uint64_t i, bool e_poison, bool g_poison, double e, double g,
                        std::uint64_t eb, std::uint64_t gb, const Tolerance& tol,
                        ElementwiseTotals& p) {
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
        p.first_bad_expected = eb;
        p.first_bad_got = gb;
      }
    }
    return;
  }
  if (!std::isfinite(g)) {
    if (p.first_nonfinite < 0) {
      p.first_nonfinite = static_cast<std::int64_t>(i);
      p.nonfinite_expected = eb;
      p.nonfinite_got = gb;
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
      p.first_bad_expected = eb;
      p.first_bad_got = gb;
    }
  }
}

template <DType D>
void compare_typed(const std::uint8_t* expected, const std::uint8_t* got, std::uint64_t begin,
                   std::uint64_t end, const Tolerance& tol, ElementwiseTotals& p) {
  using Bits = typename Elem<D>::Bits;
  Bits poison;
  std::memcpy(&poison, poison_element(D).data(), sizeof(Bits));
  for (std::uint64_t i = begin; i < end; ++i) {
    Bits eb, gb;
    std::memcpy(&eb, expected + i * sizeof(Bits), sizeof(Bits));
    std::memcpy(&gb, got + i * sizeof(Bits), sizeof(Bits));
    if (eb == gb && eb != poison) continue;  // identical and written: nothing to count
    compare_one(i, eb == poison, gb == poison, Elem<D>::value(eb), Elem<D>::value(gb), eb, gb, tol,
                p);
  }
}

void compare_range(DType dtype, const std::uint8_t* expected, const std::uint8_t* got,
                   std::uint64_t begin, std::uint64_t end, const Tolerance& tol,
                   ElementwiseTotals& p) {
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
    compare_one(i, gen.is_poison(e), gen.is_poison(g), gen.value(e), gen.value(g), gen.bits(e),
                gen.bits(g), tol, p);
  }
}

}  // namespace

ElementwiseTotals elementwise_totals(DType dtype, const std::uint8_t* expected,
                                     const std::uint8_t* got, std::uint64_t count,
                                     const Tolerance& tolerance, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Small tensors are not worth a thread each.
  const std::uint64_t min_chunk = 1 << 18;
  threads = static_cast<unsigned>(
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(threads, count / min_chunk)));
  std::vector<ElementwiseTotals> parts(threads);
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
  ElementwiseTotals out;
  out.elements = count;
  for (const auto& p : parts) {
    out.mismatches += p.mismatches;
    out.max_abs = std::max(out.max_abs, p.max_abs);
    out.max_rel = std::max(out.max_rel, p.max_rel);
    if (out.first_bad < 0 && p.first_bad >= 0) {
      out.first_bad = p.first_bad;
      out.first_bad_expected = p.first_bad_expected;
      out.first_bad_got = p.first_bad_got;
    }
    out.poison += p.poison;
    if (out.first_poison < 0) out.first_poison = p.first_poison;
    out.nonfinite += p.nonfinite;
    out.reference_poison += p.reference_poison;
    if (out.first_nonfinite < 0 && p.first_nonfinite >= 0) {
      out.first_nonfinite = p.first_nonfinite;
      out.nonfinite_expected = p.nonfinite_expected;
      out.nonfinite_got = p.nonfinite_got;
    }
  }
  return out;
}

double element_value(DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case DType::kFloat32:
      return Elem<DType::kFloat32>::value(static_cast<std::uint32_t>(bits));
    case DType::kBFloat16:
      return Elem<DType::kBFloat16>::value(static_cast<std::uint16_t>(bits));
    case DType::kFloat16:
      return Elem<DType::kFloat16>::value(static_cast<std::uint16_t>(bits));
    default:
      break;
  }
  std::uint8_t bytes[8];
  std::memcpy(bytes, &bits, sizeof bytes);  // little-endian: the element's bytes first
  return to_double(dtype, bytes);
}

OutputCheck elementwise_check(const std::string& tensor, DType dtype,
                              const ElementwiseTotals& totals) {
  OutputCheck out;
  Comparison& c = out.comparison;
  c.tensor = tensor;
  c.elements = totals.elements;
  c.mismatches = totals.mismatches;
  c.max_abs_error = totals.max_abs;
  c.max_rel_error = totals.max_rel;
  if (totals.first_bad >= 0) {
    c.first_bad_index = totals.first_bad;
    c.expected = element_value(dtype, totals.first_bad_expected);
    c.got = element_value(dtype, totals.first_bad_got);
  }
  out.poison_left = totals.poison;
  out.first_poison = totals.first_poison;
  out.nonfinite = totals.nonfinite;
  out.reference_unwritten = totals.reference_poison;
  if (totals.first_nonfinite >= 0) {
    out.first_nonfinite = totals.first_nonfinite;
    out.nonfinite_expected = element_value(dtype, totals.nonfinite_expected);
    out.nonfinite_got = element_value(dtype, totals.nonfinite_got);
  }
  // Unwritten and non-finite elements count against the matched ratio too.
  const std::uint64_t count = totals.elements;
  const std::uint64_t bad = c.mismatches + out.poison_left + out.nonfinite;
  c.matched_ratio = count == 0 ? 1.0 : 1.0 - static_cast<double>(bad) / static_cast<double>(count);
  return out;
}

OutputCheck compare_output(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                           const std::uint8_t* got, std::uint64_t count, const Tolerance& tolerance,
                           unsigned threads) {
  return elementwise_check(tensor, dtype,
                           elementwise_totals(dtype, expected, got, count, tolerance, threads));
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
