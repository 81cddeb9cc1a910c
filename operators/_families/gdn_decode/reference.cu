/* kharness
{
  "launches": [
    { "kernel": "gdn_decode_reference",
      "grid": ["num_v_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "scale", "output",
               "new_state", "batch_size", "num_q_heads", "num_k_heads", "num_v_heads",
               "head_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every gdn_decode_* definition (family "gdn_decode"), FlashInfer-Bench
// op_type "gdn" decode semantics (one token per sequence, k-last state layout). Per sequence b
// and value head h (K = V = head_size):
//   qh = q[b, 0, h / (num_v_heads / num_q_heads)], kh = k[b, 0, h / (num_v_heads / num_k_heads)]
//   g    = exp(-exp(A_log[h]) * softplus(a[b, 0, h] + dt_bias[h]))    (softplus(x) = x for x > 20)
//   beta = sigmoid(b[b, 0, h])
//   S[k][v] = state[b, h, v, k]                                        (k-last: K innermost)
//   old[k][v]  = g * S[k][v]
//   old_v[v]   = sum_k kh[k] * old[k][v]
//   new_v[v]   = beta * v[b, 0, h, v] + (1 - beta) * old_v[v]
//   S'[k][v]   = old[k][v] - kh[k] * old_v[v] + kh[k] * new_v[v]
//   new_state[b, h, v, k] = S'[k][v]                                   (float32)
//   output[b, 0, h, v]    = bf16( scale * sum_k qh[k] * S'[k][v] )      (one rounding)
// scale == 0 means 1/sqrt(head_size), as in FlashInfer-Bench's reference.
// Written to be obviously correct, not fast: one block per (value head, sequence); each thread
// owns whole value rows v (a row of the k-last state is contiguous in K) and runs the formulas
// above literally in float32, in increasing k, with no communication between threads.
#include <cuda_bf16.h>

__device__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

extern "C" __global__ void gdn_decode_reference(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                const __nv_bfloat16* v, const float* state,
                                                const float* A_log, const __nv_bfloat16* a,
                                                const float* dt_bias, const __nv_bfloat16* b,
                                                float scale, __nv_bfloat16* output,
                                                float* new_state, int batch_size, int num_q_heads,
                                                int num_k_heads, int num_v_heads, int head_size) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  if (h >= num_v_heads || seq >= batch_size) return;
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(head_size));
  const int qh = h / (num_v_heads / num_q_heads);
  const int kh = h / (num_v_heads / num_k_heads);
  const size_t token_head = static_cast<size_t>(seq) * num_v_heads + h;  // [b, 0, h]
  const __nv_bfloat16* q_row = q + (static_cast<size_t>(seq) * num_q_heads + qh) * head_size;
  const __nv_bfloat16* k_row = k + (static_cast<size_t>(seq) * num_k_heads + kh) * head_size;
  const __nv_bfloat16* v_row = v + token_head * head_size;

  const float x = __bfloat162float(a[token_head]) + dt_bias[h];
  const float g = expf(-expf(A_log[h]) * softplus_ref(x));
  const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));

  const size_t matrix = token_head * head_size * head_size;  // state[b, h]
  for (int vv = threadIdx.x; vv < head_size; vv += blockDim.x) {
    const float* s_row = state + matrix + static_cast<size_t>(vv) * head_size;  // S[:, vv]
    float* out_row = new_state + matrix + static_cast<size_t>(vv) * head_size;
    float old_v = 0.0f;
    for (int kk = 0; kk < head_size; ++kk) {
      old_v += __bfloat162float(k_row[kk]) * (g * s_row[kk]);
    }
    const float new_v = beta * __bfloat162float(v_row[vv]) + (1.0f - beta) * old_v;
    float o = 0.0f;
    for (int kk = 0; kk < head_size; ++kk) {
      const float kf = __bfloat162float(k_row[kk]);
      const float updated = g * s_row[kk] - kf * old_v + kf * new_v;
      out_row[kk] = updated;
      o += __bfloat162float(q_row[kk]) * updated;
    }
    output[token_head * head_size + vv] = __float2bfloat16_rn(scale * o);
  }
}
