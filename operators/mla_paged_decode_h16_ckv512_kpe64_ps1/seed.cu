/* kharness
{
  "definition": "mla_paged_decode_h16_ckv512_kpe64_ps1",
  "launches": [
    { "kernel": "mla_decode_kernel",
      "grid": ["num_qo_heads / 4", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices", "sm_scale",
               "output", "lse", "batch_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for mla_paged_decode_h16_ckv512_kpe64_ps1: a correct, reasonable starting point
// on CUDA cores. Every query head reads the same latent rows, so one block of 4 warps serves 4
// query heads of one request and reads each 1152-byte token row (512 ckv + 64 kpe bf16) once for
// the 4 heads. Each warp walks every 4th token of the request: a lane holds 16 ckv dimensions
// (two 128-bit loads: dims 8*lane.. and 256 + 8*lane..) and 2 kpe dimensions, the 4 logits are
// reduced in one interleaved butterfly, and each head keeps a base-2 online softmax (logits
// pre-multiplied by sm_scale * log2(e)). The 4 warp states are merged through shared memory.
// A request with no tokens writes 0 and lse = -inf.
//
// Knobs (tune.json, for the offline tune provider; the defaults are the plan above): GROUP query
// heads per block (the grid has num_qo_heads / GROUP blocks per request: fewer heads per block
// read each latent row more often but give more blocks to a small batch) and WARPS per block.
#include <cuda_bf16.h>

#ifndef GROUP
#define GROUP 4
#endif
#ifndef WARPS
#define WARPS 4
#endif

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kHeads = 16;
constexpr int kCkv = 512;
constexpr int kKpe = 64;
constexpr int kGroup = GROUP;  // query heads per block
constexpr int kWarps = WARPS;
constexpr int kVec = 8;  // bf16 per 128-bit load
constexpr float kLog2e = 1.4426950408889634f;

union Pack {
  uint4 raw;
  __nv_bfloat162 h2[kVec / 2];
};

__device__ __forceinline__ void unpack(uint4 raw, float* out) {
  Pack p;
  p.raw = raw;
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 f = __bfloat1622float2(p.h2[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

extern "C" __global__ void __launch_bounds__(kWarps * 32) mla_decode_kernel(
    const __nv_bfloat16* __restrict__ q_nope, const __nv_bfloat16* __restrict__ q_pe,
    const __nv_bfloat16* __restrict__ ckv_cache, const __nv_bfloat16* __restrict__ kpe_cache,
    const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices, float sm_scale,
    __nv_bfloat16* __restrict__ output, float* __restrict__ lse, int batch_size) {
  __shared__ float s_acc[kWarps][kGroup][kCkv];  // 32 KiB at the defaults
  __shared__ float s_m[kWarps][kGroup];
  __shared__ float s_l[kWarps][kGroup];

  const int h0 = blockIdx.x * kGroup;
  const int b = blockIdx.y;
  if (b >= batch_size) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int begin = kv_indptr[b];
  const int end = kv_indptr[b + 1];
  const float scale2 = sm_scale * kLog2e;

  // This lane's slices of the 4 heads' queries, in float32.
  float qn[kGroup][2 * kVec], qp[kGroup][2];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const size_t bh = static_cast<size_t>(b) * kHeads + h0 + g;
    const uint4* qrow = reinterpret_cast<const uint4*>(q_nope + bh * kCkv);
    unpack(qrow[lane], qn[g]);
    unpack(qrow[32 + lane], qn[g] + kVec);
    const float2 p =
        __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(q_pe + bh * kKpe)[lane]);
    qp[g][0] = p.x;
    qp[g][1] = p.y;
  }

  float m[kGroup], l[kGroup], acc[kGroup][2 * kVec];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = neg_inf();
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 2 * kVec; ++j) acc[g][j] = 0.0f;
  }

  // page_size is 1: page id == token row. Lanes of a warp share the token, so the shuffles
  // below are warp-uniform.
  for (int i = begin + warp; i < end; i += kWarps) {
    const size_t row = static_cast<size_t>(kv_indices[i]);
    const uint4* crow = reinterpret_cast<const uint4*>(ckv_cache + row * kCkv);
    float c[2 * kVec];
    unpack(crow[lane], c);
    unpack(crow[32 + lane], c + kVec);
    const float2 kp =
        __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(kpe_cache + row * kKpe)[lane]);

    float s[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float dot = qp[g][0] * kp.x + qp[g][1] * kp.y;
#pragma unroll
      for (int j = 0; j < 2 * kVec; ++j) dot += qn[g][j] * c[j];
      s[g] = dot;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
      for (int g = 0; g < kGroup; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], off);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float logit = s[g] * scale2;
      const float m_new = fmaxf(m[g], logit);
      const float corr = exp2f(m[g] - m_new);  // 0 on the first token (m = -inf)
      const float p = exp2f(logit - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int j = 0; j < 2 * kVec; ++j) acc[g][j] = acc[g][j] * corr + p * c[j];
      m[g] = m_new;
    }
  }

  // Merge the 4 warps' states.
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      s_acc[warp][g][kVec * lane + j] = acc[g][j];
      s_acc[warp][g][256 + kVec * lane + j] = acc[g][kVec + j];
    }
    if (lane == 0) {
      s_m[warp][g] = m[g];
      s_l[warp][g] = l[g];
    }
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    float mm = neg_inf();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, s_m[w][g]);
    const size_t bh = static_cast<size_t>(b) * kHeads + h0 + g;
    if (mm == neg_inf()) {  // no tokens
      for (int d = threadIdx.x; d < kCkv; d += kWarps * 32) {
        output[bh * kCkv + d] = __float2bfloat16_rn(0.0f);
      }
      if (threadIdx.x == 0) lse[bh] = neg_inf();
      continue;
    }
    float w_scale[kWarps];
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      w_scale[w] = exp2f(s_m[w][g] - mm);  // 0 for a warp that saw no token
      total += s_l[w][g] * w_scale[w];
    }
    const float inv = 1.0f / total;
    for (int d = threadIdx.x; d < kCkv; d += kWarps * 32) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) o += s_acc[w][g][d] * w_scale[w];
      output[bh * kCkv + d] = __float2bfloat16_rn(o * inv);
    }
    if (threadIdx.x == 0) lse[bh] = mm + log2f(total);
  }
}
