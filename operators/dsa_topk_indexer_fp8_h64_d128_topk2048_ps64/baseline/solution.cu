/* kharness
{
  "definition": "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
  "launches": [
    { "kernel": "indexer_token_scores",
      "grid": ["cdiv(max_num_pages * page_size, 128)", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_index_fp8", "k_index_cache_fp8", "weights", "seq_lens", "block_table",
               "workspace", "batch_size", "max_num_pages"] },
    { "kernel": "indexer_select",
      "grid": ["batch_size", 1, 1],
      "block": [1024, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "seq_lens", "block_table", "topk_indices", "batch_size",
               "max_num_pages"] }
  ],
  "workspace_bytes": "batch_size * max_num_pages * page_size * 4",
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for dsa_topk_indexer_fp8_h64_d128_topk2048_ps64: the plain kernels speedups are
// measured against. indexer_token_scores: one thread per (token position, request); the block
// decodes the request's 64 x 128 e4m3 queries to float in shared memory, then each thread reads
// its token's 128 key bytes (16-byte loads) and scale and computes the 64 dot products, ReLU and
// the weighted sum serially. Scores go to the workspace. indexer_select: radix select of the
// top 2048 with an ordered compaction (see below).
#include <cuda_fp8.h>

constexpr int kHeads = 64;
constexpr int kDim = 128;
constexpr int kPageSize = 64;
constexpr int kTopk = 2048;
constexpr int kSelectThreads = 1024;

__device__ __forceinline__ float e4m3(unsigned int byte) {
  __nv_fp8_e4m3 v;
  v.__x = static_cast<__nv_fp8_storage_t>(byte & 255u);
  return static_cast<float>(v);
}

extern "C" __global__ void __launch_bounds__(128)
    indexer_token_scores(const unsigned char* __restrict__ q_index_fp8,
                         const unsigned char* __restrict__ k_index_cache_fp8,
                         const float* __restrict__ weights, const int* __restrict__ seq_lens,
                         const int* __restrict__ block_table, float* __restrict__ scores,
                         int batch_size, int max_num_pages) {
  __shared__ float q_s[kHeads][kDim];  // 32 KiB
  const int b = blockIdx.y;
  if (b >= batch_size) return;
  const int max_tokens = max_num_pages * kPageSize;
  const int seq_len = min(max(seq_lens[b], 0), max_tokens);
  if (static_cast<int>(blockIdx.x) * 128 >= seq_len) return;
  for (int i = threadIdx.x; i < kHeads * kDim; i += 128)
    q_s[i / kDim][i % kDim] = e4m3(q_index_fp8[static_cast<size_t>(b) * kHeads * kDim + i]);
  __syncthreads();
  const int i = blockIdx.x * 128 + threadIdx.x;
  if (i >= seq_len) return;
  const int page = block_table[static_cast<size_t>(b) * max_num_pages + i / kPageSize];
  const int slot = i % kPageSize;
  const unsigned char* page_base =
      k_index_cache_fp8 + static_cast<size_t>(page) * kPageSize * (kDim + 4);
  const uint4* k16 = reinterpret_cast<const uint4*>(page_base + slot * kDim);
  float k[kDim];
#pragma unroll
  for (int c = 0; c < kDim / 16; ++c) {
    const uint4 v = k16[c];
    const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int x = 0; x < 4; ++x) {
#pragma unroll
      for (int y = 0; y < 4; ++y) k[c * 16 + x * 4 + y] = e4m3(w[x] >> (8 * y));
    }
  }
  const float scale = reinterpret_cast<const float*>(page_base + kPageSize * kDim)[slot];
  float score = 0.0f;
  for (int h = 0; h < kHeads; ++h) {
    float dot = 0.0f;
#pragma unroll
    for (int d = 0; d < kDim; ++d) dot += q_s[h][d] * k[d];
    score += weights[static_cast<size_t>(b) * kHeads + h] * fmaxf(dot * scale, 0.0f);
  }
  scores[static_cast<size_t>(b) * max_tokens + i] = score;
}

// The rank of this thread's flag among the flagged threads of the block (position order: warp,
// then lane); `total` gets the block's count. Every thread of the block must call it.
__device__ __forceinline__ int block_rank(bool flag, int* warp_counts, int& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int ballot = __ballot_sync(0xffffffffu, flag);
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    if (w < warp) before += warp_counts[w];
    total += warp_counts[w];
  }
  __syncthreads();
  return before + __popc(ballot & ((1u << lane) - 1u));
}

// A float's bits mapped so that unsigned order is float order.
__device__ __forceinline__ unsigned int order_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One block of kSelectThreads per request: the min(topk, seq_len) highest scores of the request
// (scores [batch, max_num_pages * kPageSize] in the workspace) as global token ids, then -1s.
// Radix select over order-preserving keys, 8 bits a pass (shared histogram), gives the threshold
// key T and how many of the keys equal to T to take; an ordered block-wide compaction writes the
// keys above T, then the first tied ones by position. Deterministic.
extern "C" __global__ void __launch_bounds__(kSelectThreads)
    indexer_select(const float* __restrict__ scores, const int* __restrict__ seq_lens,
                   const int* __restrict__ block_table, int* __restrict__ topk_indices,
                   int batch_size, int max_num_pages) {
  __shared__ unsigned int hist[256];
  __shared__ unsigned int s_prefix, s_remaining;
  __shared__ int warp_counts[kSelectThreads / 32];
  const int b = blockIdx.x;
  if (b >= batch_size) return;
  const int max_tokens = max_num_pages * kPageSize;
  const int n = min(max(seq_lens[b], 0), max_tokens);
  const float* s = scores + static_cast<size_t>(b) * max_tokens;
  const int* pages = block_table + static_cast<size_t>(b) * max_num_pages;
  int* out = topk_indices + static_cast<size_t>(b) * kTopk;
  if (n <= kTopk) {  // every token, then padding
    for (int i = threadIdx.x; i < kTopk; i += kSelectThreads)
      out[i] = i < n ? pages[i / kPageSize] * kPageSize + i % kPageSize : -1;
    return;
  }
  unsigned int prefix = 0, mask = 0, remaining = kTopk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kSelectThreads) hist[d] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kSelectThreads) {
      const unsigned int key = order_key(s[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int above = 0;
      for (int d = 255; d >= 0; --d) {
        if (above + hist[d] >= remaining) {
          s_prefix = prefix | (static_cast<unsigned int>(d) << shift);
          s_remaining = remaining - above;
          break;
        }
        above += hist[d];
      }
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  const int ties = static_cast<int>(remaining);  // keys == prefix to take
  const int above = kTopk - ties;                // keys > prefix, all taken
  int taken_above = 0, taken_ties = 0;
  for (int base = 0; base < n; base += kSelectThreads) {
    const int i = base + threadIdx.x;
    const unsigned int key = i < n ? order_key(s[i]) : 0u;
    const bool gt = i < n && key > prefix;
    const bool eq = i < n && key == prefix;
    int count_gt, count_eq;
    const int r_gt = block_rank(gt, warp_counts, count_gt);
    const int r_eq = block_rank(eq, warp_counts, count_eq);
    const int token = i < n ? pages[i / kPageSize] * kPageSize + i % kPageSize : -1;
    if (gt) out[taken_above + r_gt] = token;
    if (eq && taken_ties + r_eq < ties) out[above + taken_ties + r_eq] = token;
    taken_above += count_gt;
    taken_ties += count_eq;
  }
}
