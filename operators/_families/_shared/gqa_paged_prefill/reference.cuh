// Trusted reference for every gqa_paged_prefill_causal_* definition (FlashInfer-Bench op_type
// "gqa_paged", prefill), transcribing FlashInfer-Bench's reference text:
//   request b owns the query rows qo_indptr[b] .. qo_indptr[b+1] and the pages
//   kv_indices[kv_indptr[b] .. kv_indptr[b+1]); its KV tokens are the slots of its pages in page
//   order, all page_size slots of every page but the last, which holds kv_last_page_len[b] (page
//   size 1 definitions have no kv_last_page_len: every page holds its one token).
//   Cache layout k_cache[page, slot, kv_head, d] (same for v_cache); q head h reads kv head
//   h / (num_qo_heads / num_kv_heads) (repeat_interleave of the kv heads).
//   Causal: query i of the request (0-based) sees tokens t <= i + (kv_len - q_len).
//   logit[t] = sm_scale * sum_d q[row, h, d] * k[t, kvh, d]                   (float32)
//   output[row, h, :] = bf16( sum_t softmax(logit)[t] * v[t, kvh, :] )         (one rounding)
//   lse[row, h] = logsumexp(logit) / ln 2                                     (float32, base 2)
//   A request with no queries or no pages is skipped: its rows keep output 0 and lse -inf, as in
//   the reference's torch.zeros / torch.full(-inf). A query that would see no token (more queries
//   than tokens, which FlashInfer-Bench's reference turns into NaN and the generators never make)
//   gets the same 0 / -inf.
// Written to be obviously correct, not fast: one block of kThreads threads per (q head, query
// row), every size an argument, three passes over the visible tokens (max, sum of exponentials,
// weighted sum of V) that recompute the logits, and fixed shared-memory tree reductions, so the
// result is deterministic.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

__device__ __forceinline__ size_t kv_row(const int* pages, int t, int page_size, int num_kv_heads,
                                         int kv_head, int head_dim) {
  const int page = pages[t / page_size];
  const int slot = t % page_size;
  return ((static_cast<size_t>(page) * page_size + slot) * num_kv_heads + kv_head) *
         static_cast<size_t>(head_dim);
}

__device__ float logit_of(const __nv_bfloat16* q_row, const __nv_bfloat16* k_cache, size_t row,
                          int head_dim, float sm_scale) {
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) {
    dot += __bfloat162float(q_row[d]) * __bfloat162float(k_cache[row + d]);
  }
  return dot * sm_scale;
}

// kv_last_page_len: nullptr when every page is full (page size 1).
__device__ void gqa_paged_prefill(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                  const __nv_bfloat16* v_cache, const int* qo_indptr,
                                  const int* kv_indptr, const int* kv_indices,
                                  const int* kv_last_page_len, float sm_scale,
                                  __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
                                  int num_kv_heads, int head_dim, int page_size, int len_indptr) {
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
  const int kv_head = h / (num_qo_heads / num_kv_heads);
  const int* pages = kv_indices + kv_indptr[b];
  const __nv_bfloat16* q_row = q + (static_cast<size_t>(row_q) * num_qo_heads + h) * head_dim;
  __nv_bfloat16* out_row = output + (static_cast<size_t>(row_q) * num_qo_heads + h) * head_dim;

  if (num_tokens == 0) {
    for (int d = threadIdx.x; d < head_dim; d += kThreads) out_row[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[static_cast<size_t>(row_q) * num_qo_heads + h] = neg_inf();
    return;
  }

  // 1. Maximum logit.
  float m = neg_inf();
  for (int t = threadIdx.x; t < num_tokens; t += kThreads) {
    const size_t row = kv_row(pages, t, page_size, num_kv_heads, kv_head, head_dim);
    m = fmaxf(m, logit_of(q_row, k_cache, row, head_dim, sm_scale));
  }
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
  for (int t = threadIdx.x; t < num_tokens; t += kThreads) {
    const size_t row = kv_row(pages, t, page_size, num_kv_heads, kv_head, head_dim);
    s += expf(logit_of(q_row, k_cache, row, head_dim, sm_scale) - max_logit);
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)
  __syncthreads();

  // 3. output[d] = sum_t exp(logit_t - max) * v[t, d] / sum, a chunk of kThreads tokens at a time.
  for (int d0 = 0; d0 < head_dim; d0 += kThreads) {
    const int d = d0 + threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < num_tokens; c += kThreads) {
      const int t = c + threadIdx.x;
      if (t < num_tokens) {
        const size_t row = kv_row(pages, t, page_size, num_kv_heads, kv_head, head_dim);
        probs[threadIdx.x] = expf(logit_of(q_row, k_cache, row, head_dim, sm_scale) - max_logit);
      }
      __syncthreads();
      const int chunk = min(kThreads, num_tokens - c);
      if (d < head_dim) {
        for (int j = 0; j < chunk; ++j) {
          const size_t row = kv_row(pages, c + j, page_size, num_kv_heads, kv_head, head_dim);
          acc += probs[j] * __bfloat162float(v_cache[row + d]);
        }
      }
      __syncthreads();
    }
    if (d < head_dim) out_row[d] = __float2bfloat16_rn(acc / sum);
  }

  // 4. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) {
    lse[static_cast<size_t>(row_q) * num_qo_heads + h] = (max_logit + logf(sum)) * 1.4426950408889634f;
  }
}
