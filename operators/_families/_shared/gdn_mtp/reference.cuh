// The gdn_mtp family's reference kernels, which its seed also is with the kernels renamed: the
// family's reference.cu and seed.cu define KB_KERNEL(name) (gdn_mtp_reference_<name>,
// gdn_mtp_seed_<name>), then include this text (inlined when it is loaded).
#ifndef KB_KERNEL
#error "define KB_KERNEL(name) before this text"
#endif
// Per sequence b, its state slot p = initial_state_indices[b], and value head h (K = V =
// head_size):
//   S[k][v] = initial_state[p, h, v, k]                                 (k-last: K innermost)
//   for each token t in order:
//     qh = q[b, t, h / (num_v_heads / num_q_heads)], kh = k[b, t, h / (num_v_heads / num_k_heads)]
//     g    = exp(-exp(A_log[h]) * softplus(a[b, t, h] + dt_bias[h]))  (softplus(x) = x for x > 20)
//     beta = sigmoid(b[b, t, h])
//     old[k][v] = g * S[k][v];  old_v[v] = sum_k kh[k] * old[k][v]
//     new_v[v]  = beta * v[b, t, h, v] + (1 - beta) * old_v[v]
//     S[k][v]   = old[k][v] - kh[k] * old_v[v] + kh[k] * new_v[v]           (float32)
//     output[b, t, h, v] = bf16( scale * sum_k qh[k] * S[k][v] )            (one rounding)
//   final_state = initial_state, unchanged (the reference text returns a clone of it: FlashInfer's
//   disable_state_update=True), for every pool entry.
// intermediate_states_buffer is an input the reference text fills as a side effect; an input
// must not change here (docs/correctness.md#poison-and-guards), so it is neither read nor
// written. scale == 0 means 1/sqrt(head_size). Written to be obviously correct, not fast: one block per (value head,
// sequence), each thread owning whole value rows v (a k-last row is contiguous in K) of the
// state in local memory, the formulas above literally in float32, in increasing k; then one
// thread per element copies the state pool to final_state.
#include <cuda_bf16.h>

constexpr int kMaxHead = 256;  // largest head_size a thread's state row holds

__device__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

extern "C" __global__ void KB_KERNEL(tokens)(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
    const float* initial_state, const int* initial_state_indices, const float* A_log,
    const __nv_bfloat16* a, const float* dt_bias, const __nv_bfloat16* b, float scale,
    __nv_bfloat16* output, int batch_size, int seq_len, int num_q_heads, int num_k_heads,
    int num_v_heads, int head_size) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  if (h >= num_v_heads || seq >= batch_size || head_size > kMaxHead) return;
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(head_size));
  const int qh = h / (num_v_heads / num_q_heads);
  const int kh = h / (num_v_heads / num_k_heads);
  const size_t matrix =
      (static_cast<size_t>(initial_state_indices[seq]) * num_v_heads + h) * head_size * head_size;
  float s[kMaxHead];
  for (int vv = threadIdx.x; vv < head_size; vv += blockDim.x) {
    const float* s_row = initial_state + matrix + static_cast<size_t>(vv) * head_size;  // S[:, vv]
    for (int kk = 0; kk < head_size; ++kk) s[kk] = s_row[kk];
    for (int t = 0; t < seq_len; ++t) {
      const size_t token = static_cast<size_t>(seq) * seq_len + t;  // [b, t]
      const size_t token_head = token * num_v_heads + h;            // [b, t, h]
      const __nv_bfloat16* q_row = q + (token * num_q_heads + qh) * head_size;
      const __nv_bfloat16* k_row = k + (token * num_k_heads + kh) * head_size;
      const float x = __bfloat162float(a[token_head]) + dt_bias[h];
      const float g = expf(-expf(A_log[h]) * softplus_ref(x));
      const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));
      float old_v = 0.0f;
      for (int kk = 0; kk < head_size; ++kk) old_v += __bfloat162float(k_row[kk]) * (g * s[kk]);
      const float new_v =
          beta * __bfloat162float(v[token_head * head_size + vv]) + (1.0f - beta) * old_v;
      float o = 0.0f;
      for (int kk = 0; kk < head_size; ++kk) {
        const float kf = __bfloat162float(k_row[kk]);
        s[kk] = g * s[kk] - kf * old_v + kf * new_v;
        o += __bfloat162float(q_row[kk]) * s[kk];
      }
      output[token_head * head_size + vv] = __float2bfloat16_rn(scale * o);
    }
  }
}

extern "C" __global__ void KB_KERNEL(final_state)(const float* initial_state,
                                                  float* final_state, int pool_size,
                                                  int num_v_heads, int head_size) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<size_t>(pool_size) * num_v_heads * head_size * head_size)
    final_state[i] = initial_state[i];
}
