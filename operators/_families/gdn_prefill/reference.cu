/* kharness
{
  "launches": [
    { "kernel": "gdn_prefill_reference",
      "grid": ["num_v_heads", "num_seqs", 1],
      "block": [128, 1, 1],
      "shared_bytes": "head_size * head_size * 4",
      "args": ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens", "scale",
               "output", "new_state", "num_seqs", "num_q_heads", "num_k_heads", "num_v_heads",
               "head_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every gdn_prefill_* definition (family "gdn_prefill"), FlashInfer-Bench
// op_type "gdn" prefill semantics (variable-length sequences, k-last state layout). Sequence n
// owns tokens cu_seqlens[n] .. cu_seqlens[n+1] (int64). For each value head h, with
// S[k][v] = state[n, h, v, k] (k-last: K innermost) and K = V = head_size, every token t of the
// sequence in order applies the decode step:
//   qh = q[t, h / (num_v_heads / num_q_heads)], kh = k[t, h / (num_v_heads / num_k_heads)]
//   g    = exp(-exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]))     (softplus(x) = x for x > 20)
//   beta = sigmoid(b[t, h])
//   old[k][v] = g * S[k][v];  old_v[v] = sum_k kh[k] * old[k][v]
//   new_v[v]  = beta * v[t, h, v] + (1 - beta) * old_v[v]
//   S[k][v]   = old[k][v] - kh[k] * old_v[v] + kh[k] * new_v[v]
//   output[t, h, v] = bf16( scale * sum_k qh[k] * S[k][v] )          (one rounding)
// and new_state[n, h, v, k] = S[k][v] after the last token. A sequence with no tokens gets
// new_state 0 (not its input state), as in FlashInfer-Bench's reference. scale == 0 means
// 1/sqrt(head_size).
// Written to be obviously correct, not fast: one block per (value head, sequence); each thread
// owns whole value columns v of S, which are independent of each other in this recurrence, and
// keeps them in dynamic shared memory laid out [k][v] (consecutive threads, consecutive words);
// every step runs the formulas above literally in float32, in increasing k. No thread reads
// another's column, so the block needs no synchronisation.
#include <cuda_bf16.h>

__device__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

extern "C" __global__ void gdn_prefill_reference(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const float* state,
    const float* A_log, const __nv_bfloat16* a, const float* dt_bias, const __nv_bfloat16* b,
    const long long* cu_seqlens, float scale, __nv_bfloat16* output, float* new_state, int num_seqs,
    int num_q_heads, int num_k_heads, int num_v_heads, int head_size) {
  extern __shared__ float s[];  // S[k][v] at s[k * head_size + v]
  const int h = blockIdx.x;
  const int n = blockIdx.y;
  if (h >= num_v_heads || n >= num_seqs) return;
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(head_size));
  const int qh = h / (num_v_heads / num_q_heads);
  const int kh = h / (num_v_heads / num_k_heads);
  const long long begin = cu_seqlens[n];
  const long long end = cu_seqlens[n + 1];
  const size_t matrix = (static_cast<size_t>(n) * num_v_heads + h) * head_size * head_size;

  for (int vv = threadIdx.x; vv < head_size; vv += blockDim.x) {
    if (end <= begin) {
      for (int kk = 0; kk < head_size; ++kk) {
        new_state[matrix + static_cast<size_t>(vv) * head_size + kk] = 0.0f;
      }
      continue;
    }
    for (int kk = 0; kk < head_size; ++kk) {
      s[kk * head_size + vv] = state[matrix + static_cast<size_t>(vv) * head_size + kk];
    }
    for (long long t = begin; t < end; ++t) {
      const __nv_bfloat16* q_row = q + (static_cast<size_t>(t) * num_q_heads + qh) * head_size;
      const __nv_bfloat16* k_row = k + (static_cast<size_t>(t) * num_k_heads + kh) * head_size;
      const size_t token_head = static_cast<size_t>(t) * num_v_heads + h;
      const float x = __bfloat162float(a[token_head]) + dt_bias[h];
      const float g = expf(-expf(A_log[h]) * softplus_ref(x));
      const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));

      float old_v = 0.0f;
      for (int kk = 0; kk < head_size; ++kk) {
        old_v += __bfloat162float(k_row[kk]) * (g * s[kk * head_size + vv]);
      }
      const float new_v =
          beta * __bfloat162float(v[token_head * head_size + vv]) + (1.0f - beta) * old_v;
      float o = 0.0f;
      for (int kk = 0; kk < head_size; ++kk) {
        const float kf = __bfloat162float(k_row[kk]);
        const float updated = g * s[kk * head_size + vv] - kf * old_v + kf * new_v;
        s[kk * head_size + vv] = updated;
        o += __bfloat162float(q_row[kk]) * updated;
      }
      output[token_head * head_size + vv] = __float2bfloat16_rn(scale * o);
    }
    for (int kk = 0; kk < head_size; ++kk) {
      new_state[matrix + static_cast<size_t>(vv) * head_size + kk] = s[kk * head_size + vv];
    }
  }
}
