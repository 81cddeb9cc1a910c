/* kharness
{
  "definition": "gdn_prefill_qk4_v8_d128_k_last",
  "launches": [
    { "kernel": "gdn_prefill_baseline",
      "grid": ["head_size / 32", "num_v_heads", "num_seqs"],
      "block": [32, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens", "scale",
               "output", "new_state"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for gdn_prefill_qk4_v8_d128_k_last: the straightforward hand-written kernel speedups
// are measured against. The recurrent form, one thread per value column of the state: a warp
// handles 32 value rows of the k-last state of one (value head, sequence), each thread keeps its
// row (128 floats) in registers for the whole sequence and, token by token, reads k and q (the
// same addresses across the warp: broadcast loads) and computes k . S, the update and q . S'
// serially. An empty sequence writes new_state 0.
#include <cuda_bf16.h>

constexpr int kHeadSize = 128;
constexpr int kQkHeads = 4;
constexpr int kVHeads = 8;
constexpr int kGroup = kVHeads / kQkHeads;

extern "C" __global__ void __launch_bounds__(32)
    gdn_prefill_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         const float* state, const float* A_log, const __nv_bfloat16* a,
                         const float* dt_bias, const __nv_bfloat16* b, const long long* cu_seqlens,
                         float scale, __nv_bfloat16* output, float* new_state) {
  const int h = blockIdx.y;
  const int n = blockIdx.z;
  const int row = blockIdx.x * 32 + threadIdx.x;
  if (scale == 0.0f) scale = rsqrtf(static_cast<float>(kHeadSize));
  const long long begin = cu_seqlens[n];
  const long long end = cu_seqlens[n + 1];
  float* out_row =
      new_state + ((static_cast<size_t>(n) * kVHeads + h) * kHeadSize + row) * kHeadSize;
  const float* in_row =
      state + ((static_cast<size_t>(n) * kVHeads + h) * kHeadSize + row) * kHeadSize;

  float s[kHeadSize];
#pragma unroll
  for (int j = 0; j < kHeadSize; ++j) s[j] = end > begin ? in_row[j] : 0.0f;

  const float A = expf(A_log[h]);
  for (long long t = begin; t < end; ++t) {
    const size_t qk_row = (static_cast<size_t>(t) * kQkHeads + h / kGroup) * kHeadSize;
    const size_t token_head = static_cast<size_t>(t) * kVHeads + h;
    const float x = __bfloat162float(a[token_head]) + dt_bias[h];
    const float g = expf(-A * (x > 20.0f ? x : log1pf(expf(x))));
    const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));
    float ks = 0.0f;
#pragma unroll
    for (int j = 0; j < kHeadSize; ++j) ks += __bfloat162float(k[qk_row + j]) * s[j];
    const float old_v = g * ks;
    const float delta = beta * (__bfloat162float(v[token_head * kHeadSize + row]) - old_v);
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < kHeadSize; ++j) {
      s[j] = g * s[j] + __bfloat162float(k[qk_row + j]) * delta;
      o += __bfloat162float(q[qk_row + j]) * s[j];
    }
    output[token_head * kHeadSize + row] = __float2bfloat16_rn(scale * o);
  }
#pragma unroll
  for (int j = 0; j < kHeadSize; ++j) out_row[j] = s[j];
}
