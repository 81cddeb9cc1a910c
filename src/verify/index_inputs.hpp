// Integer inputs whose values must be valid for their role, generated on the host from the trial's
// seed: "indptr" (offsets into a ragged array: starts at 0, never decreases, ends at `total`) and
// "indices" (distinct ids in [0, max], e.g. page ids of a paged KV cache). Declared in a
// definition as kharness.inputs.<name> = {"distribution": "indptr", "total": "num_kv_indices"} or
// {"distribution": "indices", "max": "num_pages - 1"}; `total` and `max` are expressions over axes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kharness/definition.hpp"

namespace kharness::verify {

bool is_index_role(const std::string& distribution);

// n offsets: out[0] = 0, out[n-1] = total, non-decreasing, random segment lengths. n >= 1.
std::vector<std::int64_t> make_indptr(std::uint64_t n, std::int64_t total, std::uint64_t seed);
// n distinct values in [0, max]; throws std::invalid_argument when n > max + 1.
std::vector<std::int64_t> make_indices(std::uint64_t n, std::int64_t max, std::uint64_t seed);

// The values of an index-role input of `count` elements for a workload's axes, as `dtype` bytes.
// Throws kharness::Error (exit 2) naming the input when the role's parameters do not fit.
std::vector<std::uint8_t> make_index_input(const TensorSpec& tensor, const InputGenerator& gen,
                                           const Bindings& axes, std::uint64_t count,
                                           std::uint64_t seed);

}  // namespace kharness::verify
