/* kharness
{
  "definition": "rope_with_cos_sin_cache_neox_style_d128_rd64",
  "launches": [
    { "kernel": "rope_neox_reference",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "cos_sin_cache", "positions", "q_out", "k_out", "num_tokens",
               "num_qo_heads", "num_kv_heads", "head_size", "rotary_dim"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every rope_with_cos_sin_cache_neox_style_d*_rd* definition (family
// "rope"): NeoX-style rotary embedding with a float32 [max_seq_len, rotary_dim] cache whose first
// half of each row is cos and second half sin. For token t, p = positions[t], half = rotary_dim/2,
// and every head of q and k (last dim head_size):
//   d <  half:              out[d] = x[d] * cos[d] - x[d + half] * sin[d]
//   half <= d < rotary_dim: out[d] = x[d] * cos[d - half] + x[d - half] * sin[d - half]
//   d >= rotary_dim:        out[d] = x[d]
// float32 math; products and sums rounded one at a time (__fmul_rn / __fadd_rn, no contraction
// into FMAs, as PyTorch computes it), one rounding to bfloat16. One block per token, a strided
// loop over the token's q elements, then its k elements.
#include <cuda_bf16.h>

__device__ float rope_element(const __nv_bfloat16* head, const float* cs, int d, int head_size,
                              int rotary_dim) {
  const int half = rotary_dim / 2;
  const float x = __bfloat162float(head[d]);
  if (d >= rotary_dim) return x;
  if (d < half) {
    const float x2 = __bfloat162float(head[d + half]);
    return __fadd_rn(__fmul_rn(x, cs[d]), -__fmul_rn(x2, cs[half + d]));
  }
  const float x1 = __bfloat162float(head[d - half]);
  return __fadd_rn(__fmul_rn(x, cs[d - half]), __fmul_rn(x1, cs[d]));  // cs[d] = sin[d - half]
}

extern "C" __global__ void rope_neox_reference(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                               const float* cos_sin_cache,
                                               const long long* positions, __nv_bfloat16* q_out,
                                               __nv_bfloat16* k_out, int num_tokens,
                                               int num_qo_heads, int num_kv_heads, int head_size,
                                               int rotary_dim) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const float* cs = cos_sin_cache + positions[t] * rotary_dim;

  const int q_elems = num_qo_heads * head_size;
  const size_t q_base = static_cast<size_t>(t) * q_elems;
  for (int e = threadIdx.x; e < q_elems; e += blockDim.x) {
    const __nv_bfloat16* head = q + q_base + (e / head_size) * head_size;
    q_out[q_base + e] = __float2bfloat16_rn(rope_element(head, cs, e % head_size, head_size, rotary_dim));
  }

  const int k_elems = num_kv_heads * head_size;
  const size_t k_base = static_cast<size_t>(t) * k_elems;
  for (int e = threadIdx.x; e < k_elems; e += blockDim.x) {
    const __nv_bfloat16* head = k + k_base + (e / head_size) * head_size;
    k_out[k_base + e] = __float2bfloat16_rn(rope_element(head, cs, e % head_size, head_size, rotary_dim));
  }
}
