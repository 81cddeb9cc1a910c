/* kharness
{
  "definition": "gdn_decode_qk4_v8_d128_k_last",
  "launches": [
    { "kernel": "gdn_decode_kernel",
      "grid": ["head_size / 16", "num_v_heads", "batch_size"],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "scale", "output",
               "new_state"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for gdn_decode_qk4_v8_d128_k_last: a correct, reasonable starting point.
// The operation is memory-bound on the float32 state (64 KiB per (sequence, value head), read
// once and written once). A block of 4 warps handles 16 value rows of one (value head, sequence);
// each warp owns 4 rows, and each lane owns 4 consecutive k of every row, so a row of the k-last
// state is one fully coalesced 512-byte float4 load per warp. The 4 rows' loads are issued before
// any arithmetic, and their warp reductions (k . S row, then q . S' row) are interleaved. The
// update uses S' = g S + k * beta * (v - g (k . S)), algebraically the definition's
// old - k old_v + k new_v.
#include <cuda_bf16.h>

constexpr int kHeadSize = 128;
constexpr int kQkHeads = 4;
constexpr int kVHeads = 8;
constexpr int kGroup = kVHeads / kQkHeads;  // value heads per q/k head
constexpr int kRowsPerWarp = 4;
constexpr int kWarps = 4;

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float4 load_bf16x4(const __nv_bfloat16* p) {
  union {
    uint2 raw;
    __nv_bfloat162 h2[2];
  } u;
  u.raw = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(u.h2[0]);
  const float2 hi = __bfloat1622float2(u.h2[1]);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

extern "C" __global__ void __launch_bounds__(kWarps * 32)
    gdn_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                      const __nv_bfloat16* __restrict__ v, const float* __restrict__ state,
                      const float* __restrict__ A_log, const __nv_bfloat16* __restrict__ a,
                      const float* __restrict__ dt_bias, const __nv_bfloat16* __restrict__ b,
                      float scale, __nv_bfloat16* __restrict__ output,
                      float* __restrict__ new_state) {
  const int h = blockIdx.y;
  const int seq = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * (kWarps * kRowsPerWarp) + warp * kRowsPerWarp;
  if (scale == 0.0f) scale = rsqrtf(static_cast<float>(kHeadSize));

  const size_t token_head = static_cast<size_t>(seq) * kVHeads + h;
  const size_t matrix = token_head * kHeadSize * kHeadSize;

  // State rows first: the bulk of the traffic.
  float4 s[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    s[r] = reinterpret_cast<const float4*>(state + matrix +
                                           static_cast<size_t>(row0 + r) * kHeadSize)[lane];
  }
  const size_t qk_row = (static_cast<size_t>(seq) * kQkHeads + h / kGroup) * kHeadSize;
  const float4 kf = load_bf16x4(k + qk_row + 4 * lane);
  const float4 qf = load_bf16x4(q + qk_row + 4 * lane);
  float vf[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    vf[r] = __bfloat162float(v[token_head * kHeadSize + row0 + r]);
  }
  const float g = expf(-expf(A_log[h]) * softplus(__bfloat162float(a[token_head]) + dt_bias[h]));
  const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));

  float ks[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) ks[r] = dot4(kf, s[r]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) ks[r] += __shfl_xor_sync(0xffffffffu, ks[r], off);
  }

  float qs[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float old_v = g * ks[r];
    const float delta = beta * (vf[r] - old_v);  // new_v - old_v
    float4 u;
    u.x = g * s[r].x + kf.x * delta;
    u.y = g * s[r].y + kf.y * delta;
    u.z = g * s[r].z + kf.z * delta;
    u.w = g * s[r].w + kf.w * delta;
    reinterpret_cast<float4*>(new_state + matrix +
                              static_cast<size_t>(row0 + r) * kHeadSize)[lane] = u;
    qs[r] = dot4(qf, u);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) qs[r] += __shfl_xor_sync(0xffffffffu, qs[r], off);
  }
  if (lane < kRowsPerWarp) {
    float o = qs[0];
#pragma unroll
    for (int r = 1; r < kRowsPerWarp; ++r) o = lane == r ? qs[r] : o;
    output[token_head * kHeadSize + row0 + lane] = __float2bfloat16_rn(scale * o);
  }
}
