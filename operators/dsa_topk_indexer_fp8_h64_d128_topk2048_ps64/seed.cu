/* kharness
{
  "definition": "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
  "launches": [
    { "kernel": "indexer_page_scores",
      "grid": ["max_num_pages", "batch_size", 1],
      "block": [256, 1, 1],
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
// Seed solution for dsa_topk_indexer_fp8_h64_d128_topk2048_ps64: a correct, reasonable starting
// point. Two kernels and a float32 score buffer in the workspace.
// indexer_page_scores: one block of 256 threads per (page of the request, request). The request's
// 64 x 128 e4m3 queries are decoded to float in shared memory (32 KiB) once per block, the page's
// 64 x 128 key bytes are staged with a padded row stride (no bank conflicts), and thread
// (group g, token j) computes the 16 dot products of heads 16g .. 16g+15 for token j (4 keys
// decoded per 32-bit load, queries read as broadcast float4s), applies the token's scale, ReLU
// and the head weights, and the 4 group partial sums are added in shared memory.
// indexer_select: see below (radix select + ordered compaction, deterministic).
#include <cuda_fp8.h>

constexpr int kHeads = 64;
constexpr int kDim = 128;
constexpr int kPageSize = 64;
constexpr int kTopk = 2048;
constexpr int kScoreThreads = 256;
constexpr int kGroups = kScoreThreads / kPageSize;  // 4 groups of 16 heads
constexpr int kHeadsPerGroup = kHeads / kGroups;
constexpr int kRowWords = kDim / 4 + 1;  // padded key row, in 32-bit words
constexpr int kSelectThreads = 1024;

__device__ __forceinline__ float e4m3(unsigned int byte) {
  __nv_fp8_e4m3 v;
  v.__x = static_cast<__nv_fp8_storage_t>(byte);
  return static_cast<float>(v);
}

extern "C" __global__ void __launch_bounds__(kScoreThreads)
    indexer_page_scores(const unsigned char* __restrict__ q_index_fp8,
                        const unsigned char* __restrict__ k_index_cache_fp8,
                        const float* __restrict__ weights, const int* __restrict__ seq_lens,
                        const int* __restrict__ block_table, float* __restrict__ scores,
                        int batch_size, int max_num_pages) {
  __shared__ float4 q_s[kHeads][kDim / 4];             // 32 KiB
  __shared__ unsigned int k_s[kPageSize * kRowWords];  // 8.25 KiB
  __shared__ float partial[kGroups][kPageSize];
  __shared__ float w_s[kHeads];
  __shared__ float fp8_table[256];

  const int p = blockIdx.x;
  const int b = blockIdx.y;
  if (b >= batch_size) return;
  const int max_tokens = max_num_pages * kPageSize;
  const int seq_len = min(max(seq_lens[b], 0), max_tokens);
  if (p * kPageSize >= seq_len) return;
  const int page = block_table[static_cast<size_t>(b) * max_num_pages + p];
  const unsigned char* page_base =
      k_index_cache_fp8 + static_cast<size_t>(page) * kPageSize * (kDim + 4);

  fp8_table[threadIdx.x] = e4m3(threadIdx.x);  // 256 threads: one entry each
  if (threadIdx.x < kHeads)
    w_s[threadIdx.x] = weights[static_cast<size_t>(b) * kHeads + threadIdx.x];
  const unsigned int* k_words = reinterpret_cast<const unsigned int*>(page_base);
  for (int i = threadIdx.x; i < kPageSize * kDim / 4; i += kScoreThreads) {
    k_s[(i / (kDim / 4)) * kRowWords + i % (kDim / 4)] = k_words[i];
  }
  __syncthreads();
  const unsigned int* q_words =
      reinterpret_cast<const unsigned int*>(q_index_fp8 + static_cast<size_t>(b) * kHeads * kDim);
  for (int i = threadIdx.x; i < kHeads * kDim / 4; i += kScoreThreads) {
    const unsigned int w = q_words[i];
    q_s[i / (kDim / 4)][i % (kDim / 4)] =
        make_float4(fp8_table[w & 255u], fp8_table[(w >> 8) & 255u], fp8_table[(w >> 16) & 255u],
                    fp8_table[w >> 24]);
  }
  __syncthreads();

  const int j = threadIdx.x % kPageSize;  // token slot
  const int g = threadIdx.x / kPageSize;  // head group (uniform within a warp)
  float dot[kHeadsPerGroup];
#pragma unroll
  for (int h = 0; h < kHeadsPerGroup; ++h) dot[h] = 0.0f;
#pragma unroll 4
  for (int c = 0; c < kDim / 4; ++c) {
    const unsigned int w = k_s[j * kRowWords + c];
    const float k0 = fp8_table[w & 255u], k1 = fp8_table[(w >> 8) & 255u];
    const float k2 = fp8_table[(w >> 16) & 255u], k3 = fp8_table[w >> 24];
#pragma unroll
    for (int h = 0; h < kHeadsPerGroup; ++h) {
      const float4 q = q_s[g * kHeadsPerGroup + h][c];
      dot[h] += q.x * k0 + q.y * k1 + q.z * k2 + q.w * k3;
    }
  }
  const float scale = reinterpret_cast<const float*>(page_base + kPageSize * kDim)[j];
  float sum = 0.0f;
#pragma unroll
  for (int h = 0; h < kHeadsPerGroup; ++h)
    sum += w_s[g * kHeadsPerGroup + h] * fmaxf(dot[h] * scale, 0.0f);
  partial[g][j] = sum;
  __syncthreads();
  if (g == 0) {
    const int i = p * kPageSize + j;
    if (i < seq_len) {
      scores[static_cast<size_t>(b) * max_tokens + i] =
          partial[0][j] + partial[1][j] + partial[2][j] + partial[3][j];
    }
  }
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
