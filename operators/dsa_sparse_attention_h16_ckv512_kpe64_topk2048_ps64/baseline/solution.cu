/* kharness
{
  "definition": "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
  "launches": [
    { "kernel": "dsa_attention_baseline",
      "grid": ["num_qo_heads", "num_tokens", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale",
               "output", "lse", "num_tokens"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64: the plain kernel speedups are
// measured against. One block of 4 warps per (query head, token), so every selected KV row is
// fetched once per head (16 times per token, mostly from L2). Pass 1: warp w computes the logits
// of indices w, w + 4, ...; each lane owns 16 of the 512 latent dims and 2 of the 64 rotary dims,
// and the dot product is a warp-shuffle reduction; logits go to shared memory. Pass 2: max and
// sum of exponentials. Pass 3: each thread owns 4 output dims and sums p_i * ckv[r_i] over the
// valid indices. A token whose indices are all -1 writes 0 and lse = -inf.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kHeads = 16;
constexpr int kCkv = 512;
constexpr int kKpe = 64;
constexpr int kTopk = 2048;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

extern "C" __global__ void __launch_bounds__(kThreads) dsa_attention_baseline(
    const __nv_bfloat16* __restrict__ q_nope, const __nv_bfloat16* __restrict__ q_pe,
    const __nv_bfloat16* __restrict__ ckv_cache, const __nv_bfloat16* __restrict__ kpe_cache,
    const int* __restrict__ sparse_indices, float sm_scale, __nv_bfloat16* __restrict__ output,
    float* __restrict__ lse, int num_tokens) {
  __shared__ float logits[kTopk];
  __shared__ int rows[kTopk];
  __shared__ float red[kWarps];

  const int h = blockIdx.x;
  const int t = blockIdx.y;
  if (t >= num_tokens) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const size_t qo = static_cast<size_t>(t) * kHeads + h;

  for (int i = threadIdx.x; i < kTopk; i += kThreads)
    rows[i] = sparse_indices[static_cast<size_t>(t) * kTopk + i];

  // This lane's slice of q: latent dims lane*2 + 64*j (j < 8, as bf16 pairs), rotary dims lane*2.
  float qn[16], qp[2];
  const __nv_bfloat162* qn2 = reinterpret_cast<const __nv_bfloat162*>(q_nope + qo * kCkv);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 f = __bfloat1622float2(qn2[lane + 32 * j]);
    qn[2 * j] = f.x;
    qn[2 * j + 1] = f.y;
  }
  {
    const float2 f =
        __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(q_pe + qo * kKpe)[lane]);
    qp[0] = f.x;
    qp[1] = f.y;
  }
  __syncthreads();

  // 1. Logits, a warp per index.
  float m = neg_inf();
  for (int i = warp; i < kTopk; i += kWarps) {
    const int r = rows[i];
    if (r == -1) {
      if (lane == 0) logits[i] = neg_inf();
      continue;
    }
    const __nv_bfloat162* kc =
        reinterpret_cast<const __nv_bfloat162*>(ckv_cache + static_cast<size_t>(r) * kCkv);
    const __nv_bfloat162* kp =
        reinterpret_cast<const __nv_bfloat162*>(kpe_cache + static_cast<size_t>(r) * kKpe);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 f = __bfloat1622float2(kc[lane + 32 * j]);
      dot += qn[2 * j] * f.x + qn[2 * j + 1] * f.y;
    }
    const float2 f = __bfloat1622float2(kp[lane]);
    dot += qp[0] * f.x + qp[1] * f.y;
    dot = warp_sum(dot) * sm_scale;
    if (lane == 0) logits[i] = dot;
    m = fmaxf(m, dot);
  }
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  float max_logit = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) max_logit = fmaxf(max_logit, red[w]);
  __syncthreads();

  __nv_bfloat16* out = output + qo * kCkv;
  if (max_logit == neg_inf()) {  // every index is padding
    for (int d = threadIdx.x; d < kCkv; d += kThreads) out[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[qo] = neg_inf();
    return;
  }

  // 2. p_i = exp(logit_i - max) in place, and the sum.
  float s = 0.0f;
  for (int i = threadIdx.x; i < kTopk; i += kThreads) {
    const float p = __expf(logits[i] - max_logit);
    logits[i] = p;
    s += p;
  }
  s = warp_sum(s);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += red[w];

  // 3. P @ V: thread owns dims 2*threadIdx.x, +1 and 256 + 2*threadIdx.x, +1.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < kTopk; ++i) {
    const int r = rows[i];
    if (r == -1) continue;
    const float p = logits[i];
    const __nv_bfloat162* v =
        reinterpret_cast<const __nv_bfloat162*>(ckv_cache + static_cast<size_t>(r) * kCkv);
    const float2 a = __bfloat1622float2(v[threadIdx.x]);
    const float2 b = __bfloat1622float2(v[threadIdx.x + kThreads]);
    acc[0] += p * a.x;
    acc[1] += p * a.y;
    acc[2] += p * b.x;
    acc[3] += p * b.y;
  }
  const float inv = 1.0f / sum;
  __nv_bfloat162* out2 = reinterpret_cast<__nv_bfloat162*>(out);
  out2[threadIdx.x] = __floats2bfloat162_rn(acc[0] * inv, acc[1] * inv);
  out2[threadIdx.x + kThreads] = __floats2bfloat162_rn(acc[2] * inv, acc[3] * inv);
  if (threadIdx.x == 0) lse[qo] = (max_logit + logf(sum)) * 1.4426950408889634f;
}
