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
// result is deterministic. Thread j of the block computes the logit of token c + j of each tile
// of kThreads tokens (c = 0, kThreads, ...) as one float32 multiply-add per d in increasing d;
// the tile's K rows are first copied, coalesced, a warp per row, into shared memory as float
// (a row every head_dim + 1 floats, so the threads reading one d of different rows hit different
// banks), with each token's cache row looked up once. Reading K row by row from global memory,
// each thread its own row, was 32 scattered loads per warp instruction: the logits are the same
// numbers, in the same order, either way.
#include <cuda_bf16.h>

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)
// The plan's dynamic shared memory: the K tile and the query row, as float.
//   shared_bytes = (kThreads * (head_dim + 1) + head_dim) * 4

__device__ __forceinline__ size_t kv_row(const int* pages, int t, int page_size, int num_kv_heads,
                                         int kv_head, int head_dim) {
  const int page = pages[t / page_size];
  const int slot = t % page_size;
  return ((static_cast<size_t>(page) * page_size + slot) * num_kv_heads + kv_head) *
         static_cast<size_t>(head_dim);
}

// The tile of tokens c .. c + chunk - 1: rows[j] = token c + j's cache row (element offset),
// k_tile[j * (head_dim + 1) + d] = its K. Ends with a barrier; the caller puts one before it
// when the previous tile may still be read.
__device__ void load_tile(const __nv_bfloat16* k_cache, const int* pages, int c, int chunk,
                          int page_size, int num_kv_heads, int kv_head, int head_dim,
                          size_t* rows, float* k_tile) {
  if (threadIdx.x < chunk)
    rows[threadIdx.x] = kv_row(pages, c + threadIdx.x, page_size, num_kv_heads, kv_head, head_dim);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = warp; j < chunk; j += kThreads / 32) {
    for (int d = lane; d < head_dim; d += 32) {
      k_tile[j * (head_dim + 1) + d] = __bfloat162float(k_cache[rows[j] + d]);
    }
  }
  __syncthreads();
}

// Token c + threadIdx.x's logit, from the tile: sm_scale * sum_d q[d] * k[d] in float32.
__device__ float tile_logit(const float* q_row, const float* k_tile, int head_dim,
                            float sm_scale) {
  const float* k = k_tile + threadIdx.x * (head_dim + 1);
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) {
    dot += q_row[d] * k[d];
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
  __shared__ size_t rows[kThreads];
  extern __shared__ float dynamic_shared[];
  float* k_tile = dynamic_shared;                           // kThreads x (head_dim + 1)
  float* q_f = dynamic_shared + kThreads * (head_dim + 1);  // head_dim

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
  for (int d = threadIdx.x; d < head_dim; d += kThreads) q_f[d] = __bfloat162float(q_row[d]);

  // 1. Maximum logit.
  float m = neg_inf();
  for (int c = 0; c < num_tokens; c += kThreads) {
    const int chunk = min(kThreads, num_tokens - c);
    __syncthreads();  // the previous tile is read (and q_f written)
    load_tile(k_cache, pages, c, chunk, page_size, num_kv_heads, kv_head, head_dim, rows, k_tile);
    if (threadIdx.x < chunk) m = fmaxf(m, tile_logit(q_f, k_tile, head_dim, sm_scale));
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
  for (int c = 0; c < num_tokens; c += kThreads) {
    const int chunk = min(kThreads, num_tokens - c);
    __syncthreads();
    load_tile(k_cache, pages, c, chunk, page_size, num_kv_heads, kv_head, head_dim, rows, k_tile);
    if (threadIdx.x < chunk) s += expf(tile_logit(q_f, k_tile, head_dim, sm_scale) - max_logit);
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)
  __syncthreads();

  // 3. output[d] = sum_t exp(logit_t - max) * v[t, d] / sum, a tile of kThreads tokens at a time.
  for (int d0 = 0; d0 < head_dim; d0 += kThreads) {
    const int d = d0 + threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < num_tokens; c += kThreads) {
      const int chunk = min(kThreads, num_tokens - c);
      __syncthreads();  // the previous tile and probs are read
      load_tile(k_cache, pages, c, chunk, page_size, num_kv_heads, kv_head, head_dim, rows,
                k_tile);
      if (threadIdx.x < chunk)
        probs[threadIdx.x] = expf(tile_logit(q_f, k_tile, head_dim, sm_scale) - max_logit);
      __syncthreads();
      if (d < head_dim) {
        for (int j = 0; j < chunk; ++j) {
          acc += probs[j] * __bfloat162float(v_cache[rows[j] + d]);
        }
      }
    }
    if (d < head_dim) out_row[d] = __float2bfloat16_rn(acc / sum);
  }

  // 4. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) {
    lse[static_cast<size_t>(row_q) * num_qo_heads + h] = (max_logit + logf(sum)) * 1.4426950408889634f;
  }
}
