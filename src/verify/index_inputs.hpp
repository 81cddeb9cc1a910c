// Integer inputs whose values must be valid for their role, generated on the host from the trial's
// seed: "indptr" (offsets into a ragged array: starts at 0, never decreases, ends at `total`) and
// "indices" (distinct ids in [0, max], e.g. page ids of a paged KV cache). Declared in a
// definition as kharness.inputs.<name> = {"distribution": "indptr", "total": "num_kv_indices"} or
// {"distribution": "indices", "max": "num_pages - 1"}; `total` and `max` are expressions over axes.
// Two more for sparse attention (DeepSeek-V3.2 DSA):
//  "sparse_indices" {"max": expr, "min_valid": expr}: a [rows, k] tensor, each row a random number
//    (min_valid..k) of distinct ids in [0, max] followed by -1 padding;
//  "fp8_cache_with_scales" {"page_size": expr, "head_dim": expr, "std": s, "low": a, "high": b}:
//    an int8/uint8 paged cache in deep_gemm's layout, per page page_size * head_dim e4m3 values
//    (normal(0, s), clamped to +-448) then page_size float32 scales uniform in [a, b].
// Causal prefill needs every query to see at least one key, so two roles couple inputs (the
// inputs they name come earlier in the definition and are generated first):
//  "indptr" {"total": expr, "cover": "qo_indptr", "page_size": expr (default 1)}: segment b holds
//    at least cdiv(len_b(cover), page_size) entries (pages, or tokens when page_size is 1), the
//    rest of `total` split at random;
//  "last_page_len" {"indptr": "kv_indptr", "cover": "qo_indptr", "page_size": expr}: the tokens
//    in each request's last page, in [1, page_size], and at least what the request's queries need
//    beyond its full pages ((pages_b - 1) * page_size + last_b >= len_b(cover)); one entry per
//    request, or one more (a definition that shapes it like its indptr: a valid length there too).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kharness/definition.hpp"

namespace kharness::verify {

bool is_index_role(const std::string& distribution);

// Pre-computed MoE routing: "packed_topk_ids" {"experts": expr, "sigmoid": bool}: an int32
// [tokens, top_k] tensor, each row top_k distinct random experts in [0, experts), each entry
// expert << 16 | the bfloat16 bits of its weight (softmax of N(0, 1) logits over the row; with
// "sigmoid", each weight the sigmoid of its logit, as Llama 4's top-1 routing).
// One more, for sampling: "probability_rows" {"std": s}: a float32 [rows, vocab] tensor, each row
// a distribution (softmax of N(0, s) logits: exp(s z) / sum, as a model's output after softmax),
// made fast (a sampling workload makes 16384 rows of up to 262144: a table of exp(s z) at 2^16 + 1
// normal quantiles, interpolated; verify/probability_rows_core.hpp). The correctness stage makes
// them on the device (HarnessKernels::probability_rows, the same values bit for bit); this host
// generator (rows in parallel) is the reference its tests compare against.
std::vector<float> make_probability_rows(std::uint64_t rows, std::uint64_t vocab, double std,
                                         std::uint64_t seed);
// The generator's table: exp(std z) at the 2^16 + 1 normal quantiles i / 2^16 (the outermost at
// 2^-17 and 1 - 2^-17).
std::vector<double> make_probability_table(double std);
// The rows and vocabulary of a "probability_rows" input of `count` elements (its last axis the
// vocabulary); throws kharness::Error (exit 2) naming the input for a dtype other than float32
// or a std that is not > 0.
struct ProbabilityRowsShape {
  std::uint64_t rows = 0;
  std::uint64_t vocab = 0;
};
ProbabilityRowsShape probability_rows_shape(const TensorSpec& tensor, const InputGenerator& gen,
                                            const Bindings& axes, std::uint64_t count);

// Values of the index inputs generated so far in a trial, by name (for the coupled roles).
using IndexValues = std::map<std::string, std::vector<std::int64_t>>;

// n offsets: out[0] = 0, out[n-1] = total, non-decreasing, random segment lengths. n >= 1.
std::vector<std::int64_t> make_indptr(std::uint64_t n, std::int64_t total, std::uint64_t seed);
// n offsets ending at `total` whose segment b is at least min_len[b] (min_len has n - 1 entries);
// throws std::invalid_argument when the minimums add up to more than `total`.
std::vector<std::int64_t> make_covering_indptr(const std::vector<std::int64_t>& min_len,
                                               std::int64_t total, std::uint64_t seed);
// n distinct values in [0, max]; throws std::invalid_argument when n > max + 1.
std::vector<std::int64_t> make_indices(std::uint64_t n, std::int64_t max, std::uint64_t seed);

// n rows of k: per row, between min_valid and k distinct values in [0, max], then -1s.
std::vector<std::int64_t> make_sparse_indices(std::uint64_t rows, std::uint64_t k,
                                              std::int64_t min_valid, std::int64_t max,
                                              std::uint64_t seed);
// `pages` pages of deep_gemm's fp8 cache layout (see above), as bytes.
std::vector<std::uint8_t> make_fp8_cache_with_scales(std::uint64_t pages, std::int64_t page_size,
                                                     std::int64_t head_dim, double std,
                                                     double scale_low, double scale_high,
                                                     std::uint64_t seed);

// The values of an index-role input of `count` elements for a workload's axes, as `dtype` bytes.
// Throws kharness::Error (exit 2) naming the input when the role's parameters do not fit. `made`
// (optional) holds the inputs made before in this trial; this one's values are added to it.
std::vector<std::uint8_t> make_index_input(const TensorSpec& tensor, const InputGenerator& gen,
                                           const Bindings& axes, std::uint64_t count,
                                           std::uint64_t seed, IndexValues* made = nullptr);

}  // namespace kharness::verify
