// The seed: a correct, simple, parallel sampler; a starting point for optimisation runs.
// The semantics of reference.cu (FlashInfer-Bench's reference text for op_type "sampling"):
//   top-k (when 0 < k < vocab): keep the k most probable tokens, renormalise;
//   then top-p: p <= 0: the argmax; p < 1: in decreasing order keep each token while the
//   (renormalised) mass before it is <= p, the first always; renormalise; p >= 1: no filter;
//   draw one token from what is left (torch.multinomial).
// and its algorithm, one block of 512 threads per row, every pass over the row spread over the
// block (strided loads) with a block reduction (warp shuffles, then the warps' partials added in a
// fixed order): the thresholds by bisection over the bit patterns of the non-negative floats
// (their order is the integers'): ~31 passes for the k-th largest value (a count per pass),
// ~31 for the top-p cut (a double-precision mass per pass); then the inverse CDF in index order:
// each thread sums the kept mass of its own chunk of the row, thread 0 scans the chunks' masses,
// and the thread whose chunk holds the draw walks it. Ties (equal probabilities at the top-k or
// top-p boundary, of measure zero for real probabilities) are all kept; p <= 0: the argmax, the
// first of a tie. The draw is judged by the "sampling" comparator (verify/sampling_compare.hpp):
// support and distribution, never elementwise. Its randomness: the definitions give no seed
// input, so the draw is a deterministic function of the row (the determinism rerun holds): a
// 64-bit mix of the row index, a salt of the seed's own, and an order-free sum over the row of
// mix(index << 32 | bits), which changes with every value; uniform over rows whose probabilities
// differ, as the trials' are. Memory-bound: about 65 passes over the row for top-k then top-p
// (33 for top-k alone, 34 for top-p alone).
constexpr unsigned kInfBits = 0x7f800000u;
constexpr int kThreads = 512;  // threads per row: must equal the plan's block
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Block-wide sum, the same value in every thread: a warp butterfly, then every thread adds the
// warps' sums in warp order (a fixed order: the result is deterministic).
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T part[kWarps];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's reads of part are done
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = part[0];
  for (int w = 1; w < kWarps; ++w) r += part[w];
  return r;
}

__device__ unsigned long long block_max(unsigned long long v) {
  __shared__ unsigned long long part[kWarps];
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long r = part[0];
  for (int w = 1; w < kWarps; ++w) r = max(r, part[w]);
  return r;
}

// has_k / has_p: whether the definition has a top_k / top_p input. One block per row; every
// branch below is uniform over the block (it depends on block-wide results only).
__device__ void sample_row(const float* probs, const int* top_k, const float* top_p, long long* out,
                           int batch_size, int vocab_size, bool has_k, bool has_p,
                           unsigned long long salt) {
  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const int tid = threadIdx.x;
  const unsigned* bits = reinterpret_cast<const unsigned*>(probs) + static_cast<size_t>(row) * vocab_size;
  const float p = has_p ? top_p[row] : 1.0f;
  if (has_p && p <= 0.0f) {  // the argmax (the first of a tie): the largest (bits, -index)
    unsigned long long best = 0;
    for (int j = tid; j < vocab_size; j += kThreads)
      best = max(best, (static_cast<unsigned long long>(bits[j]) << 32) | (0xffffffffu - j));
    best = block_max(best);
    if (tid == 0) out[row] = static_cast<long long>(0xffffffffu - static_cast<unsigned>(best));
    return;
  }
  // The row's randomness: a sum (order-free) of a mix of every (index, bits) pair, so it changes
  // with every value, mixed with the row index and the salt.
  unsigned long long hsum = 0;
  for (int j = tid; j < vocab_size; j += kThreads)
    hsum += mix((static_cast<unsigned long long>(j) << 32) | bits[j]);
  const unsigned long long h = mix(mix(salt ^ static_cast<unsigned long long>(row)) + block_sum(hsum));
  // Top-k: the k-th largest value's bits, lo (the largest t with count(bits >= t) >= k).
  unsigned kept_from = 0;  // tokens with bits >= kept_from survive top-k
  const int k = has_k ? top_k[row] : 0;
  if (k > 0 && k < vocab_size) {
    unsigned lo = 0, hi = kInfBits;
    while (hi - lo > 1) {
      const unsigned mid = lo + (hi - lo) / 2;
      int count = 0;
      for (int j = tid; j < vocab_size; j += kThreads) count += bits[j] >= mid;
      if (block_sum(count) >= k) lo = mid; else hi = mid;
    }
    kept_from = lo;
  }
  auto weight = [&](int j) -> double {
    return bits[j] >= kept_from ? static_cast<double>(__uint_as_float(bits[j])) : 0.0;
  };
  if (has_p && p < 1.0f) {
    double zpart = 0;
    for (int j = tid; j < vocab_size; j += kThreads) zpart += weight(j);
    const double z = block_sum(zpart);
    // The smallest t with mass(bits > t) <= p * z: tokens with bits >= t are those whose mass
    // before them is <= p (the first token always, as mass(bits > max) = 0).
    const double target = static_cast<double>(p) * z;
    long long lo = -1, hi = kInfBits;  // mass(> lo) > target, mass(> hi) <= target
    while (hi - lo > 1) {
      const long long mid = lo + (hi - lo) / 2;
      double mass = 0;
      for (int j = tid; j < vocab_size; j += kThreads)
        if (static_cast<long long>(bits[j]) > mid) mass += weight(j);
      if (block_sum(mass) <= target) hi = mid; else lo = mid;
    }
    kept_from = max(kept_from, static_cast<unsigned>(hi));
  }
  // Inverse CDF in index order: thread t owns the chunk [t * chunk, (t + 1) * chunk); the chunks'
  // kept masses are scanned in order by thread 0, and the thread whose chunk holds the draw walks it.
  __shared__ double chunk_mass[kThreads];
  __shared__ int chunk_last[kThreads];  // the chunk's last kept token, -1: none
  __shared__ int pick;                  // the thread whose chunk holds the draw, -1: none
  __shared__ double pick_before, pick_u;
  const int chunk = (vocab_size + kThreads - 1) / kThreads;
  const int begin = min(vocab_size, tid * chunk), end = min(vocab_size, begin + chunk);
  double mass = 0;
  int last = -1;
  for (int j = begin; j < end; ++j) {
    const double w = weight(j);
    if (w > 0) {
      mass += w;
      last = j;
    }
  }
  chunk_mass[tid] = mass;
  chunk_last[tid] = last;
  __syncthreads();
  if (tid == 0) {
    double z = 0;
    for (int t = 0; t < kThreads; ++t) z += chunk_mass[t];
    const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) * z;
    double before = 0;
    int t = 0, fallback = -1;  // fallback: the last kept token (u >= z by rounding)
    for (; t < kThreads; ++t) {
      if (chunk_last[t] >= 0) fallback = chunk_last[t];
      if (u < before + chunk_mass[t]) break;
      before += chunk_mass[t];
    }
    pick = t < kThreads ? t : -1;
    pick_before = before;
    pick_u = u;
    if (t == kThreads) out[row] = fallback < 0 ? 0 : fallback;
  }
  __syncthreads();
  if (tid == pick) {  // its chunk has kept mass, so a kept token
    double acc = pick_before;
    for (int j = begin; j < end; ++j) {
      const double w = weight(j);
      if (w <= 0) continue;
      last = j;
      acc += w;
      if (pick_u < acc) break;
    }
    out[row] = last;
  }
}
