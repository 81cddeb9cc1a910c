/* kharness
{
  "definition": "rope_with_cos_sin_cache_neox_style_d128_rd64",
  "launches": [
    { "kernel": "rope_kernel",
      "grid": ["cdiv(num_tokens * (num_qo_heads + num_kv_heads), 4)", 1, 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "cos_sin_cache", "positions", "q_out", "k_out", "num_tokens",
               "num_qo_heads", "num_kv_heads"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for rope_with_cos_sin_cache_neox_style_d128_rd64: a correct starting point.
// One warp per (token, head) over the q heads then the k heads of each token, 4 warps a block.
// Lanes 0..15 rotate two adjacent pairs each: bf16x2 loads of x1 = x[2l, 2l+1] and
// x2 = x[32+2l, 32+2l+1], float2 loads of cos and sin; lanes 16..31 copy the 64 pass-through
// dimensions, 8 bytes each.
#include <cuda_bf16.h>

constexpr int kHead = 128;
constexpr int kRot = 64;
constexpr int kHalf = kRot / 2;

extern "C" __global__ void __launch_bounds__(128)
    rope_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                const float* __restrict__ cos_sin_cache, const long long* __restrict__ positions,
                __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out,
                int num_tokens, int num_qo_heads, int num_kv_heads) {
  const int heads = num_qo_heads + num_kv_heads;
  const size_t w = static_cast<size_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (w >= static_cast<size_t>(num_tokens) * heads) return;
  const int lane = threadIdx.x % 32;
  const size_t t = w / heads;
  const int h = static_cast<int>(w % heads);

  const __nv_bfloat16* src;
  __nv_bfloat16* dst;
  if (h < num_qo_heads) {
    const size_t off = (t * num_qo_heads + h) * kHead;
    src = q + off;
    dst = q_out + off;
  } else {
    const size_t off = (t * num_kv_heads + (h - num_qo_heads)) * kHead;
    src = k + off;
    dst = k_out + off;
  }

  if (lane < 16) {
    const int j = 2 * lane;
    const float* cs = cos_sin_cache + positions[t] * kRot;
    const float2 c = *reinterpret_cast<const float2*>(cs + j);
    const float2 s = *reinterpret_cast<const float2*>(cs + kHalf + j);
    const float2 x1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + j));
    const float2 x2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + kHalf + j));
    *reinterpret_cast<__nv_bfloat162*>(dst + j) =
        __floats2bfloat162_rn(x1.x * c.x - x2.x * s.x, x1.y * c.y - x2.y * s.y);
    *reinterpret_cast<__nv_bfloat162*>(dst + kHalf + j) =
        __floats2bfloat162_rn(x2.x * c.x + x1.x * s.x, x2.y * c.y + x1.y * s.y);
  } else {
    const int d = kRot + 4 * (lane - 16);
    *reinterpret_cast<uint2*>(dst + d) = *reinterpret_cast<const uint2*>(src + d);
  }
}
