// The mla_paged_decode families' reference kernel (also the mla_paged_decode_ps64 seed, renamed),
// inlined where their reference.cu or seed.cu includes it. The family's file defines, before the
// include, KB_LAST_PAGE_LEN (1: the definitions take kv_last_page_len, the last page of a request
// holds that many tokens; 0: every page is full) and KB_KERNEL, the kernel's name.
#if !defined(KB_LAST_PAGE_LEN) || !defined(KB_KERNEL)
#error "define KB_LAST_PAGE_LEN and KB_KERNEL before this text"
#endif
// Trusted reference for every mla_paged_decode_* definition (family "mla_paged_decode"),
// FlashInfer-Bench op_type "mla_paged" decode semantics (DeepSeek-V3 multi-head latent attention
// in its absorbed form: one compressed latent per token is both key and value, shared by every
// query head):
//   request b owns the pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]); every slot of each page
//   is one token (token order: page order, then slot order), but with KB_LAST_PAGE_LEN 1
//   (FlashInfer-Bench's *_ps64 decode definitions) the last page holds kv_last_page_len[b].
//   Caches ckv_cache[page, slot, c] and kpe_cache[page, slot, p].
//   logit[t] = sm_scale * (sum_c q_nope[b, h, c] * ckv[t, c] + sum_p q_pe[b, h, p] * kpe[t, p])
//   output[b, h, :] = bf16( sum_t softmax(logit)[t] * ckv[t, :] )       (one rounding)
//   lse[b, h] = log2( sum_t exp(logit[t]) ) = logsumexp(logit) / ln 2    (float32, base 2)
//   A request with no tokens gets output 0 and lse = -inf, as in FlashInfer-Bench's reference.
// Written to be obviously correct, not fast: one block of kThreads threads per (query head,
// request), every size an argument, three passes over the request's tokens (max, sum of
// exponentials, weighted sum of the latents) that recompute the logits, and fixed shared-memory
// tree reductions, so the result is deterministic. Logits are computed one thread per token
// (serial dot products in float32); for the output pass the block stages kThreads probabilities
// at a time in shared memory and each thread owns one output dimension.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

// The cache row (in units of tokens) of token `t` of a request whose pages start at `pages`.
__device__ __forceinline__ size_t token_row(const int* pages, int t, int page_size) {
  return static_cast<size_t>(pages[t / page_size]) * page_size + t % page_size;
}

__device__ float logit_of(const __nv_bfloat16* qn, const __nv_bfloat16* qp,
                          const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                          size_t row, int head_dim_ckv, int head_dim_kpe, float sm_scale) {
  float dot = 0.0f;
  for (int c = 0; c < head_dim_ckv; ++c) {
    dot += __bfloat162float(qn[c]) * __bfloat162float(ckv_cache[row * head_dim_ckv + c]);
  }
  for (int p = 0; p < head_dim_kpe; ++p) {
    dot += __bfloat162float(qp[p]) * __bfloat162float(kpe_cache[row * head_dim_kpe + p]);
  }
  return dot * sm_scale;
}

extern "C" __global__ void KB_KERNEL(
    const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe, const __nv_bfloat16* ckv_cache,
    const __nv_bfloat16* kpe_cache, const int* kv_indptr, const int* kv_indices,
#if KB_LAST_PAGE_LEN
    const int* kv_last_page_len,
#endif
    float sm_scale, __nv_bfloat16* output, float* lse, int batch_size, int num_qo_heads,
    int head_dim_ckv, int head_dim_kpe, int page_size) {
  __shared__ float red[kThreads];
  __shared__ float probs[kThreads];

  const int h = blockIdx.x;
  const int b = blockIdx.y;
  if (h >= num_qo_heads || b >= batch_size) return;
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
  const size_t bh = static_cast<size_t>(b) * num_qo_heads + h;
  const __nv_bfloat16* qn = q_nope + bh * head_dim_ckv;
  const __nv_bfloat16* qp = q_pe + bh * head_dim_kpe;
  __nv_bfloat16* out_row = output + bh * head_dim_ckv;

  if (num_tokens == 0) {
    for (int c = threadIdx.x; c < head_dim_ckv; c += kThreads) {
      out_row[c] = __float2bfloat16_rn(0.0f);
    }
    if (threadIdx.x == 0) lse[bh] = neg_inf();
    return;
  }

  // 1. Maximum logit.
  float m = neg_inf();
  for (int t = threadIdx.x; t < num_tokens; t += kThreads) {
    const size_t row = token_row(pages, t, page_size);
    m = fmaxf(m, logit_of(qn, qp, ckv_cache, kpe_cache, row, head_dim_ckv, head_dim_kpe, sm_scale));
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
    const size_t row = token_row(pages, t, page_size);
    s += expf(logit_of(qn, qp, ckv_cache, kpe_cache, row, head_dim_ckv, head_dim_kpe, sm_scale) -
              max_logit);
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)
  __syncthreads();

  // 3. output[c] = sum_t exp(logit_t - max) * ckv[t, c] / sum, kThreads tokens at a time.
  for (int c0 = 0; c0 < head_dim_ckv; c0 += kThreads) {
    const int c = c0 + threadIdx.x;
    float acc = 0.0f;
    for (int t0 = 0; t0 < num_tokens; t0 += kThreads) {
      const int t = t0 + threadIdx.x;
      if (t < num_tokens) {
        const size_t row = token_row(pages, t, page_size);
        probs[threadIdx.x] =
            expf(logit_of(qn, qp, ckv_cache, kpe_cache, row, head_dim_ckv, head_dim_kpe, sm_scale) -
                 max_logit);
      }
      __syncthreads();
      const int chunk = min(kThreads, num_tokens - t0);
      if (c < head_dim_ckv) {
        for (int j = 0; j < chunk; ++j) {
          const size_t row = token_row(pages, t0 + j, page_size);
          acc += probs[j] * __bfloat162float(ckv_cache[row * head_dim_ckv + c]);
        }
      }
      __syncthreads();
    }
    if (c < head_dim_ckv) out_row[c] = __float2bfloat16_rn(acc / sum);
  }

  // 4. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) lse[bh] = (max_logit + logf(sum)) * 1.4426950408889634f;
}
