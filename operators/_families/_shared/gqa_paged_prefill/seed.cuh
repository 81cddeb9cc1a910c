// Seed for every gqa_paged_prefill_causal_* definition (page size 1 ones included): the family
// reference's indexing (see its reference.cu for the semantics, transcribed from FlashInfer-Bench's
// reference text), with the three passes over the visible tokens replaced by one online-softmax
// pass that computes each logit once. A correct, simple starting point: one block of kThreads
// threads per (query head, query row), no tensor cores, no reuse of K/V across query rows or heads.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

// The one pass every seed of the prefill families shares: the visible tokens in chunks of
// kThreads, each thread computing one token's logit, a running maximum m and sum of exp(logit - m)
// rescaled when m grows (online softmax), each thread accumulating kMaxDims output dimensions.
constexpr int kMaxDims = 4;  // output dimensions per thread: vo_dim <= kThreads * kMaxDims (512)

template <class Logit, class Value>
__device__ void attend(int num_tokens, int vo_dim, Logit logit, Value value,
                       __nv_bfloat16* out_row, float* lse_out) {
  __shared__ float red[kThreads];
  __shared__ float probs[kThreads];
  float acc[kMaxDims];
  for (int k = 0; k < kMaxDims; ++k) acc[k] = 0.0f;
  float m = neg_inf(), sum = 0.0f;
  for (int c = 0; c < num_tokens; c += kThreads) {
    const int t = c + threadIdx.x;
    const float l = t < num_tokens ? logit(t) : neg_inf();
    red[threadIdx.x] = l;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride)
        red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + stride]);
      __syncthreads();
    }
    const float m_new = fmaxf(m, red[0]);  // finite: the chunk holds at least one token
    const float rescale = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    __syncthreads();
    const float p = t < num_tokens ? expf(l - m_new) : 0.0f;
    probs[threadIdx.x] = p;
    red[threadIdx.x] = p;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
      __syncthreads();
    }
    sum = sum * rescale + red[0];
    const int chunk = min(kThreads, num_tokens - c);
    for (int k = 0; k < kMaxDims; ++k) {
      const int d = threadIdx.x + k * kThreads;
      if (d >= vo_dim) break;
      float a = acc[k] * rescale;
      for (int j = 0; j < chunk; ++j) a += probs[j] * value(c + j, d);
      acc[k] = a;
    }
    m = m_new;
    __syncthreads();  // red and probs are rewritten by the next chunk
  }
  for (int k = 0; k < kMaxDims; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < vo_dim) out_row[d] = __float2bfloat16_rn(acc[k] / sum);
  }
  if (threadIdx.x == 0) *lse_out = (m + logf(sum)) * 1.4426950408889634f;  // base 2
}

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

  attend(
      num_tokens, head_dim,
      [&](int t) {
        return logit_of(q_row, k_cache, kv_row(pages, t, page_size, num_kv_heads, kv_head, head_dim),
                        head_dim, sm_scale);
      },
      [&](int t, int d) {
        return __bfloat162float(
            v_cache[kv_row(pages, t, page_size, num_kv_heads, kv_head, head_dim) + d]);
      },
      out_row, lse + static_cast<size_t>(row_q) * num_qo_heads + h);
}
