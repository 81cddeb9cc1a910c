/* kharness
{
  "definition": "rope_with_cos_sin_cache_neox_style_d128_rd64",
  "launches": [
    { "kernel": "rope_baseline",
      "grid": ["num_tokens", 1, 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "cos_sin_cache", "positions", "q_out", "k_out", "num_tokens",
               "num_qo_heads", "num_kv_heads"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for rope_with_cos_sin_cache_neox_style_d128_rd64: the straightforward kernel. One
// block of 128 threads per token; thread d handles dimension d of every q head, then of every
// k head, with scalar bf16 loads.
#include <cuda_bf16.h>

constexpr int kHead = 128;
constexpr int kRot = 64;
constexpr int kHalf = kRot / 2;

__device__ float rotate(const __nv_bfloat16* x, const float* cs, int d) {
  const float v = __bfloat162float(x[d]);
  if (d >= kRot) return v;
  if (d < kHalf) return v * cs[d] - __bfloat162float(x[d + kHalf]) * cs[kHalf + d];
  return v * cs[d - kHalf] + __bfloat162float(x[d - kHalf]) * cs[d];
}

extern "C" __global__ void rope_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                         const float* cos_sin_cache, const long long* positions,
                                         __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                                         int num_tokens, int num_qo_heads, int num_kv_heads) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const float* cs = cos_sin_cache + positions[t] * kRot;
  const int d = threadIdx.x;
  for (int h = 0; h < num_qo_heads; ++h) {
    const size_t off = (static_cast<size_t>(t) * num_qo_heads + h) * kHead;
    q_out[off + d] = __float2bfloat16(rotate(q + off, cs, d));
  }
  for (int h = 0; h < num_kv_heads; ++h) {
    const size_t off = (static_cast<size_t>(t) * num_kv_heads + h) * kHead;
    k_out[off + d] = __float2bfloat16(rotate(k + off, cs, d));
  }
}
