// The semantics of reference.cu (FlashInfer-Bench's reference text for op_type "sampling"):
//   top-k (when 0 < k < vocab): keep the k most probable tokens, renormalise;
//   then top-p: p <= 0: the argmax; p < 1: in decreasing order keep each token while the
//   (renormalised) mass before it is <= p, the first always; renormalise; p >= 1: no filter;
//   draw one token from what is left (torch.multinomial).
// One block of 1024 threads per row, float4 loads (four in flight per thread; plain loads when the
// row is not 16-byte aligned), radix selection instead of the seed's bisection:
//  - pass 1: the row's randomness (as the seed's, under another salt: a mix of the row index and an
//    order-free sum of mix(index << 32 | bits) over the row) and the level-0 histogram;
//  - top-k: radix select of the k-th largest float bits over 12 + 10 + 10 bits (shared-memory count
//    histograms, a pass a level); once the tokens at or above the selected bucket are at most 1024
//    (after level 0 for the small k of real use) they are gathered into shared memory and sorted by
//    (value down, index up), and the row finishes there: the k-th largest and its ties, top-p by
//    decreasing value, the inverse CDF by decreasing value (thread 0, double precision);
//  - top-p otherwise: radix select of the cut (the smallest value whose kept mass above is
//    <= p * z) over the same 12 + 10 + 10 bits, mass histograms whose buckets are exact integer
//    sums of mantissas (a level-0 bucket's tokens share an exponent), so they do not depend on the
//    order of the atomic adds and the draw is deterministic;
//  - inverse CDF in index order: each warp sums the kept mass of its 1/32 of the row, thread 0
//    finds the segment that holds the draw, and the block walks that segment 1024 float4s at a
//    time (a block prefix sum per tile).
// Ties at the top-k or top-p boundary are all kept, as the reference and the seed keep them;
// p <= 0: the argmax, the first of a tie. Passes over the row: top-k 2 (k <= ~1000), top-p 4,
// top-k then top-p 2 (k <= ~1000; 7 at most).
constexpr int kThreads = 1024;  // threads per row: must equal the plan's block
constexpr int kWarps = kThreads / 32;
constexpr int kCap = kThreads;  // candidates the in-shared-memory finish holds (one per thread)
constexpr int kTopBuckets = 4096;  // level 0: bits 31..20 (sign, exponent, 3 mantissa bits)
constexpr int kLowBuckets = 1024;  // levels 1 and 2: bits 19..10, 9..0
constexpr int kBatch = 4;          // loads in flight per thread in a pass

__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ int level_shift(int level) { return level == 0 ? 20 : level == 1 ? 10 : 0; }
__device__ __forceinline__ int level_buckets(int level) { return level == 0 ? kTopBuckets : kLowBuckets; }

// A non-negative float's value is mantissa(b) * 2^(exponent(b) - 150), the integer mantissa with
// its implicit bit: the tokens of one level-0 bucket share an exponent, so a bucket's mass is an
// exact integer sum of mantissas (< 2^42), the same whatever the order of the atomic adds.
__device__ __forceinline__ unsigned mantissa(unsigned b) {
  return (b & 0x7fffffu) | ((b & 0x7f800000u) ? 0x800000u : 0u);
}

struct Shared {
  union {
    unsigned count[kTopBuckets];             // count histogram (top-k)
    struct {
      unsigned lo[kTopBuckets], hi[kTopBuckets];
    } mass;                                  // mantissa-sum histogram (top-p), 64-bit in 2 words
    struct {
      unsigned bits[kCap], sorted_bits[kCap];
      int index[kCap], sorted_index[kCap];
    } cand;                                  // the candidates of the shared-memory finish
  };
  double warp_part[kWarps];
  int pick, low, ncand;
  double pick_before, pick_u;
  int tile_first, tile_kept, tile_token, tile_last_token;  // the inverse CDF's walk, per tile
  double tile_total;
};

// Adds m to bucket d of the mass histogram: 32-bit atomics (a carry out of the low word, which
// the atomic's old value detects exactly, increments the high word).
__device__ __forceinline__ void add_mass(Shared& s, int d, unsigned m) {
  const unsigned old = atomicAdd(&s.mass.lo[d], m);
  if (old + m < old) atomicAdd(&s.mass.hi[d], 1u);
}
// Bucket d's mass, its tokens' exponent given (exact: the sum is below 2^53).
__device__ __forceinline__ double bucket_mass(const Shared& s, int d, unsigned exponent) {
  const double sum = static_cast<double>(s.mass.hi[d]) * 4294967296.0 + static_cast<double>(s.mass.lo[d]);
  return ldexp(sum, static_cast<int>(max(exponent, 1u)) - 150);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // the same in every lane
}

// Block-wide sum of doubles, the same in every thread (fixed order: deterministic).
__device__ double block_sum(Shared& s, double v) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.warp_part[threadIdx.x >> 5] = v;
  __syncthreads();
  double r = s.warp_part[0];
  for (int w = 1; w < kWarps; ++w) r += s.warp_part[w];
  return r;
}

// Block-wide exclusive prefix sum over threads in thread order (fixed order: deterministic).
__device__ double block_exclusive_scan(Shared& s, double v) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0;
  __syncthreads();
  if (lane == 31) s.warp_part[warp] = incl;
  __syncthreads();
  double off = 0;
  for (int w = 0; w < warp; ++w) off += s.warp_part[w];
  return off + excl;
}

// The bucket of a histogram of nb buckets (h(d): its count or mass) where the running total from
// the top crosses target: the highest d with base + above(d) <= target < base + above(d) + h(d),
// above(d) the total of the buckets above d; should rounding leave none, the lowest d with
// h(d) > 0 (0 if none). Returns d and sets *above_d. Thread t owns nb / kThreads buckets, thread 0
// the highest.
template <typename H>
__device__ int select_bucket(Shared& s, int nb, double base, double target, H h, double* above_d) {
  const int per = nb / kThreads;  // 1 or 4
  const int top = nb - 1 - static_cast<int>(threadIdx.x) * per;
  double v[4], total = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = i < per ? h(top - i) : 0.0;
    total += v[i];
  }
  if (threadIdx.x == 0) {
    s.pick = -1;
    s.low = nb;
  }
  const double x = block_exclusive_scan(s, total);  // its syncs order the writes above
  double above = x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i < per) {
      if (base + above <= target && target < base + above + v[i]) atomicMax(&s.pick, top - i);
      if (v[i] > 0) atomicMin(&s.low, top - i);
      above += v[i];
    }
  }
  __syncthreads();
  int d = s.pick >= 0 ? s.pick : s.low;
  if (d >= nb) d = 0;
  above = x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i < per) {
      if (top - i == d) s.pick_before = above;
      above += v[i];
    }
  }
  __syncthreads();
  *above_d = s.pick_before;
  __syncthreads();  // everyone has read pick_before before it is written again
  return d;
}

// Every token of the row, to f(index, bits): float4 loads (W = 4; four in flight per thread) or
// plain ones (W = 1), consecutive threads on consecutive units.
template <int W, typename F>
__device__ __forceinline__ void for_each_token(const unsigned* bits, int vocab_size, F f) {
  const int units = vocab_size / W;
  int u = threadIdx.x;
  if constexpr (W == 4) {
    const uint4* v = reinterpret_cast<const uint4*>(bits);
    for (; u + (kBatch - 1) * kThreads < units; u += kBatch * kThreads) {
      uint4 q[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) q[i] = __ldg(v + u + i * kThreads);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int j = 4 * (u + i * kThreads);
        f(j, q[i].x);
        f(j + 1, q[i].y);
        f(j + 2, q[i].z);
        f(j + 3, q[i].w);
      }
    }
    for (; u < units; u += kThreads) {
      const uint4 q = __ldg(v + u);
      f(4 * u, q.x);
      f(4 * u + 1, q.y);
      f(4 * u + 2, q.z);
      f(4 * u + 3, q.w);
    }
  } else {
    for (; u + (kBatch - 1) * kThreads < units; u += kBatch * kThreads) {
      unsigned q[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) q[i] = __ldg(bits + u + i * kThreads);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) f(u + i * kThreads, q[i]);
    }
    for (; u < units; u += kThreads) f(u, __ldg(bits + u));
  }
}

template <int W>
__device__ __forceinline__ void load_unit(const unsigned* bits, int u, unsigned (&b)[W]) {
  if constexpr (W == 4) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(bits) + u);
    b[0] = q.x;
    b[1] = q.y;
    b[2] = q.z;
    b[3] = q.w;
  } else {
    b[0] = __ldg(bits + u);
  }
}

// One row (block-uniform control flow throughout).
template <int W, bool has_k, bool has_p>
__device__ void sample_row(Shared& s, const unsigned* bits, int k, float p, long long* out,
                           int vocab_size, unsigned long long salt) {
  const int row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (has_p && p <= 0.0f) {  // the argmax (the first of a tie): the largest (bits, -index)
    unsigned long long best = 0;
    for_each_token<W>(bits, vocab_size, [&](int j, unsigned b) {
      best = max(best, (static_cast<unsigned long long>(b) << 32) | (0xffffffffu - j));
    });
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    __shared__ unsigned long long warp_best[kWarps];
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kWarps; ++w) best = max(best, warp_best[w]);
      out[row] = static_cast<long long>(0xffffffffu - static_cast<unsigned>(best));
    }
    return;
  }
  const bool do_k = has_k && k > 0 && k < vocab_size;
  const bool do_p = has_p && p < 1.0f;

  // Pass 1: the row's randomness (an order-free sum of a mix of every (index, bits) pair, mixed
  // with the row index and the salt) and the level-0 histogram: counts for top-k, else masses
  // for top-p.
  for (int i = tid; i < kTopBuckets; i += kThreads) s.mass.lo[i] = s.mass.hi[i] = 0;
  __syncthreads();
  unsigned long long hsum = 0;
  for_each_token<W>(bits, vocab_size, [&](int j, unsigned b) {
    hsum += mix((static_cast<unsigned long long>(j) << 32) | b);
    if (do_k) atomicAdd(&s.count[b >> 20], 1u);
    else if (do_p && b < 0x80000000u) add_mass(s, b >> 20, mantissa(b));
  });
  hsum = warp_sum(hsum);
  __shared__ unsigned long long warp_hash[kWarps];
  if (lane == 0) warp_hash[warp] = hsum;
  __syncthreads();
  hsum = 0;
  for (int w = 0; w < kWarps; ++w) hsum += warp_hash[w];
  const unsigned long long h = mix(mix(salt ^ static_cast<unsigned long long>(row)) + hsum);
  const double frac = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);

  // Top-k: radix select of the k-th largest bits, 12 + 10 + 10 bits. kk: the rank of the k-th
  // largest among the tokens of the prefix so far. Once the tokens at or above the prefix's
  // bucket are at most kCap, they are gathered into shared memory and the row finishes there.
  unsigned kept_from = 0;  // tokens with bits >= kept_from survive the filters
  if (do_k) {
    unsigned prefix = 0;
    int kk = k;
    for (int level = 0; level < 3; ++level) {
      const int shift = level_shift(level), nb = level_buckets(level);
      if (level > 0) {
        const int high = level_shift(level - 1);
        __syncthreads();  // the previous level's histogram has been read
        for (int i = tid; i < nb; i += kThreads) s.count[i] = 0;
        __syncthreads();
        for_each_token<W>(bits, vocab_size, [&](int, unsigned b) {
          if ((b >> high) == (prefix >> high)) atomicAdd(&s.count[(b >> shift) & (nb - 1)], 1u);
        });
        __syncthreads();
      }
      double above;
      const int d = select_bucket(s, nb, 0.0, static_cast<double>(kk - 1),
                                  [&](int i) { return static_cast<double>(s.count[i]); }, &above);
      kk -= static_cast<int>(above);
      prefix |= static_cast<unsigned>(d) << shift;
      const int cand = (k - kk) + static_cast<int>(s.count[d]);  // tokens with bits >= prefix
      if (cand <= kCap) {
        // The shared-memory finish: gather the candidates, sort them by (bits down, index up).
        __syncthreads();  // every thread has read the histogram
        if (tid == 0) s.ncand = 0;
        __syncthreads();
        for_each_token<W>(bits, vocab_size, [&](int j, unsigned b) {
          if (b >= prefix) {
            const int slot = atomicAdd(&s.ncand, 1);
            if (slot < kCap) {
              s.cand.bits[slot] = b;
              s.cand.index[slot] = j;
            }
          }
        });
        __syncthreads();
        const int n = min(s.ncand, kCap);
        if (tid < n) {
          const unsigned b = s.cand.bits[tid];
          const int j = s.cand.index[tid];
          int rank = 0;
          for (int i = 0; i < n; ++i) {
            const unsigned bi = s.cand.bits[i];
            rank += bi > b || (bi == b && s.cand.index[i] < j);
          }
          s.cand.sorted_bits[rank] = b;
          s.cand.sorted_index[rank] = j;
        }
        __syncthreads();
        if (tid == 0) {
          // Top-k: every candidate with the k-th largest bits or more (all of a tie).
          const unsigned kth = s.cand.sorted_bits[min(k, n) - 1];
          int m = 0;
          while (m < n && s.cand.sorted_bits[m] >= kth) ++m;
          auto w = [&](int r) { return static_cast<double>(__uint_as_float(s.cand.sorted_bits[r])); };
          double z = 0;
          for (int r = 0; r < m; ++r) z += w(r);
          if (do_p) {
            // Top-p: by decreasing value, keep each tie group whose mass before it is <= p * z.
            const double target = static_cast<double>(p) * z;
            double before = 0;
            for (int r = 0; r < m; ++r) {
              if (r > 0 && s.cand.sorted_bits[r] != s.cand.sorted_bits[r - 1] && before > target) {
                m = r;
                break;
              }
              before += w(r);
            }
            z = 0;
            for (int r = 0; r < m; ++r) z += w(r);
          }
          // Inverse CDF over the kept tokens by decreasing value.
          const double u = frac * z;
          double acc = 0;
          int last = -1;
          for (int r = 0; r < m; ++r) {
            const double wr = w(r);
            if (wr <= 0) continue;
            last = r;
            acc += wr;
            if (u < acc) break;
          }
          out[row] = last < 0 ? 0 : s.cand.sorted_index[last];
        }
        return;
      }
    }
    kept_from = prefix;
  }
  auto weight = [&](unsigned b) -> double {
    return b >= kept_from && b < 0x80000000u ? static_cast<double>(__uint_as_float(b)) : 0.0;
  };

  // Top-p: radix select on the kept mass, 12 + 10 + 10 bits: the smallest bits t with
  // mass(bits > t) <= p * z (level 0's histogram was made in pass 1 when there is no top-k).
  if (do_p) {
    unsigned prefix = 0;
    double above = 0, target = 0;
    for (int level = 0; level < 3; ++level) {
      const int shift = level_shift(level), nb = level_buckets(level);
      if (level > 0 || do_k) {
        const int high = level > 0 ? level_shift(level - 1) : 32;
        __syncthreads();  // the previous level's histogram has been read
        for (int i = tid; i < nb; i += kThreads) s.mass.lo[i] = s.mass.hi[i] = 0;
        __syncthreads();
        for_each_token<W>(bits, vocab_size, [&](int, unsigned b) {
          if (b >= kept_from && b < 0x80000000u &&
              (high == 32 || (b >> high) == (prefix >> high)))
            add_mass(s, (b >> shift) & (nb - 1), mantissa(b));
        });
        __syncthreads();
      }
      const unsigned exponent = (prefix >> 23) & 0xffu;  // levels 1, 2: the prefix's exponent
      auto h = [&](int i) {
        return bucket_mass(s, i, level == 0 ? (static_cast<unsigned>(i) >> 3) & 0xffu : exponent);
      };
      if (level == 0) {
        double part = 0;
        for (int i = tid; i < nb; i += kThreads) part += h(i);
        target = static_cast<double>(p) * block_sum(s, part);
      }
      double above_d;
      const int d = select_bucket(s, nb, above, target, h, &above_d);
      above += above_d;
      prefix |= static_cast<unsigned>(d) << shift;
    }
    kept_from = max(kept_from, prefix);
  }

  // Inverse CDF in index order. Pass A: warp w sums the kept mass of its segment of `seg` units
  // (kBatch loads in flight per lane); thread 0 finds the segment where the running total crosses
  // u = frac * z. Then the block walks that segment kThreads units at a time (a block prefix sum
  // per tile) to the token.
  const int units = vocab_size / W;
  const int seg = ((units + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int ubegin = min(units, warp * seg), uend = min(units, ubegin + seg);
  double mass = 0;
  for (int u = ubegin + lane; u < uend; u += 32 * kBatch) {
    unsigned b[kBatch][W];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (u + 32 * i < uend) {
        load_unit<W>(bits, u + 32 * i, b[i]);
      } else {
#pragma unroll
        for (int c = 0; c < W; ++c) b[i][c] = 0;  // weight 0
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i)
#pragma unroll
      for (int c = 0; c < W; ++c) mass += weight(b[i][c]);
  }
  mass = warp_sum(mass);
  __syncthreads();
  if (lane == 0) s.warp_part[warp] = mass;
  __syncthreads();
  if (tid == 0) {
    double z = 0;
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) z += s.warp_part[w];
    double u = frac * z, before = 0;
    int pick = -1, fallback = -1;  // fallback: the last segment with kept mass
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) {
      if (s.warp_part[w] > 0) fallback = w;
      if (pick < 0 && u < before + s.warp_part[w]) pick = w;
      if (pick < 0) before += s.warp_part[w];
    }
    if (pick < 0) {  // u >= z by rounding: the last kept token (an infinite u walks past all)
      pick = fallback;
      u = __longlong_as_double(0x7ff0000000000000ll);  // +infinity
    }
    s.pick = pick;
    s.pick_before = before;
    s.pick_u = u;
    if (pick < 0) out[row] = 0;  // no kept mass
  }
  __syncthreads();
  const int pick = s.pick;
  if (pick < 0) return;
  const double u = s.pick_u;
  double before = s.pick_before;
  const int sbegin = min(units, pick * seg), send = min(units, sbegin + seg);
  int found = -1, last = -1;  // last: the segment's last kept token so far
  for (int t0 = sbegin; t0 < send && found < 0; t0 += kThreads) {
    const int unit = t0 + tid;
    unsigned b[W];
    double w[W], local = 0;
    int local_last = -1;
    if (unit < send) {
      load_unit<W>(bits, unit, b);
    } else {
#pragma unroll
      for (int c = 0; c < W; ++c) b[c] = 0;
    }
#pragma unroll
    for (int c = 0; c < W; ++c) {
      w[c] = weight(b[c]);
      local += w[c];
      if (w[c] > 0) local_last = unit * W + c;
    }
    if (tid == 0) {
      s.tile_first = kThreads;
      s.tile_kept = -1;
    }
    const double excl = block_exclusive_scan(s, local);  // its syncs order the writes above
    if (local > 0 && u < before + excl + local) atomicMin(&s.tile_first, tid);
    if (local > 0) atomicMax(&s.tile_kept, tid);
    if (tid == kThreads - 1) s.tile_total = excl + local;
    __syncthreads();
    if (tid == s.tile_first) {
      int token = local_last;  // should rounding keep the walk below u: the unit's last kept
      double acc = before + excl;
#pragma unroll
      for (int c = 0; c < W; ++c) {
        if (w[c] <= 0) continue;
        acc += w[c];
        if (u < acc) {
          token = unit * W + c;
          break;
        }
      }
      s.tile_token = token;
    }
    if (tid == s.tile_kept) s.tile_last_token = local_last;
    __syncthreads();
    if (s.tile_first < kThreads) found = s.tile_token;
    if (s.tile_kept >= 0) last = s.tile_last_token;
    before += s.tile_total;
    __syncthreads();  // everyone has read the tile's results before the next tile writes them
  }
  if (tid == 0) out[row] = found >= 0 ? found : (last >= 0 ? last : 0);
}

// has_k / has_p: whether the definition has a top_k / top_p input.
template <bool has_k, bool has_p>
__device__ void sample(const float* probs, const int* top_k, const float* top_p, long long* out,
                       int batch_size, int vocab_size, unsigned long long salt) {
  __shared__ Shared s;
  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const unsigned* bits = reinterpret_cast<const unsigned*>(probs) + static_cast<size_t>(row) * vocab_size;
  const int k = has_k ? top_k[row] : 0;
  const float p = has_p ? top_p[row] : 1.0f;
  if (vocab_size % 4 == 0 && reinterpret_cast<size_t>(probs) % 16 == 0)
    sample_row<4, has_k, has_p>(s, bits, k, p, out, vocab_size, salt);
  else
    sample_row<1, has_k, has_p>(s, bits, k, p, out, vocab_size, salt);
}
