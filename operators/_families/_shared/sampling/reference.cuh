// Trusted reference for FlashInfer-Bench's sampling definitions (op_type "sampling": top-k, top-p
// and top-k-then-top-p sampling from probabilities), transcribing their reference text:
//   top-k (when 0 < k < vocab): keep the k most probable tokens, renormalise;
//   then top-p: p <= 0: the argmax; p < 1: in decreasing order keep each token while the
//   (renormalised) mass before it is <= p, the first always; renormalise; p >= 1: no filter;
//   draw one token from what is left (torch.multinomial).
// The draw is random, so no candidate is compared with it elementwise: the "sampling" comparator
// judges the candidate's draws by support and distribution (verify/sampling_compare.hpp); this
// kernel only has to be a correct sampler. Its randomness: the definitions give no seed input, so
// the draw is a deterministic function of the row (a 64-bit mix of its index and of every
// probability's bits), uniform over rows whose probabilities differ, as the trials' are.
// Ties (equal probabilities at the top-k or top-p boundary, of measure zero for real
// probabilities) are all kept. Written to be obviously correct, not fast: one thread per row,
// thresholds found by bisection over the bit patterns of the non-negative floats (their order is
// the integers'), double-precision sums.
constexpr unsigned kInfBits = 0x7f800000u;

__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// has_k / has_p: whether the definition has a top_k / top_p input.
__device__ void sample_row(const float* probs, const int* top_k, const float* top_p, long long* out,
                           int batch_size, int vocab_size, bool has_k, bool has_p,
                           unsigned long long salt) {
  const int row = blockIdx.x;
  if (row >= batch_size || threadIdx.x != 0) return;
  const unsigned* bits = reinterpret_cast<const unsigned*>(probs) + static_cast<size_t>(row) * vocab_size;
  unsigned long long h = mix(salt ^ static_cast<unsigned long long>(row));
  for (int j = 0; j < vocab_size; ++j) h = mix(h ^ bits[j]);
  // Top-k: the k-th largest value's bits, lo (the largest t with count(bits >= t) >= k).
  unsigned kept_from = 0;  // tokens with bits >= kept_from survive top-k
  const int k = has_k ? top_k[row] : 0;
  if (k > 0 && k < vocab_size) {
    unsigned lo = 0, hi = kInfBits;
    while (hi - lo > 1) {
      const unsigned mid = lo + (hi - lo) / 2;
      int count = 0;
      for (int j = 0; j < vocab_size; ++j) count += bits[j] >= mid;
      if (count >= k) lo = mid; else hi = mid;
    }
    kept_from = lo;
  }
  auto weight = [&](int j) -> double {
    return bits[j] >= kept_from ? static_cast<double>(__uint_as_float(bits[j])) : 0.0;
  };
  double z = 0;
  for (int j = 0; j < vocab_size; ++j) z += weight(j);
  const float p = has_p ? top_p[row] : 1.0f;
  if (has_p && p <= 0.0f) {  // the argmax (the first of a tie)
    int best = 0;
    for (int j = 1; j < vocab_size; ++j) if (bits[j] > bits[best]) best = j;
    out[row] = best;
    return;
  }
  if (has_p && p < 1.0f) {
    // The smallest t with mass(bits > t) <= p * z: tokens with bits >= t are those whose mass
    // before them is <= p (the first token always, as mass(bits > max) = 0).
    const double target = static_cast<double>(p) * z;
    long long lo = -1, hi = kInfBits;  // mass(> lo) > target, mass(> hi) <= target
    while (hi - lo > 1) {
      const long long mid = lo + (hi - lo) / 2;
      double mass = 0;
      for (int j = 0; j < vocab_size; ++j) if (static_cast<long long>(bits[j]) > mid) mass += weight(j);
      if (mass <= target) hi = mid; else lo = mid;
    }
    kept_from = max(kept_from, static_cast<unsigned>(hi));
    z = 0;
    for (int j = 0; j < vocab_size; ++j) z += weight(j);
  }
  // Inverse CDF in index order.
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) * z;
  double acc = 0;
  int last = -1;
  for (int j = 0; j < vocab_size; ++j) {
    const double w = weight(j);
    if (w <= 0) continue;
    last = j;
    acc += w;
    if (u < acc) break;
  }
  out[row] = last < 0 ? 0 : last;
}
