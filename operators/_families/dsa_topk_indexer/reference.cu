/* kharness
{
  "launches": [
    { "kernel": "dsa_indexer_scores_reference",
      "grid": ["cdiv(max_num_pages * page_size, 128)", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_index_fp8", "k_index_cache_fp8", "weights", "seq_lens", "block_table",
               "workspace", "batch_size", "num_index_heads", "index_head_dim", "page_size",
               "max_num_pages"] },
    { "kernel": "dsa_indexer_select_reference",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "seq_lens", "block_table", "topk_indices", "batch_size", "page_size",
               "max_num_pages", "topk"] }
  ],
  "workspace_bytes": "batch_size * max_num_pages * page_size * 4",
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every dsa_topk_indexer_* definition (family "dsa_topk_indexer"),
// FlashInfer-Bench op_type "dsa_paged" (DeepSeek-V3.2 lightning indexer) semantics:
//   Request b has seq_len = seq_lens[b] tokens; token position i lives in page
//   block_table[b, i / page_size], slot i % page_size. The key cache is deep_gemm's fp8 layout:
//   per page, page_size * index_head_dim e4m3 bytes (token-major), then page_size float32 scales.
//   K[i, d] = e4m3(k) * scale[i];   q = e4m3 q_index_fp8 (no scale).
//   score[i] = sum_h weights[b, h] * relu( sum_d q[b, h, d] * K[i, d] )          (float32)
//   topk_indices[b, :] = the global token ids (page * page_size + slot) of the min(topk, seq_len)
//   highest scores, then -1 padding.
// Which of several tied scores is kept, and the order of the selected ids, are not part of the
// contract: outputs are compared as sets with a score tie tolerance (comparator "topk_set").
// This reference lists the ids above the threshold in position order, then the tied ones at the
// threshold by lowest position, so it is deterministic (and the seed and baseline list the same
// selection in the same order, so the comparison's byte-equal fast path usually applies).
// Written to be obviously correct, not fast. Kernel 1: one thread per (request, position) computes
// the score with serial float32 dot products into the workspace. Kernel 2: one block per request
// finds the threshold T = the k-th largest score by a 32-step bitwise search over order-preserving
// integer keys (each step counts keys >= candidate with shared-memory atomics), then thread 0
// walks the positions: first every key > T, then keys == T while tie slots remain.
#include <cuda_fp8.h>

// The e4m3 value of a byte (no scale).
__device__ __forceinline__ float e4m3(unsigned char b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}

extern "C" __global__ void dsa_indexer_scores_reference(
    const unsigned char* q_index_fp8, const unsigned char* k_index_cache_fp8, const float* weights,
    const int* seq_lens, const int* block_table, float* scores, int batch_size, int num_index_heads,
    int index_head_dim, int page_size, int max_num_pages) {
  const int b = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch_size) return;
  const int max_tokens = max_num_pages * page_size;
  const int seq_len = min(max(seq_lens[b], 0), max_tokens);
  if (i >= seq_len) return;
  const int page = block_table[static_cast<size_t>(b) * max_num_pages + i / page_size];
  const int slot = i % page_size;
  const unsigned char* page_base =
      k_index_cache_fp8 + static_cast<size_t>(page) * page_size * (index_head_dim + 4);
  const unsigned char* k = page_base + static_cast<size_t>(slot) * index_head_dim;
  const float scale = *reinterpret_cast<const float*>(
      page_base + static_cast<size_t>(page_size) * index_head_dim + static_cast<size_t>(slot) * 4);
  float score = 0.0f;
  for (int h = 0; h < num_index_heads; ++h) {
    const unsigned char* q =
        q_index_fp8 + (static_cast<size_t>(b) * num_index_heads + h) * index_head_dim;
    float dot = 0.0f;
    for (int d = 0; d < index_head_dim; ++d) dot += e4m3(q[d]) * (e4m3(k[d]) * scale);
    score += weights[static_cast<size_t>(b) * num_index_heads + h] * fmaxf(dot, 0.0f);
  }
  scores[static_cast<size_t>(b) * max_tokens + i] = score;
}

// A float's bits mapped so that unsigned order is float order.
__device__ __forceinline__ unsigned int order_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

extern "C" __global__ void dsa_indexer_select_reference(const float* scores, const int* seq_lens,
                                                        const int* block_table, int* topk_indices,
                                                        int batch_size, int page_size,
                                                        int max_num_pages, int topk) {
  __shared__ unsigned int count;
  const int b = blockIdx.x;
  if (b >= batch_size) return;
  const int max_tokens = max_num_pages * page_size;
  const int n = min(max(seq_lens[b], 0), max_tokens);
  const int k = min(topk, n);
  const float* s = scores + static_cast<size_t>(b) * max_tokens;
  int* out = topk_indices + static_cast<size_t>(b) * topk;
  const int* pages = block_table + static_cast<size_t>(b) * max_num_pages;

  // Threshold: the largest key T with at least k keys >= T (the k-th largest key).
  unsigned int threshold = 0;
  if (k > 0 && k < n) {
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned int candidate = threshold | (1u << bit);
      if (threadIdx.x == 0) count = 0;
      __syncthreads();
      unsigned int mine = 0;
      for (int i = threadIdx.x; i < n; i += blockDim.x) mine += order_key(s[i]) >= candidate;
      atomicAdd(&count, mine);
      __syncthreads();
      if (count >= static_cast<unsigned int>(k)) threshold = candidate;
      __syncthreads();
    }
  }

  if (threadIdx.x == 0) {
    int at = 0;
    if (k == n) {  // every token
      for (int i = 0; i < n; ++i) out[at++] = pages[i / page_size] * page_size + i % page_size;
    } else {
      // Keys above the threshold in position order, then tied keys by lowest position.
      for (int i = 0; i < n; ++i) {
        if (order_key(s[i]) > threshold)
          out[at++] = pages[i / page_size] * page_size + i % page_size;
      }
      for (int i = 0; i < n && at < k; ++i) {
        if (order_key(s[i]) == threshold)
          out[at++] = pages[i / page_size] * page_size + i % page_size;
      }
    }
    for (; at < topk; ++at) out[at] = -1;
  }
}
