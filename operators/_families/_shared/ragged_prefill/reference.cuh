// Trusted reference for the ragged causal prefill families (FlashInfer-Bench op_types
// "gqa_ragged" and "mla_ragged"), transcribing FlashInfer-Bench's reference text:
//   request b owns the query rows qo_indptr[b] .. qo_indptr[b+1] and the key/value rows
//   kv_indptr[b] .. kv_indptr[b+1]; k[row, kv_head, 0..qk_dim), v[row, kv_head, 0..vo_dim).
//   q head h reads kv head h / (num_qo_heads / num_kv_heads) (GQA; MLA ragged has as many kv
//   heads as q heads). Causal: query i of the request sees tokens t <= i + (kv_len - q_len).
//   logit[t] = sm_scale * sum_d q[row, h, d] * k[kv_start + t, kvh, d]        (float32)
//   output[row, h, :] = bf16( sum_t softmax(logit)[t] * v[kv_start + t, kvh, :] )
//   lse[row, h] = logsumexp(logit) / ln 2                                     (float32, base 2)
//   A request with no queries or no keys is skipped (output 0, lse -inf, as the reference's
//   torch.zeros / torch.full(-inf)); so is a query that would see no key (more queries than keys,
//   NaN in the reference text; the generators never make it).
// Written to be obviously correct, not fast: one block of kThreads threads per (q head, query
// row), every size an argument, three passes over the visible keys that recompute the logits,
// fixed shared-memory tree reductions (deterministic).
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

__device__ float logit_of(const __nv_bfloat16* q_row, const __nv_bfloat16* k_row, int qk_dim,
                          float sm_scale) {
  float dot = 0.0f;
  for (int d = 0; d < qk_dim; ++d) dot += __bfloat162float(q_row[d]) * __bfloat162float(k_row[d]);
  return dot * sm_scale;
}

extern "C" __global__ void ragged_prefill_reference(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* qo_indptr,
    const int* kv_indptr, float sm_scale, __nv_bfloat16* output, float* lse, int total_q,
    int num_qo_heads, int num_kv_heads, int qk_dim, int vo_dim, int len_indptr) {
  __shared__ float red[kThreads];
  __shared__ float probs[kThreads];

  const int h = blockIdx.x;
  const int row_q = blockIdx.y;
  if (h >= num_qo_heads || row_q >= total_q) return;
  const int batch = len_indptr - 1;
  int b = 0;  // the request whose query rows hold row_q
  while (b + 1 < batch && row_q >= qo_indptr[b + 1]) ++b;
  const int q_len = qo_indptr[b + 1] - qo_indptr[b];
  const int i = row_q - qo_indptr[b];
  const int kv_start = kv_indptr[b];
  const int kv_len = max(kv_indptr[b + 1] - kv_start, 0);
  const int visible = min(kv_len, i + (kv_len - q_len) + 1);  // causal
  const int num_tokens = q_len > 0 && visible > 0 ? visible : 0;
  const int kv_head = h / (num_qo_heads / num_kv_heads);
  const __nv_bfloat16* q_row = q + (static_cast<size_t>(row_q) * num_qo_heads + h) * qk_dim;
  __nv_bfloat16* out_row = output + (static_cast<size_t>(row_q) * num_qo_heads + h) * vo_dim;
  auto k_row = [&](int t) {
    return k + (static_cast<size_t>(kv_start + t) * num_kv_heads + kv_head) * qk_dim;
  };
  auto v_row = [&](int t) {
    return v + (static_cast<size_t>(kv_start + t) * num_kv_heads + kv_head) * vo_dim;
  };

  if (num_tokens == 0) {
    for (int d = threadIdx.x; d < vo_dim; d += kThreads) out_row[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[static_cast<size_t>(row_q) * num_qo_heads + h] = neg_inf();
    return;
  }

  // 1. Maximum logit.
  float m = neg_inf();
  for (int t = threadIdx.x; t < num_tokens; t += kThreads)
    m = fmaxf(m, logit_of(q_row, k_row(t), qk_dim, sm_scale));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + stride]);
    __syncthreads();
  }
  const float max_logit = red[0];
  __syncthreads();

  // 2. Sum of exp(logit - max).
  float s = 0.0f;
  for (int t = threadIdx.x; t < num_tokens; t += kThreads)
    s += expf(logit_of(q_row, k_row(t), qk_dim, sm_scale) - max_logit);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)
  __syncthreads();

  // 3. output[d] = sum_t exp(logit_t - max) * v[t, d] / sum, kThreads tokens at a time.
  for (int d0 = 0; d0 < vo_dim; d0 += kThreads) {
    const int d = d0 + threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < num_tokens; c += kThreads) {
      const int t = c + threadIdx.x;
      if (t < num_tokens) probs[threadIdx.x] = expf(logit_of(q_row, k_row(t), qk_dim, sm_scale) - max_logit);
      __syncthreads();
      const int chunk = min(kThreads, num_tokens - c);
      if (d < vo_dim) {
        for (int j = 0; j < chunk; ++j) acc += probs[j] * __bfloat162float(v_row(c + j)[d]);
      }
      __syncthreads();
    }
    if (d < vo_dim) out_row[d] = __float2bfloat16_rn(acc / sum);
  }

  // 4. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) {
    lse[static_cast<size_t>(row_q) * num_qo_heads + h] = (max_logit + logf(sum)) * 1.4426950408889634f;
  }
}
