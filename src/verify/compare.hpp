// Comparing a candidate's output tensor with the reference's, on the host, in parallel.
// Rules (docs/correctness.md#comparison): an element is a mismatch when abs_err > atol and rel_err
// > rtol; the matched ratio must reach the definition's threshold; poison left where the reference
// wrote a value is output_not_written; NaN/Inf where the reference is finite is nan_or_inf.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/dtype.hpp"
#include "kharness/verdict.hpp"

namespace kharness::verify {

class SamplingDraws;  // verify/sampling_compare.hpp

struct OutputCheck {
  Comparison comparison;          // tolerance statistics over finite, written elements
  std::uint64_t poison_left = 0;  // candidate elements still holding the poison pattern
  std::int64_t first_poison = -1;
  std::uint64_t nonfinite = 0;  // NaN/Inf where the reference is finite (poison excluded)
  std::int64_t first_nonfinite = -1;
  double nonfinite_expected = 0.0;
  double nonfinite_got = 0.0;
  std::uint64_t reference_unwritten = 0;  // poison in the *expected* tensor: a broken reference
  // A comparator's own finding (the sampling comparator's outside_support or distribution),
  // reported after output_not_written and nan_or_inf.
  std::optional<Failure> failure;
};

// `expected` and `got` hold `count` elements of `dtype`. Uses up to `threads` threads (0: all).
// The same as elementwise_check(tensor, dtype, elementwise_totals(...)).
OutputCheck compare_output(const std::string& tensor, DType dtype, const std::uint8_t* expected,
                           const std::uint8_t* got, std::uint64_t count, const Tolerance& tolerance,
                           unsigned threads = 0);

// What compare_output reduces a pair of tensors to, before it builds its OutputCheck: counts,
// first indices (-1: none; the lowest index of each kind), the largest errors, and the bits
// (zero-extended little-endian element bytes) of the expected and got elements at first_bad and
// at first_nonfinite. The correctness trials compute the same totals on the device
// (HarnessKernels::compare_sealed), bit for bit, and finish them with elementwise_check, so an
// output checked there has the OutputCheck the host would give it.
//
// Per element i, in this order (poison = poison_element(dtype), compared as bits):
//   expected and got bits equal and not poison      nothing
//   expected is poison                               reference_poison
//   got is poison                                    poison (first_poison)
//   expected NaN/Inf: got not the same kind (NaN for NaN, the same infinity)
//                                                    mismatches (first_bad)
//   got NaN/Inf                                      nonfinite (first_nonfinite)
//   abs = |g - e|, rel = abs / |e| (+inf where e == 0), in double: where abs > 0, max_abs and
//   (where rel is finite) max_rel; abs > atol and rel > rtol   mismatches (first_bad)
struct ElementwiseTotals {
  std::uint64_t elements = 0;
  std::uint64_t mismatches = 0;
  std::int64_t first_bad = -1;
  std::uint64_t first_bad_expected = 0;  // bits
  std::uint64_t first_bad_got = 0;
  double max_abs = 0.0;
  double max_rel = 0.0;
  std::uint64_t poison = 0;  // got still holds the poison
  std::int64_t first_poison = -1;
  std::uint64_t nonfinite = 0;
  std::int64_t first_nonfinite = -1;
  std::uint64_t nonfinite_expected = 0;  // bits
  std::uint64_t nonfinite_got = 0;
  std::uint64_t reference_poison = 0;  // expected holds the poison
};
ElementwiseTotals elementwise_totals(DType dtype, const std::uint8_t* expected,
                                     const std::uint8_t* got, std::uint64_t count,
                                     const Tolerance& tolerance, unsigned threads = 0);
// The OutputCheck of `totals`: the expected and got values decoded from their bits as
// compare_output decodes elements (element_value), the matched ratio
// 1 - (mismatches + poison + nonfinite) / elements (1 for no elements).
OutputCheck elementwise_check(const std::string& tensor, DType dtype,
                              const ElementwiseTotals& totals);
// The value compare_output reads from an element's bits (little-endian, zero-extended): to_double
// (kharness/numeric.hpp), except that a bfloat16 NaN keeps its sign and payload as a float's
// would (fmt prints the sign: "-nan").
double element_value(DType dtype, std::uint64_t bits);

// The failure an output check shows, if any, in the order a person should fix them:
// output_not_written, nan_or_inf, tolerance.
std::optional<Failure> output_failure(const OutputCheck& check, const Tolerance& tolerance);

// What a comparator may read besides the two outputs: the definition, the workload's axes and the
// trial's inputs (host copies, downloaded on first use). The elementwise comparator reads none of
// it; the top-k set comparator scores the indices that differ from the reference's.
struct CompareContext {
  const Definition* definition = nullptr;
  Bindings axes;
  // The host bytes of input `name` (the whole tensor); nullptr when unavailable.
  std::function<const std::uint8_t*(const std::string& name)> input;
  // The sampling comparator: where to pool this launch's draws (their support is checked now, the
  // caller judges their distribution with the other launches'); nullptr: judge this launch alone.
  SamplingDraws* sampling_draws = nullptr;
};

// Comparators by name (a definition's kharness.comparator). "elementwise" (compare_output) is the
// default; "topk_set" compares top-k index rows as sets with a score tie tolerance
// (verify/topk_compare.hpp); "sampling" judges random draws by support and distribution
// (verify/sampling_compare.hpp).
using Comparator = OutputCheck (*)(const std::string& tensor, DType dtype,
                                   const std::uint8_t* expected, const std::uint8_t* got,
                                   std::uint64_t count, const Tolerance& tolerance,
                                   unsigned threads, const CompareContext& context);
// nullptr when no comparator has that name.
Comparator find_comparator(const std::string& name);
std::vector<std::string> comparator_names();

// Counts the bytes that differ.
std::uint64_t bitwise_differences(const std::uint8_t* a, const std::uint8_t* b,
                                  std::uint64_t bytes);

}  // namespace kharness::verify
