/* kharness
{
  "definition": "gdn_prefill_qk4_v8_d128_k_last",
  "launches": [
    { "kernel": "gdn_prefill_kernel",
      "grid": ["head_size / 8", "num_v_heads", "num_seqs"],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens", "scale",
               "output", "new_state"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for gdn_prefill_qk4_v8_d128_k_last: a correct, reasonable starting point (the
// recurrent form, not the chunked one). The value columns of the state are independent in the
// recurrence, so one block of 4 warps handles 8 value rows of the k-last state of one (value
// head, sequence), and each warp keeps its 2 rows in registers for the whole sequence (a lane
// holds 4 consecutive k of each row). Per token the warp needs two dot products with the state:
// q_t . S_t for the output and k_{t+1} . S_t for the next token's update, so both are reduced
// in one interleaved butterfly (4 values), and token t+1's inputs are loaded while token t is
// being computed. The update is S' = g S + k * beta * (v - g (k . S)), algebraically the
// definition's old - k old_v + k new_v. An empty sequence writes new_state 0.
#include <cuda_bf16.h>

constexpr int kHeadSize = 128;
constexpr int kQkHeads = 4;
constexpr int kVHeads = 8;
constexpr int kGroup = kVHeads / kQkHeads;
constexpr int kRows = 2;   // value rows per warp
constexpr int kWarps = 4;  // rows per block: kRows * kWarps = 8

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

// One token's inputs as this lane needs them.
struct Token {
  float4 k, q;
  float v[kRows];
  float g, beta;
};

__device__ __forceinline__ Token load_token(const __nv_bfloat16* __restrict__ q,
                                            const __nv_bfloat16* __restrict__ k,
                                            const __nv_bfloat16* __restrict__ v,
                                            const __nv_bfloat16* __restrict__ a,
                                            const __nv_bfloat16* __restrict__ b, float A,
                                            float bias, long long t, int h, int row0, int lane) {
  Token tok;
  const size_t qk_row = (static_cast<size_t>(t) * kQkHeads + h / kGroup) * kHeadSize + 4 * lane;
  tok.k = load_bf16x4(k + qk_row);
  tok.q = load_bf16x4(q + qk_row);
  const size_t token_head = static_cast<size_t>(t) * kVHeads + h;
  const __nv_bfloat162 vv =
      *reinterpret_cast<const __nv_bfloat162*>(v + token_head * kHeadSize + row0);
  tok.v[0] = __low2float(vv);
  tok.v[1] = __high2float(vv);
  tok.g = expf(-A * softplus(__bfloat162float(a[token_head]) + bias));
  tok.beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));
  return tok;
}

extern "C" __global__ void __launch_bounds__(kWarps * 32)
    gdn_prefill_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                       const __nv_bfloat16* __restrict__ v, const float* __restrict__ state,
                       const float* __restrict__ A_log, const __nv_bfloat16* __restrict__ a,
                       const float* __restrict__ dt_bias, const __nv_bfloat16* __restrict__ b,
                       const long long* __restrict__ cu_seqlens, float scale,
                       __nv_bfloat16* __restrict__ output, float* __restrict__ new_state) {
  const int h = blockIdx.y;
  const int n = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * (kWarps * kRows) + warp * kRows;
  if (scale == 0.0f) scale = rsqrtf(static_cast<float>(kHeadSize));
  const long long begin = cu_seqlens[n];
  const long long end = cu_seqlens[n + 1];
  const size_t matrix = (static_cast<size_t>(n) * kVHeads + h) * kHeadSize * kHeadSize;
  float4* out_rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    out_rows[r] =
        reinterpret_cast<float4*>(new_state + matrix + static_cast<size_t>(row0 + r) * kHeadSize) +
        lane;
  }
  if (end <= begin) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) *out_rows[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }

  float4 s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] = reinterpret_cast<const float4*>(state + matrix +
                                           static_cast<size_t>(row0 + r) * kHeadSize)[lane];
  }
  const float A = expf(A_log[h]);
  const float bias = dt_bias[h];
  Token cur = load_token(q, k, v, a, b, A, bias, begin, h, row0, lane);

  // ks[r] = k_t . S_{t-1}[row r], reduced over the warp.
  float ks[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) ks[r] = dot4(cur.k, s[r]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) ks[r] += __shfl_xor_sync(0xffffffffu, ks[r], off);
  }

  for (long long t = begin; t < end; ++t) {
    const bool has_next = t + 1 < end;
    Token nxt = cur;
    if (has_next) nxt = load_token(q, k, v, a, b, A, bias, t + 1, h, row0, lane);

    float red[2 * kRows];  // q_t . S_t, then k_{t+1} . S_t, per row
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float old_v = cur.g * ks[r];
      const float delta = cur.beta * (cur.v[r] - old_v);  // new_v - old_v
      s[r].x = cur.g * s[r].x + cur.k.x * delta;
      s[r].y = cur.g * s[r].y + cur.k.y * delta;
      s[r].z = cur.g * s[r].z + cur.k.z * delta;
      s[r].w = cur.g * s[r].w + cur.k.w * delta;
      red[r] = dot4(cur.q, s[r]);
      red[kRows + r] = dot4(nxt.k, s[r]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
      for (int i = 0; i < 2 * kRows; ++i) red[i] += __shfl_xor_sync(0xffffffffu, red[i], off);
    }
    if (lane == 0) {
      const size_t token_head = static_cast<size_t>(t) * kVHeads + h;
      *reinterpret_cast<__nv_bfloat162*>(output + token_head * kHeadSize + row0) =
          __floats2bfloat162_rn(scale * red[0], scale * red[1]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) ks[r] = red[kRows + r];
    cur = nxt;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) *out_rows[r] = s[r];
}
