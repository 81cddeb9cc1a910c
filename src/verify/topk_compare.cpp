#include "verify/topk_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"

namespace kharness::verify {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct RowTally {
  std::uint64_t mismatches = 0;
  std::int64_t first_bad = -1;
  double first_expected = 0, first_got = 0;
  double max_gap = 0, max_rel_gap = 0;
  std::uint64_t poison = 0;
  std::int64_t first_poison = -1;
  std::uint64_t reference_poison = 0;
  // Valid ids after a -1 where the definition puts the padding after the valid ids.
  std::uint64_t misplaced = 0;
  std::int64_t first_misplaced = -1;  // element index of the first such id
  std::int64_t first_misplaced_id = 0;
  std::int64_t first_padding = -1;  // element index of the -1 before it

  void bad(std::int64_t element, double expected, double got) {
    ++mismatches;
    if (first_bad < 0 || element < first_bad) {
      first_bad = element;
      first_expected = expected;
      first_got = got;
    }
  }
};

// One row; updates `t`.
void compare_row(DType dtype, const std::uint8_t* expected, const std::uint8_t* got,
                 std::uint64_t row, std::uint64_t k, const TopkScorer& scorer, const Tolerance& tol,
                 TopkPadding padding, RowTally& t) {
  const std::uint64_t base = row * k;
  const std::size_t size = dtype_size(dtype);
  const std::vector<std::uint8_t> poison = poison_element(dtype);
  std::vector<std::int64_t> e, g;  // valid entries (not -1, not poison)
  std::vector<std::uint64_t> g_pos;
  bool written = true;
  std::int64_t padding_at = -1;  // the row's first -1 (element index)
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint8_t* ep = expected + (base + j) * size;
    const std::uint8_t* gp = got + (base + j) * size;
    if (std::memcmp(ep, poison.data(), size) == 0) {
      ++t.reference_poison;
    } else {
      const std::int64_t v = read_index(dtype, expected, base + j);
      if (v != -1) e.push_back(v);
    }
    if (std::memcmp(gp, poison.data(), size) == 0) {
      if (t.first_poison < 0) t.first_poison = static_cast<std::int64_t>(base + j);
      ++t.poison;
      written = false;
      continue;
    }
    const std::int64_t v = read_index(dtype, got, base + j);
    const auto element = static_cast<std::int64_t>(base + j);
    if (v == -1) {
      if (padding_at < 0) padding_at = element;
      continue;
    }
    g.push_back(v);
    g_pos.push_back(j);
    // Checked before the set comparison: the same set with a -1 among its ids is still wrong
    // where the definition fixes the padding's place.
    if (padding == TopkPadding::kAfterIds && padding_at >= 0) {
      ++t.misplaced;
      t.bad(element, static_cast<double>(read_index(dtype, expected, base + j)),
            static_cast<double>(v));
      if (t.first_misplaced < 0 || element < t.first_misplaced) {
        t.first_misplaced = element;
        t.first_misplaced_id = v;
        t.first_padding = padding_at;
      }
    }
  }
  if (!written || t.reference_poison > 0) return;  // reported as such, not as set differences

  // Fast path: the same set (and so the same number of -1 entries).
  std::vector<std::int64_t> es = e, gs = g;
  std::sort(es.begin(), es.end());
  std::sort(gs.begin(), gs.end());
  if (es == gs) return;  // (misplaced padding, if any, is already counted)

  const TopkRowScore score = scorer(row);
  double threshold = std::numeric_limits<double>::infinity();  // T: lowest score of the reference
  for (std::int64_t v : e) {
    const double s = score(v);
    if (!std::isnan(s)) threshold = std::min(threshold, s);
  }
  const bool has_threshold = !e.empty() && std::isfinite(threshold);
  const double tie = has_threshold ? tol.atol + tol.rtol * std::fabs(threshold) : 0.0;
  const std::unordered_set<std::int64_t> e_set(e.begin(), e.end());
  std::unordered_set<std::int64_t> g_set;
  std::uint64_t selected = 0;  // distinct valid entries of the candidate
  auto expected_at = [&](std::uint64_t j) {
    return static_cast<double>(read_index(dtype, expected, base + j));
  };
  for (std::size_t i = 0; i < g.size(); ++i) {
    const std::int64_t v = g[i];
    const std::uint64_t j = g_pos[i];
    const auto element = static_cast<std::int64_t>(base + j);
    // An id after misplaced padding is already one mismatch (above): not counted twice.
    const bool counted =
        padding == TopkPadding::kAfterIds && padding_at >= 0 && element > padding_at;
    if (!g_set.insert(v).second) {  // listed twice
      if (!counted) t.bad(element, expected_at(j), static_cast<double>(v));
      continue;
    }
    if (e_set.count(v)) {
      ++selected;
      continue;
    }
    const double s = score(v);
    if (std::isnan(s)) {  // not a valid choice for this row
      if (!counted) t.bad(element, expected_at(j), static_cast<double>(v));
      continue;
    }
    ++selected;
    if (!has_threshold) continue;  // counted by the selection size below
    if (s < threshold - tie) {
      const double gap = threshold - s;
      t.max_gap = std::max(t.max_gap, gap);
      if (threshold != 0) t.max_rel_gap = std::max(t.max_rel_gap, gap / std::fabs(threshold));
      if (!counted) t.bad(element, expected_at(j), static_cast<double>(v));
    }
  }
  // Indices of the reference the candidate left out: only a tie at the threshold may be.
  std::uint64_t missing_high = 0;
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::int64_t v = read_index(dtype, expected, base + j);
    if (v == -1 || g_set.count(v)) continue;
    const double s = score(v);
    if (std::isnan(s) || !has_threshold) continue;
    if (s > threshold + tie) {
      const double gap = s - threshold;
      t.max_gap = std::max(t.max_gap, gap);
      if (threshold != 0) t.max_rel_gap = std::max(t.max_rel_gap, gap / std::fabs(threshold));
      // Attributed to the reference's position (the candidate has something else there).
      t.bad(static_cast<std::int64_t>(base + j), static_cast<double>(v),
            static_cast<double>(read_index(dtype, got, base + j)));
      ++missing_high;
    }
  }
  // As many selected as the reference: too few (extra -1s; not already counted as missing) or
  // too many (fewer -1s) is wrong, one mismatch per id.
  const std::uint64_t want = e.size();
  std::uint64_t more = 0;
  if (selected < want) more = want - selected > missing_high ? want - selected - missing_high : 0;
  if (selected > want) more = selected - want;
  for (std::uint64_t n = 0; n < more; ++n) {
    const std::uint64_t j = std::min<std::uint64_t>(k - 1, std::min(want, selected) + n);
    t.bad(static_cast<std::int64_t>(base + j), expected_at(j),
          static_cast<double>(read_index(dtype, got, base + j)));
  }
}

const std::array<double, 256>& e4m3_table() {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> out{};
    for (int i = 0; i < 256; ++i) {
      const auto b = static_cast<std::uint8_t>(i);
      out[i] = to_double(DType::kFloat8E4M3, &b);
    }
    return out;
  }();
  return table;
}

std::int64_t axis(const CompareContext& c, const char* name) {
  auto it = c.axes.find(name);
  if (it == c.axes.end()) {
    throw input_error("topk_set comparator", fmt::format("the workload has no axis '{}'", name));
  }
  return it->second;
}

const std::uint8_t* input(const CompareContext& c, const char* name) {
  const std::uint8_t* p = c.input ? c.input(name) : nullptr;
  if (!p) throw input_error("topk_set comparator", fmt::format("needs the input '{}'", name));
  return p;
}

TopkScorer dsa_indexer_scorer(const CompareContext& c) {
  const std::int64_t heads = axis(c, "num_index_heads");
  const std::int64_t dim = axis(c, "index_head_dim");
  const std::int64_t page_size = axis(c, "page_size");
  const std::int64_t max_pages = axis(c, "max_num_pages");
  const std::int64_t num_pages = axis(c, "num_pages");
  const std::uint8_t* q = input(c, "q_index_fp8");
  const std::uint8_t* cache = input(c, "k_index_cache_fp8");
  const auto* weights = reinterpret_cast<const float*>(input(c, "weights"));
  const auto* seq_lens = reinterpret_cast<const std::int32_t*>(input(c, "seq_lens"));
  const auto* block_table = reinterpret_cast<const std::int32_t*>(input(c, "block_table"));
  return [=](std::uint64_t row) -> TopkRowScore {
    const auto b = static_cast<std::int64_t>(row);
    const std::int64_t seq_len = std::clamp<std::int64_t>(seq_lens[b], 0, max_pages * page_size);
    // Page id -> its position in the request's page list (the request's tokens only).
    std::unordered_map<std::int64_t, std::int64_t> position;
    for (std::int64_t p = 0; p * page_size < seq_len; ++p)
      position[block_table[b * max_pages + p]] = p;
    return [=, position = std::move(position)](std::int64_t token) -> double {
      if (token < 0 || token >= num_pages * page_size) return kNaN;
      auto it = position.find(token / page_size);
      if (it == position.end() || it->second * page_size + token % page_size >= seq_len)
        return kNaN;
      return dsa_indexer_score(q, cache, weights, b, token, heads, dim, page_size);
    };
  };
}

}  // namespace

double dsa_indexer_score(const std::uint8_t* q_fp8, const std::uint8_t* k_cache,
                         const float* weights, std::int64_t b, std::int64_t token,
                         std::int64_t num_heads, std::int64_t head_dim, std::int64_t page_size) {
  const auto& fp8 = e4m3_table();
  const std::int64_t page = token / page_size;
  const std::int64_t slot = token % page_size;
  const std::uint8_t* page_base = k_cache + page * page_size * (head_dim + 4);
  const std::uint8_t* k = page_base + slot * head_dim;
  float scale;
  std::memcpy(&scale, page_base + page_size * head_dim + slot * 4, 4);
  double total = 0;
  for (std::int64_t h = 0; h < num_heads; ++h) {
    const std::uint8_t* qh = q_fp8 + (b * num_heads + h) * head_dim;
    double dot = 0;
    for (std::int64_t d = 0; d < head_dim; ++d) dot += fp8[qh[d]] * fp8[k[d]];
    dot *= static_cast<double>(scale);
    total += static_cast<double>(weights[b * num_heads + h]) * std::max(dot, 0.0);
  }
  return total;
}

OutputCheck compare_topk_rows(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                              const std::uint8_t* got, std::uint64_t rows, std::uint64_t k,
                              const TopkScorer& scorer, const Tolerance& tolerance,
                              unsigned threads, TopkPadding padding) {
  if (dtype != DType::kInt32 && dtype != DType::kInt64) {
    throw input_error(
        "topk_set comparator",
        fmt::format("{} is {}; top-k indices must be int32 or int64", tensor, dtype_name(dtype)));
  }
  if (threads == 0) threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  threads =
      static_cast<unsigned>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(threads, rows)));
  std::vector<RowTally> parts(threads);
  auto work = [&](unsigned t) {
    for (std::uint64_t r = t; r < rows; r += threads)
      compare_row(dtype, expected, got, r, k, scorer, tolerance, padding, parts[t]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();

  OutputCheck out;
  Comparison& c = out.comparison;
  c.tensor = tensor;
  c.elements = rows * k;
  for (const auto& p : parts) {
    c.mismatches += p.mismatches;
    c.max_abs_error = std::max(c.max_abs_error, p.max_gap);
    c.max_rel_error = std::max(c.max_rel_error, p.max_rel_gap);
    if (p.first_bad >= 0 && (c.first_bad_index < 0 || p.first_bad < c.first_bad_index)) {
      c.first_bad_index = p.first_bad;
      c.expected = p.first_expected;
      c.got = p.first_got;
    }
    out.poison_left += p.poison;
    if (p.first_poison >= 0 && (out.first_poison < 0 || p.first_poison < out.first_poison))
      out.first_poison = p.first_poison;
    out.reference_unwritten += p.reference_poison;
  }
  std::uint64_t misplaced = 0;
  const RowTally* first = nullptr;
  for (const auto& p : parts) {
    misplaced += p.misplaced;
    if (p.first_misplaced >= 0 && (!first || p.first_misplaced < first->first_misplaced))
      first = &p;
  }
  if (first) {
    const std::int64_t row = first->first_misplaced / static_cast<std::int64_t>(k);
    const std::int64_t k_signed = static_cast<std::int64_t>(k);
    out.failure = Failure{
        "topk_padding",
        fmt::format("{}: row {} has -1 padding at position {} before id {} at position {}; the "
                    "definition puts the padding after the valid ids ({} ids after padding in all)",
                    tensor, row, first->first_padding % k_signed, first->first_misplaced_id,
                    first->first_misplaced % k_signed, misplaced),
        {{"tensor", tensor},
         {"row", row},
         {"first_bad_index", first->first_misplaced},
         {"padding_index", first->first_padding},
         {"got", first->first_misplaced_id},
         {"misplaced", misplaced},
         {"elements", rows * k}}};
  }
  const std::uint64_t bad = c.mismatches + out.poison_left;
  c.matched_ratio = c.elements == 0 ? 1.0
                                    : 1.0 - static_cast<double>(std::min(bad, c.elements)) /
                                                static_cast<double>(c.elements);
  return out;
}

TopkPadding topk_padding_for(const CompareContext& context) {
  const std::string family = context.definition ? context.definition->family() : "";
  // dsa_topk_indexer: "-1 padding after the min(topk, seq_len) valid ids" (the definition's
  // output; FlashInfer-Bench's reference fills the row with -1 and writes the ids at its start).
  if (family == "dsa_topk_indexer") return TopkPadding::kAfterIds;
  return TopkPadding::kAnywhere;
}

TopkScorer topk_scorer_for(const CompareContext& context) {
  const std::string family = context.definition ? context.definition->family() : "";
  if (family == "dsa_topk_indexer") return dsa_indexer_scorer(context);
  throw input_error("kharness.comparator",
                    fmt::format("the topk_set comparator has no scorer for family '{}' (known: "
                                "dsa_topk_indexer)",
                                family));
}

OutputCheck compare_topk_set(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                             const std::uint8_t* got, std::uint64_t count,
                             const Tolerance& tolerance, unsigned threads,
                             const CompareContext& context) {
  std::uint64_t k = count;
  if (context.definition) {
    if (const TensorSpec* spec = context.definition->find_output(tensor); spec && spec->shape) {
      const auto shape = tensor_shape(*spec, context.axes);
      if (!shape.empty()) k = static_cast<std::uint64_t>(shape.back());
    }
  }
  const std::uint64_t rows = k == 0 ? 0 : count / k;
  // The scorer (and the inputs it reads, downloaded on this thread) only when the outputs differ.
  TopkScorer scorer = [](std::uint64_t) -> TopkRowScore {
    return [](std::int64_t) { return kNaN; };
  };
  const std::uint64_t bytes = count * dtype_size(dtype);
  if (bytes > 0 && std::memcmp(expected, got, bytes) != 0) scorer = topk_scorer_for(context);
  return compare_topk_rows(tensor, dtype, expected, got, rows, k, scorer, tolerance, threads,
                           topk_padding_for(context));
}

}  // namespace kharness::verify
