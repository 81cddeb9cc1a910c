// The attention engine of the GQA baselines (gqa_paged_prefill_causal and _ps1, the ragged
// prefill families, gqa_paged_decode_ps64's split-KV decode), inlined where their text includes
// it: the block's shared memory, its carving and checks, and attend_pass, which runs one pass of
// up to kMaxHeads q heads of a KV group over a range of tokens.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;    // must equal the plan's block size
constexpr int kBlocksPerSm = 4;  // what shared memory allows for head_dim 128 (45 KiB a block)
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;       // KV tokens per step: two threads per token in Q K^T
constexpr int kMaxHeads = 16;   // q heads per pass: 8 per thread in Q K^T, 4 per warp in softmax
constexpr int kSlots = 16;      // output accumulators per thread (see slot_head)
constexpr int kQFloats = 2048;  // staged queries: pass heads x qk_dim
constexpr int kKPad = 4;        // bf16 padding of a staged K row: conflict-free 8-byte reads
static_assert(kThreads == 2 * kTile && kTile == 64 && kWarps * 4 == kMaxHeads, "tile mapping");

// Dynamic shared memory, in this order: q [kQFloats] f32 | p [kMaxHeads][kTile] f32 |
// alpha, m, l [kMaxHeads] f32 | rows [kTile] size_t | k [kTile][qk_dim + kKPad] bf16 |
// v [kTile][vo_dim] bf16: kFixedBytes + 128 * (qk_dim + vo_dim) bytes, the plan's shared_bytes.
constexpr unsigned kFixedBytes =
    kQFloats * 4 + kMaxHeads * kTile * 4 + 3 * kMaxHeads * 4 + kTile * 8 + kTile * kKPad * 2;
static_assert(kFixedBytes == 13504, "the plan's shared_bytes");

extern __shared__ __align__(16) unsigned char smem[];

struct Shared {
  float* q;          // this pass's queries: q[g * qk_dim + d]
  float* p;          // p[g * kTile + t]: the tile's logits, then exp(logit - m)
  float* alpha;      // per head: exp(m_old - m_new) of the tile
  float* m;          // per head at the end of a pass: the maximum logit
  float* l;          // ... and the sum of exp(logit - m)
  size_t* rows;      // the tile's cache rows: K at rows[t] * qk_dim, V at rows[t] * vo_dim
  __nv_bfloat16* k;  // k[t * k_stride + d], as stored
  __nv_bfloat16* v;  // v[t * vo_dim + d]; rows past the last token up to a multiple of 4: zeros
  int k_stride;
};

__device__ Shared carve(int qk_dim) {
  Shared s;
  s.q = reinterpret_cast<float*>(smem);
  s.p = s.q + kQFloats;
  s.alpha = s.p + kMaxHeads * kTile;
  s.m = s.alpha + kMaxHeads;
  s.l = s.m + kMaxHeads;
  s.rows = reinterpret_cast<size_t*>(s.l + kMaxHeads);     // at byte 12480: 8-aligned
  s.k = reinterpret_cast<__nv_bfloat16*>(s.rows + kTile);  // at byte 12992: 16-aligned
  s.k_stride = qk_dim + kKPad;     // a multiple of 4: every row 8-byte aligned
  s.v = s.k + kTile * s.k_stride;  // 16-aligned (qk_dim a multiple of 8)
  return s;
}

// Traps unless the sizes fit this kernel and the plan gave the shared memory it needs.
__device__ void require_supported(int num_qo_heads, int num_kv_heads, int qk_dim, int vo_dim) {
  unsigned dynamic_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  const bool ok = blockDim.x == kThreads && num_kv_heads > 0 && num_qo_heads % num_kv_heads == 0 &&
                  qk_dim > 0 && qk_dim % 8 == 0 && qk_dim <= kQFloats && vo_dim > 0 &&
                  vo_dim % 8 == 0 && vo_dim <= 2 * kThreads &&
                  dynamic_bytes >= kFixedBytes + 128u * static_cast<unsigned>(qk_dim + vo_dim);
  if (!ok) __trap();
}

// The two bf16 of a 32-bit word as float32 (exact): the lower address is the low half.
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// A thread's output accumulators (slots): with vo_dim <= kThreads slot j is head j at dimension
// threadIdx.x; with a wide vo_dim (up to 2 * kThreads) slot j is head j / 2 at dimension
// threadIdx.x + kThreads * (j % 2), so a pass holds kSlots or kSlots / 2 heads.
__device__ __forceinline__ int slot_head(int j, bool wide) { return wide ? j / 2 : j; }
__device__ __forceinline__ int slot_dim(int j, bool wide) {
  return threadIdx.x + (wide && j % 2 == 1 ? kThreads : 0);
}
__device__ __forceinline__ int pass_heads(int qk_dim, int vo_dim) {
  return min(vo_dim > kThreads ? kSlots / 2 : kSlots, kQFloats / qk_dim);
}
static_assert(kSlots <= kMaxHeads, "a pass's heads fit Q K^T and softmax");

// One pass: `heads` (<= pass_heads) q heads (rows of `q`, stride qk_dim) of the block's query
// row attend to the tokens [t_begin, t_end), token t's K/V cache row being row_of(t). On return
// acc[j] holds this thread's sum_t exp(logit_t - m) v[t, d] for slot j's head and dimension, and
// s.m / s.l every head's maximum logit and sum of exp(logit - m); with no tokens m = -inf, l = 0
// and acc = 0. Every thread of the block must call it.
template <class RowOf>
__device__ __forceinline__ void attend_pass(const Shared& s, const __nv_bfloat16* q, int heads,
                                            const __nv_bfloat16* k_cache,
                                            const __nv_bfloat16* v_cache, int qk_dim, int vo_dim,
                                            int t_begin, int t_end, float sm_scale, RowOf row_of,
                                            float (&acc)[kSlots]) {
  constexpr int kOwned = kMaxHeads / kWarps;
  const bool wide = vo_dim > kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  __syncthreads();  // the previous pass's readers of s.q, s.m and s.l are done
  for (int i = tid; i < heads * qk_dim; i += kThreads) s.q[i] = __bfloat162float(q[i]);
#pragma unroll
  for (int j = 0; j < kSlots; ++j) acc[j] = 0.0f;
  // Softmax state of the heads warp + kWarps * j, the same in every lane of the warp.
  float m_run[kOwned], l_run[kOwned];
#pragma unroll
  for (int j = 0; j < kOwned; ++j) {
    m_run[j] = neg_inf();
    l_run[j] = 0.0f;
  }
  const int k_chunks = qk_dim / 8, v_chunks = vo_dim / 8;  // 16-byte pieces of a row

  for (int t0 = t_begin; t0 < t_end; t0 += kTile) {
    const int n = min(kTile, t_end - t0);
    const int n4 = (n + 3) & ~3;  // P V reads four tokens at a time
    if (tid < n) s.rows[tid] = row_of(t0 + tid);
    __syncthreads();  // rows (and, on the first tile, q) written

    // 1. The tile's K and V rows, bf16 as stored; V rows n .. n4 zero (their p is 0, and 0 times
    //    an unset value could be NaN).
    for (int i = tid; i < n * k_chunks; i += kThreads) {
      const int t = i / k_chunks, c = i % k_chunks;
      const uint4 x = *reinterpret_cast<const uint4*>(k_cache + s.rows[t] * qk_dim + 8 * c);
      uint2* dst = reinterpret_cast<uint2*>(s.k + t * s.k_stride + 8 * c);
      dst[0] = make_uint2(x.x, x.y);
      dst[1] = make_uint2(x.z, x.w);
    }
    uint4* v4 = reinterpret_cast<uint4*>(s.v);  // v4[i]: token i / v_chunks, piece i % v_chunks
    for (int i = tid; i < n * v_chunks; i += kThreads) {
      const int t = i / v_chunks, c = i % v_chunks;
      v4[i] = *reinterpret_cast<const uint4*>(v_cache + s.rows[t] * vo_dim + 8 * c);
    }
    for (int i = n * v_chunks + tid; i < n4 * v_chunks; i += kThreads)
      v4[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();

    // 2. Logits: thread (token t, half) takes heads half, half + 2, ... (warp-uniform); tokens
    //    past the last one get -inf.
    {
      const int t = tid % kTile, half = tid / kTile;
      float dot[kMaxHeads / 2];
#pragma unroll
      for (int j = 0; j < kMaxHeads / 2; ++j) dot[j] = 0.0f;
      if (t < n) {
        const uint2* krow = reinterpret_cast<const uint2*>(s.k + t * s.k_stride);
        const float4* q4 = reinterpret_cast<const float4*>(s.q);
        const int q4_stride = qk_dim / 4;
        for (int d4 = 0; d4 < q4_stride; ++d4) {
          const uint2 w = krow[d4];  // k[t, 4 * d4 .. 4 * d4 + 4)
          const float k0 = bf16_lo(w.x), k1 = bf16_hi(w.x), k2 = bf16_lo(w.y), k3 = bf16_hi(w.y);
#pragma unroll
          for (int j = 0; j < kMaxHeads / 2; ++j) {
            const int g = half + 2 * j;
            if (g < heads) {
              const float4 qv = q4[g * q4_stride + d4];
              dot[j] = fmaf(qv.x, k0, dot[j]);
              dot[j] = fmaf(qv.y, k1, dot[j]);
              dot[j] = fmaf(qv.z, k2, dot[j]);
              dot[j] = fmaf(qv.w, k3, dot[j]);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kMaxHeads / 2; ++j) {
        const int g = half + 2 * j;
        if (g < heads) s.p[g * kTile + t] = t < n ? dot[j] * sm_scale : neg_inf();
      }
    }
    __syncthreads();

    // 3. Online softmax, a warp per head (heads warp, warp + kWarps, ...): two tokens a lane.
#pragma unroll
    for (int j = 0; j < kOwned; ++j) {
      const int g = warp + kWarps * j;
      if (g < heads) {
        float* row = s.p + g * kTile;
        const float x0 = row[lane], x1 = row[lane + 32];
        float tile_max = fmaxf(x0, x1);
        for (int off = 16; off > 0; off /= 2)
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
        // m_new is finite (the tile holds a token); alpha is 0 on the first tile (m = -inf), p
        // is 0 past the last token (logit -inf).
        const float m_new = fmaxf(m_run[j], tile_max);
        const float alpha = expf(m_run[j] - m_new);
        const float p0 = expf(x0 - m_new), p1 = expf(x1 - m_new);
        row[lane] = p0;
        row[lane + 32] = p1;
        float tile_sum = p0 + p1;
        for (int off = 16; off > 0; off /= 2)
          tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, off);
        l_run[j] = l_run[j] * alpha + tile_sum;
        m_run[j] = m_new;
        if (lane == 0) s.alpha[g] = alpha;
      }
    }
    __syncthreads();

    // 4. acc = acc * alpha + sum_t p[t] v[t, d] over the tile, four tokens at a time.
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int g = slot_head(j, wide);
      if (g < heads) acc[j] *= s.alpha[g];
    }
    const float4* p4 = reinterpret_cast<const float4*>(s.p);
    const int d_lo = tid, d_hi = tid + kThreads;  // this thread's dimensions (d_hi: wide only)
    for (int t = 0; t < n4; t += 4) {
      float v_lo[4], v_hi[4];  // v[t + u, d_lo], v[t + u, d_hi]; 0 past the row
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const __nv_bfloat16* vrow = s.v + (t + u) * vo_dim;
        v_lo[u] = d_lo < vo_dim ? __bfloat162float(vrow[d_lo]) : 0.0f;
        v_hi[u] = d_hi < vo_dim ? __bfloat162float(vrow[d_hi]) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int g = slot_head(j, wide);
        if (g < heads) {
          const float4 pg = p4[(g * kTile + t) / 4];
          const bool hi = wide && j % 2 == 1;
          float a = acc[j];
          a = fmaf(pg.x, hi ? v_hi[0] : v_lo[0], a);
          a = fmaf(pg.y, hi ? v_hi[1] : v_lo[1], a);
          a = fmaf(pg.z, hi ? v_hi[2] : v_lo[2], a);
          a = fmaf(pg.w, hi ? v_hi[3] : v_lo[3], a);
          acc[j] = a;
        }
      }
    }
    __syncthreads();  // the next tile rewrites rows, k, v and p
  }

#pragma unroll
  for (int j = 0; j < kOwned; ++j) {
    const int g = warp + kWarps * j;
    if (g < heads && lane == 0) {
      s.m[g] = m_run[j];
      s.l[g] = l_run[j];
    }
  }
  __syncthreads();
}
