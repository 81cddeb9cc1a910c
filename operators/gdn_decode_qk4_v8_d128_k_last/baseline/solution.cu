/* kharness
{
  "definition": "gdn_decode_qk4_v8_d128_k_last",
  "launches": [
    { "kernel": "gdn_decode_baseline",
      "grid": ["num_v_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "scale", "output",
               "new_state"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for gdn_decode_qk4_v8_d128_k_last: the straightforward hand-written kernel speedups
// are measured against. One block of 4 warps per (value head, sequence); each warp walks every
// 4th value row of the k-last state, one row at a time: a lane holds 4 consecutive k (one
// coalesced float4 load per lane), k . S and q . S' are warp-shuffle reductions.
#include <cuda_bf16.h>

constexpr int kHeadSize = 128;
constexpr int kQkHeads = 4;
constexpr int kVHeads = 8;
constexpr int kGroup = kVHeads / kQkHeads;

__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

extern "C" __global__ void gdn_decode_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                               const __nv_bfloat16* v, const float* state,
                                               const float* A_log, const __nv_bfloat16* a,
                                               const float* dt_bias, const __nv_bfloat16* b,
                                               float scale, __nv_bfloat16* output,
                                               float* new_state) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (scale == 0.0f) scale = rsqrtf(static_cast<float>(kHeadSize));
  const size_t token_head = static_cast<size_t>(seq) * kVHeads + h;
  const size_t matrix = token_head * kHeadSize * kHeadSize;
  const size_t qk_row = (static_cast<size_t>(seq) * kQkHeads + h / kGroup) * kHeadSize;

  float kf[4], qf[4];
  for (int j = 0; j < 4; ++j) {
    kf[j] = __bfloat162float(k[qk_row + 4 * lane + j]);
    qf[j] = __bfloat162float(q[qk_row + 4 * lane + j]);
  }
  const float x = __bfloat162float(a[token_head]) + dt_bias[h];
  const float g = expf(-expf(A_log[h]) * (x > 20.0f ? x : log1pf(expf(x))));
  const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));

  for (int row = warp; row < kHeadSize; row += 4) {
    const size_t base = matrix + static_cast<size_t>(row) * kHeadSize + 4 * lane;
    const float4 s = *reinterpret_cast<const float4*>(state + base);
    const float old_v = g * warp_sum(kf[0] * s.x + kf[1] * s.y + kf[2] * s.z + kf[3] * s.w);
    const float new_v =
        beta * __bfloat162float(v[token_head * kHeadSize + row]) + (1.0f - beta) * old_v;
    float4 u;
    u.x = g * s.x + kf[0] * (new_v - old_v);
    u.y = g * s.y + kf[1] * (new_v - old_v);
    u.z = g * s.z + kf[2] * (new_v - old_v);
    u.w = g * s.w + kf[3] * (new_v - old_v);
    *reinterpret_cast<float4*>(new_state + base) = u;
    const float o = warp_sum(qf[0] * u.x + qf[1] * u.y + qf[2] * u.z + qf[3] * u.w);
    if (lane == 0) output[token_head * kHeadSize + row] = __float2bfloat16_rn(scale * o);
  }
}
