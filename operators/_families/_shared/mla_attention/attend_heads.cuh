// The attention engine of the MLA baselines (mla_paged_prefill_causal and _ps1,
// mla_paged_decode_ps64's split-KV decode), inlined where their text includes it: the block's
// shared memory, its carving and checks, and attend_heads, which runs up to kHeads q heads of one
// query row over a range of tokens.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 256;  // must equal the plan's block size
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = kWarps;  // q heads per block (the plan's grid x divides by it): a warp each
constexpr int kTile = 32;       // tokens per step: a lane each in Q K^T
constexpr int kMaxDims = 2;     // output dimensions per thread and head: head_dim_ckv <= 512
constexpr int kSlots = kHeads * kMaxDims;  // output accumulators per thread
constexpr int kPad = 4;  // bf16 padding of a staged token row: conflict-free 8-byte reads
static_assert(kTile == 32 && kHeads == 8, "lane and warp mapping, the plan's grid");

// Dynamic shared memory, in this order: p [kHeads][kTile] f32 | alpha, m, l [kHeads] f32 |
// rows [kTile] size_t | q [kHeads][dk] f32 | kv [kTile][dk + kPad] bf16, with
// dk = head_dim_ckv + head_dim_kpe: kFixedBytes + 96 * dk bytes, the plan's shared_bytes.
constexpr unsigned kFixedBytes = kHeads * kTile * 4 + 3 * kHeads * 4 + kTile * 8 + kTile * kPad * 2;
static_assert(kFixedBytes == 1632, "the plan's shared_bytes");

extern __shared__ __align__(16) unsigned char smem[];

struct Shared {
  float* p;           // p[g * kTile + t]: exp(logit - m) of the tile
  float* alpha;       // per head: exp(m_old - m_new) of the tile
  float* m;           // per head at the end: the maximum logit
  float* l;           // ... and the sum of exp(logit - m)
  size_t* rows;       // the tile's cache slots page * page_size + slot
  float* q;           // q[g * dk + d]: [q_nope | q_pe] of head g
  __nv_bfloat16* kv;  // kv[t * kv_stride + d]: [ckv | kpe] of token t, as stored; rows past the
                      // last token up to a multiple of 4: zeros
  int kv_stride;
};

__device__ Shared carve(int dk) {
  Shared s;
  s.p = reinterpret_cast<float*>(smem);
  s.alpha = s.p + kHeads * kTile;
  s.m = s.alpha + kHeads;
  s.l = s.m + kHeads;
  s.rows = reinterpret_cast<size_t*>(s.l + kHeads);            // byte 1120: 8-aligned
  s.q = reinterpret_cast<float*>(s.rows + kTile);              // byte 1376: 16-aligned
  s.kv = reinterpret_cast<__nv_bfloat16*>(s.q + kHeads * dk);  // 16-aligned (dk multiple of 8)
  s.kv_stride = dk + kPad;  // a multiple of 4: rows stay 8-byte aligned
  return s;
}

// Traps unless the sizes fit this kernel and the plan gave the shared memory it needs.
__device__ void require_supported(int head_dim_ckv, int head_dim_kpe) {
  unsigned dynamic_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  const bool ok =
      blockDim.x == kThreads && head_dim_ckv > 0 && head_dim_ckv % 8 == 0 &&
      head_dim_ckv <= kMaxDims * kThreads && head_dim_kpe >= 0 && head_dim_kpe % 8 == 0 &&
      dynamic_bytes >= kFixedBytes + 96u * static_cast<unsigned>(head_dim_ckv + head_dim_kpe);
  if (!ok) __trap();
}

// The two bf16 of a 32-bit word as float32 (exact): the lower address is the low half.
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// `heads` (<= kHeads) q heads of one query row, whose q_nope / q_pe rows start at q_nope / q_pe
// (strides ckv_dim / kpe_dim), attend to the tokens [t_begin, t_end), token t's cache slot being
// row_of(t). On return acc holds this thread's sum_t exp(logit_t - m) ckv[t, d] for its slots
// (slot h * kMaxDims + j: head h, dimension threadIdx.x + kThreads * j) and s.m / s.l every head's
// maximum logit and sum of exp(logit - m); with no tokens m = -inf, l = 0 and acc = 0. Every
// thread of the block must call it.
template <class RowOf>
__device__ __forceinline__ void attend_heads(const Shared& s, const __nv_bfloat16* q_nope,
                                             const __nv_bfloat16* q_pe, int heads,
                                             const __nv_bfloat16* ckv_cache,
                                             const __nv_bfloat16* kpe_cache, int ckv_dim,
                                             int kpe_dim, int t_begin, int t_end, float sm_scale,
                                             RowOf row_of, float (&acc)[kSlots]) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int dk = ckv_dim + kpe_dim;
  for (int i = tid; i < heads * dk; i += kThreads) {
    const int g = i / dk, d = i % dk;
    s.q[i] =
        __bfloat162float(d < ckv_dim ? q_nope[g * ckv_dim + d] : q_pe[g * kpe_dim + (d - ckv_dim)]);
  }
#pragma unroll
  for (int j = 0; j < kSlots; ++j) acc[j] = 0.0f;
  float m_run = neg_inf(), l_run = 0.0f;  // softmax state of head `warp`, the same in every lane
  const int ckv_chunks = ckv_dim / 8, row_chunks = dk / 8;  // 16-byte pieces of a token row

  for (int t0 = t_begin; t0 < t_end; t0 += kTile) {
    const int n = min(kTile, t_end - t0);
    const int n4 = (n + 3) & ~3;  // P V reads four tokens at a time
    if (tid < n) s.rows[tid] = row_of(t0 + tid);
    __syncthreads();  // rows (and, on the first tile, q) written

    // 1. The tile's [ckv | kpe] rows, bf16 as stored; rows n .. n4 zero (their p is 0, and 0
    //    times an unset value could be NaN).
    for (int i = tid; i < n4 * row_chunks; i += kThreads) {
      const int t = i / row_chunks, c = i % row_chunks;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (t < n) {
        const __nv_bfloat16* src = c < ckv_chunks
                                       ? ckv_cache + s.rows[t] * ckv_dim + 8 * c
                                       : kpe_cache + s.rows[t] * kpe_dim + 8 * (c - ckv_chunks);
        x = *reinterpret_cast<const uint4*>(src);
      }
      uint2* dst = reinterpret_cast<uint2*>(s.kv + t * s.kv_stride + 8 * c);
      dst[0] = make_uint2(x.x, x.y);
      dst[1] = make_uint2(x.z, x.w);
    }
    __syncthreads();

    // 2. Logits and online softmax: warp g = head g (warp-uniform), lane t = token t; tokens past
    //    the last one get -inf, so p = 0.
    const int g = warp;
    if (g < heads) {
      float x = neg_inf();
      if (lane < n) {
        const uint2* krow = reinterpret_cast<const uint2*>(s.kv + lane * s.kv_stride);
        const float4* q4 = reinterpret_cast<const float4*>(s.q + g * dk);
        float dot = 0.0f;
        for (int d4 = 0; d4 < dk / 4; ++d4) {
          const uint2 w = krow[d4];  // [ckv | kpe][4 * d4 .. 4 * d4 + 4)
          const float4 qv = q4[d4];
          dot = fmaf(qv.x, bf16_lo(w.x), dot);
          dot = fmaf(qv.y, bf16_hi(w.x), dot);
          dot = fmaf(qv.z, bf16_lo(w.y), dot);
          dot = fmaf(qv.w, bf16_hi(w.y), dot);
        }
        x = dot * sm_scale;
      }
      float tile_max = x;
      for (int off = 16; off > 0; off /= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_new = fmaxf(m_run, tile_max);  // finite: the tile holds a token
      const float alpha = expf(m_run - m_new);     // 0 on the first tile (m = -inf)
      const float p = expf(x - m_new);             // 0 past the last token
      s.p[g * kTile + lane] = p;
      float tile_sum = p;
      for (int off = 16; off > 0; off /= 2) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, off);
      l_run = l_run * alpha + tile_sum;
      m_run = m_new;
      if (lane == 0) s.alpha[g] = alpha;
    }
    __syncthreads();

    // 3. acc = acc * alpha + sum_t p[t] ckv[t, d] over the tile, four tokens at a time.
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < heads) {
        const float a = s.alpha[h];
#pragma unroll
        for (int j = 0; j < kMaxDims; ++j) acc[h * kMaxDims + j] *= a;
      }
    }
    const float4* p4 = reinterpret_cast<const float4*>(s.p);
    for (int t = 0; t < n4; t += 4) {
      float vf[4][kMaxDims];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int j = 0; j < kMaxDims; ++j) {
          const int d = tid + kThreads * j;
          vf[u][j] = d < ckv_dim ? __bfloat162float(s.kv[(t + u) * s.kv_stride + d]) : 0.0f;
        }
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h < heads) {
          const float4 ph = p4[(h * kTile + t) / 4];
#pragma unroll
          for (int j = 0; j < kMaxDims; ++j) {
            float a = acc[h * kMaxDims + j];
            a = fmaf(ph.x, vf[0][j], a);
            a = fmaf(ph.y, vf[1][j], a);
            a = fmaf(ph.z, vf[2][j], a);
            a = fmaf(ph.w, vf[3][j], a);
            acc[h * kMaxDims + j] = a;
          }
        }
      }
    }
    __syncthreads();  // the next tile rewrites rows, kv and p
  }

  if (warp < heads && lane == 0) {
    s.m[warp] = m_run;
    s.l[warp] = l_run;
  }
  __syncthreads();
}
