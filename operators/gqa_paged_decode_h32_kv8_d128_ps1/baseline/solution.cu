/* kharness
{
  "definition": "gqa_paged_decode_h32_kv8_d128_ps1",
  "launches": [
    { "kernel": "gqa_decode_baseline",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale", "output", "lse",
               "batch_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for gqa_paged_decode_h32_kv8_d128_ps1: the plain kernel speedups are measured against.
// One block of 4 warps per (query head, request); query head h reads kv head h / 4, so each K/V
// row is fetched once per query head (4 times per group, mostly from L2). Warp w walks tokens
// w, w + 4, ...; each lane owns 4 of the 128 dims (two bf16x2 loads), the q.k dot product is a
// warp-shuffle reduction, and each warp keeps a natural-exponent online softmax. The 4 warp
// states are merged in shared memory. A request with no tokens writes 0 and lse = -inf.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kHeadDim = 128;
constexpr int kQoHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kGroup = kQoHeads / kKvHeads;
constexpr int kWarps = 4;
constexpr int kDimsPerLane = kHeadDim / 32;  // 4

extern "C" __global__ void __launch_bounds__(kWarps * 32)
    gqa_decode_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                        const __nv_bfloat16* v_cache, const int* kv_indptr, const int* kv_indices,
                        float sm_scale, __nv_bfloat16* output, float* lse, int batch_size) {
  __shared__ float s_acc[kWarps][kHeadDim];
  __shared__ float s_m[kWarps];
  __shared__ float s_l[kWarps];

  const int h = blockIdx.x;
  const int b = blockIdx.y;
  if (b >= batch_size) return;
  const int kv_head = h / kGroup;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int d0 = lane * kDimsPerLane;
  const size_t qo = static_cast<size_t>(b) * kQoHeads + h;

  float qf[kDimsPerLane];
  for (int j = 0; j < kDimsPerLane; ++j) qf[j] = __bfloat162float(q[qo * kHeadDim + d0 + j]);

  float m = neg_inf(), l = 0.0f, acc[kDimsPerLane] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = kv_indptr[b] + warp; i < kv_indptr[b + 1]; i += kWarps) {
    const size_t row = (static_cast<size_t>(kv_indices[i]) * kKvHeads + kv_head) * kHeadDim + d0;
    const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(k_cache + row);
    const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(v_cache + row);
    float dot = 0.0f;
    float vf[kDimsPerLane];
    for (int j = 0; j < kDimsPerLane / 2; ++j) {
      const float2 fk = __bfloat1622float2(k2[j]);
      const float2 fv = __bfloat1622float2(v2[j]);
      dot += qf[2 * j] * fk.x + qf[2 * j + 1] * fk.y;
      vf[2 * j] = fv.x;
      vf[2 * j + 1] = fv.y;
    }
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * sm_scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 on the first token
    const float p = expf(s - m_new);
    l = l * correction + p;
    for (int j = 0; j < kDimsPerLane; ++j) acc[j] = acc[j] * correction + p * vf[j];
    m = m_new;
  }

  for (int j = 0; j < kDimsPerLane; ++j) s_acc[warp][d0 + j] = acc[j];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  __syncthreads();

  float m_all = neg_inf();
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  const int d = threadIdx.x;  // 128 threads, one output dim each
  if (m_all == neg_inf()) {   // no tokens
    output[qo * kHeadDim + d] = __float2bfloat16_rn(0.0f);
    if (d == 0) lse[qo] = neg_inf();
    return;
  }
  float l_all = 0.0f, o = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    const float scale = expf(s_m[w] - m_all);  // 0 for a warp that saw no token
    l_all += s_l[w] * scale;
    o += s_acc[w][d] * scale;
  }
  output[qo * kHeadDim + d] = __float2bfloat16_rn(o / l_all);
  if (d == 0) lse[qo] = (m_all + logf(l_all)) * 1.4426950408889634f;
}
