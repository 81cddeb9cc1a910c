// Seed for every mla_paged_prefill_causal_* definition (page size 1 ones included): the family
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

// kv_last_page_len: nullptr when every page is full (page size 1).
__device__ void mla_paged_prefill(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                  const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                                  const int* qo_indptr, const int* kv_indptr, const int* kv_indices,
                                  const int* kv_last_page_len, float sm_scale,
                                  __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
                                  int head_dim_ckv, int head_dim_kpe, int page_size,
                                  int len_indptr) {
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

  attend(
      num_tokens, head_dim_ckv, logit,
      [&](int t, int d) { return __bfloat162float(ckv_cache[slot_of(t) * head_dim_ckv + d]); },
      out_row, lse + qh);
}
