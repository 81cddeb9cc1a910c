// Trusted reference for every mla_paged_prefill_causal_* definition (FlashInfer-Bench op_type
// "mla_paged", prefill; DeepSeek MLA over the compressed KV cache), transcribing FlashInfer-Bench's
// reference text:
//   request b owns the query rows qo_indptr[b] .. qo_indptr[b+1] and the pages
//   kv_indices[kv_indptr[b] .. kv_indptr[b+1]); its KV tokens are the slots of its pages in page
//   order, all page_size slots of every page but the last, which holds kv_last_page_len[b] (page
//   size 1 definitions have no kv_last_page_len). ckv_cache[page, slot, 0..head_dim_ckv),
//   kpe_cache[page, slot, 0..head_dim_kpe), shared by every head.
//   Causal: query i of the request sees tokens t <= i + (kv_len - q_len).
//   logit[t] = sm_scale * (q_nope[row, h] . ckv[t] + q_pe[row, h] . kpe[t])    (float32)
//   output[row, h, :] = bf16( sum_t softmax(logit)[t] * ckv[t, :] )            (one rounding)
//   lse[row, h] = logsumexp(logit) / ln 2                                     (float32, base 2)
//   Requests with no queries or no pages keep output 0 and lse -inf (torch.zeros / full(-inf));
//   so does a query that would see no token (NaN in the reference text; never generated).
// Written to be obviously correct, not fast: one block of kThreads threads per (head, query row),
// three passes over the visible tokens that recompute the logits, fixed tree reductions.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

// kv_last_page_len: nullptr when every page is full (page size 1).
__device__ void mla_paged_prefill(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                  const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                                  const int* qo_indptr, const int* kv_indptr, const int* kv_indices,
                                  const int* kv_last_page_len, float sm_scale,
                                  __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
                                  int head_dim_ckv, int head_dim_kpe, int page_size,
                                  int len_indptr) {
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
  const int num_pages = kv_indptr[b + 1] - kv_indptr[b];
  const int kv_len =
      num_pages <= 0 ? 0
                     : (kv_last_page_len ? (num_pages - 1) * page_size + kv_last_page_len[b]
                                         : num_pages * page_size);
  const int visible = min(kv_len, i + (kv_len - q_len) + 1);  // causal
  const int num_tokens = q_len > 0 && visible > 0 ? visible : 0;
  const int* pages = kv_indices + kv_indptr[b];
  const size_t qh = static_cast<size_t>(row_q) * num_qo_heads + h;
  const __nv_bfloat16* qn = q_nope + qh * head_dim_ckv;
  const __nv_bfloat16* qp = q_pe + qh * head_dim_kpe;
  __nv_bfloat16* out_row = output + qh * head_dim_ckv;
  // Cache slot of token t.
  auto slot_of = [&](int t) {
    return static_cast<size_t>(pages[t / page_size]) * page_size + t % page_size;
  };
  auto logit = [&](int t) {
    const size_t s = slot_of(t);
    float dot = 0.0f;
    for (int d = 0; d < head_dim_ckv; ++d)
      dot += __bfloat162float(qn[d]) * __bfloat162float(ckv_cache[s * head_dim_ckv + d]);
    for (int d = 0; d < head_dim_kpe; ++d)
      dot += __bfloat162float(qp[d]) * __bfloat162float(kpe_cache[s * head_dim_kpe + d]);
    return dot * sm_scale;
  };

  if (num_tokens == 0) {
    for (int d = threadIdx.x; d < head_dim_ckv; d += kThreads)
      out_row[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[qh] = neg_inf();
    return;
  }

  // 1. Maximum logit.
  float m = neg_inf();
  for (int t = threadIdx.x; t < num_tokens; t += kThreads) m = fmaxf(m, logit(t));
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
  for (int t = threadIdx.x; t < num_tokens; t += kThreads) s += expf(logit(t) - max_logit);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)
  __syncthreads();

  // 3. output[d] = sum_t exp(logit_t - max) * ckv[t, d] / sum, kThreads tokens at a time.
  for (int d0 = 0; d0 < head_dim_ckv; d0 += kThreads) {
    const int d = d0 + threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < num_tokens; c += kThreads) {
      const int t = c + threadIdx.x;
      if (t < num_tokens) probs[threadIdx.x] = expf(logit(t) - max_logit);
      __syncthreads();
      const int chunk = min(kThreads, num_tokens - c);
      if (d < head_dim_ckv) {
        for (int j = 0; j < chunk; ++j)
          acc += probs[j] * __bfloat162float(ckv_cache[slot_of(c + j) * head_dim_ckv + d]);
      }
      __syncthreads();
    }
    if (d < head_dim_ckv) out_row[d] = __float2bfloat16_rn(acc / sum);
  }

  // 4. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) lse[qh] = (max_logit + logf(sum)) * 1.4426950408889634f;
}
