/* kharness
{
  "definition": "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
  "launches": [
    { "kernel": "dsa_split_kernel",
      "grid": [16, "num_tokens", 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale",
               "workspace", "num_tokens"] },
    { "kernel": "dsa_merge_kernel",
      "grid": ["num_qo_heads", "num_tokens", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "output", "lse", "num_tokens"] }
  ],
  "workspace_bytes": "num_tokens * 16 * 16 * 514 * 4",
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64: a correct, reasonable
// starting point (split-KV "flash decoding" for the shared-KV MLA layout).
// The 16 heads of a token all attend to the same 2048 selected rows, so a block serves all 16
// heads and each row is read from DRAM once per token. The 2048 indices are cut into 16 splits of
// 128 (grid 16 x num_tokens, enough blocks even at batch 1). Split kernel: q of the 16 heads is
// staged in shared memory as float; a warp per index computes the 16 logits (each lane 16 latent
// + 2 rotary dims, shuffle reductions); per head a local max and sum of exp; then each thread owns
// 2 of the 512 output dims for all 16 heads and accumulates p * ckv over the split's rows (rows
// re-read from L1/L2). The split's unnormalised outputs and (max, sum) go to the workspace. Merge
// kernel: per (head, token), rescales the 16 partial states to the global max and writes the
// bf16 output and lse = log2(sum exp(logits)). All -1 indices: output 0, lse = -inf.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kHeads = 16;
constexpr int kCkv = 512;
constexpr int kKpe = 64;
constexpr int kQk = kCkv + kKpe;
constexpr int kTopk = 2048;
constexpr int kSplits = 16;
constexpr int kChunk = kTopk / kSplits;  // 128 indices per split
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Workspace: o [num_tokens, kSplits, kHeads, kCkv], then m and l [num_tokens, kSplits, kHeads].
__device__ __forceinline__ float* ws_o(float* ws) { return ws; }
__device__ __forceinline__ float* ws_m(float* ws, int num_tokens) {
  return ws + static_cast<size_t>(num_tokens) * kSplits * kHeads * kCkv;
}
__device__ __forceinline__ float* ws_l(float* ws, int num_tokens) {
  return ws_m(ws, num_tokens) + static_cast<size_t>(num_tokens) * kSplits * kHeads;
}

extern "C" __global__ void __launch_bounds__(kThreads)
    dsa_split_kernel(const __nv_bfloat16* __restrict__ q_nope,
                     const __nv_bfloat16* __restrict__ q_pe,
                     const __nv_bfloat16* __restrict__ ckv_cache,
                     const __nv_bfloat16* __restrict__ kpe_cache,
                     const int* __restrict__ sparse_indices, float sm_scale,
                     float* __restrict__ workspace, int num_tokens) {
  __shared__ float2 q_s[kHeads][kQk / 2];  // 36 KiB
  __shared__ float p_s[kHeads][kChunk];    // logits, then probabilities
  __shared__ int rows[kChunk];

  const int split = blockIdx.x;
  const int t = blockIdx.y;
  if (t >= num_tokens) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  for (int i = threadIdx.x; i < kHeads * (kCkv / 2); i += kThreads) {
    const int h = i / (kCkv / 2), c = i % (kCkv / 2);
    q_s[h][c] = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(
        q_nope + (static_cast<size_t>(t) * kHeads + h) * kCkv)[c]);
  }
  for (int i = threadIdx.x; i < kHeads * (kKpe / 2); i += kThreads) {
    const int h = i / (kKpe / 2), c = i % (kKpe / 2);
    q_s[h][kCkv / 2 + c] = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(
        q_pe + (static_cast<size_t>(t) * kHeads + h) * kKpe)[c]);
  }
  for (int i = threadIdx.x; i < kChunk; i += kThreads)
    rows[i] = sparse_indices[static_cast<size_t>(t) * kTopk + split * kChunk + i];
  __syncthreads();

  // 1. Logits of the 16 heads, a warp per index.
  for (int i = warp; i < kChunk; i += kWarps) {
    const int r = rows[i];
    if (r == -1) {
      if (lane < kHeads) p_s[lane][i] = neg_inf();
      continue;
    }
    float2 k[9];  // pairs lane + 32 j of the latent row (j < 8), then pair lane of the rotary row
    const __nv_bfloat162* kc =
        reinterpret_cast<const __nv_bfloat162*>(ckv_cache + static_cast<size_t>(r) * kCkv);
#pragma unroll
    for (int j = 0; j < 8; ++j) k[j] = __bfloat1622float2(kc[lane + 32 * j]);
    k[8] = __bfloat1622float2(
        reinterpret_cast<const __nv_bfloat162*>(kpe_cache + static_cast<size_t>(r) * kKpe)[lane]);
    float mine = 0.0f;  // lane h ends up with head h's logit
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < 9; ++j) {
        const float2 q = q_s[h][lane + 32 * j];
        dot += q.x * k[j].x + q.y * k[j].y;
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == h) mine = dot;
    }
    if (lane < kHeads) p_s[lane][i] = mine * sm_scale;
  }
  __syncthreads();

  // 2. Per head (a warp per 2 heads): local max, p = exp(logit - max), local sum.
  float* m_out = ws_m(workspace, num_tokens);
  float* l_out = ws_l(workspace, num_tokens);
  for (int h = warp; h < kHeads; h += kWarps) {
    float m = neg_inf();
    for (int i = lane; i < kChunk; i += 32) m = fmaxf(m, p_s[h][i]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (int i = lane; i < kChunk; i += 32) {
      const float p = m == neg_inf() ? 0.0f : __expf(p_s[h][i] - m);
      p_s[h][i] = p;
      s += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
      const size_t at = (static_cast<size_t>(t) * kSplits + split) * kHeads + h;
      m_out[at] = m;
      l_out[at] = s;
    }
  }
  __syncthreads();

  // 3. Unnormalised P @ V for the split: thread owns latent pair threadIdx.x, all 16 heads.
  float2 acc[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) acc[h] = make_float2(0.0f, 0.0f);
  for (int i = 0; i < kChunk; ++i) {
    const int r = rows[i];
    if (r == -1) continue;
    const float2 v = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(
        ckv_cache + static_cast<size_t>(r) * kCkv)[threadIdx.x]);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float p = p_s[h][i];
      acc[h].x += p * v.x;
      acc[h].y += p * v.y;
    }
  }
  float2* o = reinterpret_cast<float2*>(ws_o(workspace));
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    o[((static_cast<size_t>(t) * kSplits + split) * kHeads + h) * (kCkv / 2) + threadIdx.x] =
        acc[h];
  }
}

extern "C" __global__ void __launch_bounds__(128)
    dsa_merge_kernel(const float* __restrict__ workspace, __nv_bfloat16* __restrict__ output,
                     float* __restrict__ lse, int num_tokens) {
  const int h = blockIdx.x;
  const int t = blockIdx.y;
  if (t >= num_tokens) return;
  const float* m_in = ws_m(const_cast<float*>(workspace), num_tokens);
  const float* l_in = ws_l(const_cast<float*>(workspace), num_tokens);
  float m[kSplits], l[kSplits];
  float big = neg_inf();
#pragma unroll
  for (int s = 0; s < kSplits; ++s) {
    const size_t at = (static_cast<size_t>(t) * kSplits + s) * kHeads + h;
    m[s] = m_in[at];
    l[s] = l_in[at];
    big = fmaxf(big, m[s]);
  }
  const size_t qo = static_cast<size_t>(t) * kHeads + h;
  __nv_bfloat16* out = output + qo * kCkv;
  if (big == neg_inf()) {  // every index is padding
    for (int d = threadIdx.x; d < kCkv; d += blockDim.x) out[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[qo] = neg_inf();
    return;
  }
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kSplits; ++s) {
    m[s] = m[s] == neg_inf() ? 0.0f : __expf(m[s] - big);  // the split's rescale factor
    total += m[s] * l[s];
  }
  const float inv = 1.0f / total;
  for (int d = threadIdx.x; d < kCkv; d += blockDim.x) {
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
      acc += m[s] * workspace[((static_cast<size_t>(t) * kSplits + s) * kHeads + h) * kCkv + d];
    }
    out[d] = __float2bfloat16_rn(acc * inv);
  }
  if (threadIdx.x == 0) lse[qo] = (big + logf(total)) * 1.4426950408889634f;
}
