// The generator of "probability_rows" inputs (verify/index_inputs.hpp): one text compiled twice,
// by the host compiler (make_probability_rows, the host reference the CPU tests exercise) and by
// NVRTC (kh_probability_rows, the harness kernel the correctness stage runs; CMakeLists.txt
// embeds this file's text in the harness kernels' source), so the rows the device makes equal
// the host's bit for bit.
//
// Row r of a fill under `seed`: token j's weight exp(std z), z ~ N(0, 1) by inverse transform,
// is read from a table of 2^16 + 1 quantiles of exp(std z) (make_probability_table) at the top
// 16 bits of a 64-bit counter-based draw, linearly interpolated with the next 32 bits; the row's
// sum is taken in a fixed order (kLanes partial sums, lane t summing tokens t, t + kLanes, ...
// in order, then a pairwise tree over the lanes), and each value is the weight over the sum,
// rounded to float. Every operation is one IEEE double operation, rounded to nearest (the
// interpolation one fused multiply-add on both sides), so neither compiler may change a result.
//
// The includer defines KH_HD (the functions' qualifiers), KH_FMA (a double fused multiply-add),
// KH_DIV (double division, rounded to nearest) and KH_TO_FLOAT (double to float, to nearest).
// Plain C++ with no includes: NVRTC compiles it without the standard library.
#ifndef KHARNESS_VERIFY_PROBABILITY_ROWS_CORE_HPP
#define KHARNESS_VERIFY_PROBABILITY_ROWS_CORE_HPP

namespace probability_rows_core {

typedef unsigned long long u64;

constexpr int kTableSteps = 1 << 16;  // the table holds kTableSteps + 1 quantiles
constexpr int kLanes = 256;           // partial sums of a row (the device's threads per row)

// splitmix64's finaliser (Steele et al.): a bijection of 64 bits, each output bit depending on
// every input bit.
KH_HD u64 mix64(u64 z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Row r's key: the rows of one seed are independent streams.
KH_HD u64 row_key(u64 seed, u64 row) { return mix64(seed ^ mix64(row + 1)); }

// Token j's weight (before normalisation) in the row keyed `key`.
KH_HD double weight(const double* table, u64 key, u64 j) {
  const u64 bits = mix64(key + j);
  const unsigned i = static_cast<unsigned>(bits >> 48);
  const double f = static_cast<double>(static_cast<unsigned>(bits >> 16)) * 0x1.0p-32;
  return KH_FMA(f, table[i + 1] - table[i], table[i]);
}

// Lane `lane`'s partial sum of the row keyed `key`: tokens lane, lane + kLanes, ..., in order.
KH_HD double lane_sum(const double* table, u64 key, u64 vocab, u64 lane) {
  double s = 0.0;
  for (u64 j = lane; j < vocab; j += kLanes) s += weight(table, key, j);
  return s;
}

// The lanes' sum: for h = kLanes / 2, ..., 1, lane t < h adds lane t + h (in place; lanes[0]
// ends with the sum). The device runs one level per step, a thread per lane, its threads
// synchronised between levels: the same additions in the same order.
KH_HD void tree_step(double* lanes, int h, int t) {
  if (t < h) lanes[t] += lanes[t + h];
}

// Token j's value: its weight over the row's sum.
KH_HD float value(double weight, double sum) { return KH_TO_FLOAT(KH_DIV(weight, sum)); }

}  // namespace probability_rows_core

#endif  // KHARNESS_VERIFY_PROBABILITY_ROWS_CORE_HPP
