// The gqa_paged_decode families' reference kernel (also the gqa_paged_decode_ps64 seed, renamed),
// inlined where their reference.cu or seed.cu includes it. The family's file defines, before the
// include, KB_LAST_PAGE_LEN (1: the definitions take kv_last_page_len, the last page of a request
// holds that many tokens; 0: every page is full) and KB_KERNEL, the kernel's name.
#if !defined(KB_LAST_PAGE_LEN) || !defined(KB_KERNEL)
#error "define KB_LAST_PAGE_LEN and KB_KERNEL before this text"
#endif
// Trusted reference for every gqa_paged_decode_* definition (family "gqa_paged_decode"),
// FlashInfer-Bench op_type "gqa_paged" decode semantics:
//   request b owns the pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]); every slot of each page
//   is one KV token (token order: page order, then slot order), but with KB_LAST_PAGE_LEN 1
//   (FlashInfer-Bench's *_ps64 decode definitions) the last page holds kv_last_page_len[b].
//   Cache layout k_cache[page, slot, kv_head, d] (same for v_cache). q head h reads kv head
//   h / (num_qo_heads / num_kv_heads) (torch repeat_interleave of the kv heads).
//   logit[t] = sm_scale * sum_d q[b, h, d] * k[t, kvh, d]                (float32)
//   output[b, h, :] = bf16( sum_t softmax(logit)[t] * v[t, kvh, :] )      (one rounding)
//   lse[b, h] = log2( sum_t exp(logit[t]) )  = logsumexp(logit) / ln 2     (float32, base 2)
//   A request with no tokens gets output 0 and lse = -inf, as in FlashInfer-Bench's reference.
// Written to be obviously correct, not fast: one block of kThreads threads per (q head, request),
// every size an argument, three passes over the request's tokens (max, sum of exponentials,
// weighted sum of V) that recompute the logits, and fixed shared-memory tree reductions, so the
// result is deterministic. Logits are computed one thread per token (serial dot product in
// float32); for the V pass the block stages kThreads probabilities at a time in shared memory and
// each thread owns one output dimension.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

// The key/value row of token `t` of a request whose pages start at `pages`.
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

extern "C" __global__ void KB_KERNEL(
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
    const int* kv_indptr, const int* kv_indices,
#if KB_LAST_PAGE_LEN
    const int* kv_last_page_len,
#endif
    float sm_scale, __nv_bfloat16* output, float* lse, int batch_size, int num_qo_heads,
    int num_kv_heads, int head_dim, int page_size) {
  __shared__ float red[kThreads];
  __shared__ float probs[kThreads];

  const int h = blockIdx.x;
  const int b = blockIdx.y;
  if (h >= num_qo_heads || b >= batch_size) return;
  const int kv_head = h / (num_qo_heads / num_kv_heads);
  const int page_begin = kv_indptr[b];
  const int page_end = kv_indptr[b + 1];
#if KB_LAST_PAGE_LEN
  // The last page holds kv_last_page_len[b] tokens (1..page_size), every other one page_size.
  const int num_tokens =
      page_end > page_begin ? (page_end - page_begin - 1) * page_size + kv_last_page_len[b] : 0;
#else
  const int num_tokens = page_end > page_begin ? (page_end - page_begin) * page_size : 0;
#endif
  const int* pages = kv_indices + page_begin;
  const __nv_bfloat16* q_row = q + (static_cast<size_t>(b) * num_qo_heads + h) * head_dim;
  __nv_bfloat16* out_row = output + (static_cast<size_t>(b) * num_qo_heads + h) * head_dim;

  if (num_tokens == 0) {
    for (int d = threadIdx.x; d < head_dim; d += kThreads) out_row[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[static_cast<size_t>(b) * num_qo_heads + h] = neg_inf();
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
    lse[static_cast<size_t>(b) * num_qo_heads + h] = (max_logit + logf(sum)) * 1.4426950408889634f;
  }
}
