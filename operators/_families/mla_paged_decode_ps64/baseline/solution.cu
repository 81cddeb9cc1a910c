/* kharness
{
  "launches": [
    { "kernel": "mla_paged_decode_ps64_partial",
      "grid": ["cdiv(num_qo_heads, 8)", "batch_size", "max(1, min(cdiv(num_kv_indices * page_size, batch_size * 128), cdiv(1024, batch_size * cdiv(num_qo_heads, 8))))"],
      "block": [256, 1, 1],
      "shared_bytes": "1632 + 96 * (head_dim_ckv + head_dim_kpe)",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices",
               "kv_last_page_len", "sm_scale", "workspace", "batch_size", "num_qo_heads",
               "head_dim_ckv", "head_dim_kpe", "page_size"] },
    { "kernel": "mla_paged_decode_ps64_merge",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "output", "lse", "batch_size", "num_qo_heads", "head_dim_ckv"] }
  ],
  "workspace_bytes": "16 + 4 * batch_size * num_qo_heads * max(1, min(cdiv(num_kv_indices * page_size, batch_size * 128), cdiv(1024, batch_size * cdiv(num_qo_heads, 8)))) * (head_dim_ckv + 2)",
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for every mla_paged_decode_*_ps64 definition (pages of more than one token, the last
// holding kv_last_page_len[b]; semantics in the family's reference.cu, transcribed from
// FlashInfer-Bench's reference text): the straightforward implementation speedups are measured
// against. Split-KV in two launches through the workspace:
//   partial  one block of 8 warps per (tile of 8 q heads, request, split) stages each compressed
//            token once for the 8 heads (16 heads: two blocks, the second reading the latents
//            from L2) over one contiguous chunk of the request's tokens: attend_heads, the engine
//            of the mla_paged_prefill_causal baseline (one text, _shared/mla_attention/), streams
//            32-token tiles of [ckv | kpe] rows through shared memory with 16-byte loads, float32
//            Q K^T in the reference's order (a warp per head, a lane per token), a
//            natural-exponent online softmax, and P V with the staged ckv rows as values on CUDA
//            cores, and leaves each head's (m, l, acc) = (maximum logit, sum of exp(logit - m),
//            sum of exp(logit - m) ckv); a split past the request's end leaves (-inf, 0, 0).
//   merge    one block per (q head, request): M = max m_s, L = sum l_s exp(m_s - M),
//            output = bf16(sum acc_s exp(m_s - M) / L) (one rounding), lse = (M + ln L) / ln 2;
//            a request with no tokens gets 0 and -inf, as the reference.
// The split count (grid z) is chosen from the axes so that short batches still fill the GPU:
// enough splits for about 1024 blocks, at most one per 128 tokens of an average request, at
// least one; partial block (0, 0, 0) records it for the merge. Workspace: splits (int, 16 bytes
// with padding) | (m, l) [batch][q head][split] | acc [batch][q head][split][head_dim_ckv],
// float32. Sizes come from the axes: head_dim_ckv a multiple of 8 up to 512, head_dim_kpe a
// multiple of 8 (every definition: 512 and 64), else the kernel traps.
#include "../../_shared/mla_attention/attend_heads.cuh"

// The workspace, as the plan's workspace_bytes lays it out.
struct Partials {
  int* splits;  // written by partial block (0, 0, 0): gridDim.z
  float* ml;    // ml[2 p], ml[2 p + 1]: m and l of partial p = (b * num_qo_heads + h) * splits + s
  float* acc;   // acc[p * head_dim_ckv + d]
};

__device__ Partials carve_workspace(unsigned char* workspace, int batch_size, int num_qo_heads,
                                    int splits) {
  Partials w;
  w.splits = reinterpret_cast<int*>(workspace);
  w.ml = reinterpret_cast<float*>(workspace + 16);
  w.acc = w.ml + 2 * static_cast<size_t>(batch_size) * num_qo_heads * splits;
  return w;
}

// One split of one request for the block's heads [0, heads): each head's (m, l, acc) stored
// unnormalised at partial p0 + h * splits.
template <class RowOf>
__device__ __forceinline__ void attend_split(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                             int heads, const __nv_bfloat16* ckv_cache,
                                             const __nv_bfloat16* kpe_cache, int ckv_dim,
                                             int kpe_dim, int t_begin, int t_end, float sm_scale,
                                             RowOf row_of, const Partials& w, size_t p0,
                                             int splits) {
  const Shared s = carve(ckv_dim + kpe_dim);
  float acc[kSlots];
  attend_heads(s, q_nope, q_pe, heads, ckv_cache, kpe_cache, ckv_dim, kpe_dim, t_begin, t_end,
               sm_scale, row_of, acc);
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h < heads) {
      const size_t p = p0 + static_cast<size_t>(h) * splits;
      float* a = w.acc + p * ckv_dim;
#pragma unroll
      for (int j = 0; j < kMaxDims; ++j) {
        const int d = threadIdx.x + kThreads * j;
        if (d < ckv_dim) a[d] = acc[h * kMaxDims + j];
      }
      if (threadIdx.x == 0) {
        w.ml[2 * p] = s.m[h];
        w.ml[2 * p + 1] = s.l[h];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    mla_paged_decode_ps64_partial(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                  const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                                  const int* kv_indptr, const int* kv_indices,
                                  const int* kv_last_page_len, float sm_scale,
                                  unsigned char* workspace, int batch_size, int num_qo_heads,
                                  int head_dim_ckv, int head_dim_kpe, int page_size) {
  require_supported(head_dim_ckv, head_dim_kpe);
  const int h0 = blockIdx.x * kHeads, b = blockIdx.y, split = blockIdx.z;
  const int splits = gridDim.z;
  const Partials w = carve_workspace(workspace, batch_size, num_qo_heads, splits);
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) *w.splits = splits;
  if (h0 >= num_qo_heads || b >= batch_size) return;
  const int heads = min(kHeads, num_qo_heads - h0);
  const int page_begin = kv_indptr[b];
  const int page_end = kv_indptr[b + 1];
  // The last page holds kv_last_page_len[b] tokens (1..page_size), every other one page_size.
  const int num_tokens = max(
      page_end > page_begin ? (page_end - page_begin - 1) * page_size + kv_last_page_len[b] : 0, 0);
  // This split's tokens: a contiguous chunk, a whole number of tiles (empty past the end).
  const int chunk = ((num_tokens + splits - 1) / splits + kTile - 1) / kTile * kTile;
  const int t_begin = min(split * chunk, num_tokens);
  const int t_end = min(t_begin + chunk, num_tokens);
  const int* pages = kv_indices + page_begin;
  // Token t of the request: slot t % page_size of page pages[t / page_size].
  auto row_of = [=](int t) {
    return static_cast<size_t>(pages[t / page_size]) * page_size + t % page_size;
  };
  const size_t qh = static_cast<size_t>(b) * num_qo_heads + h0;
  const size_t p0 = qh * splits + split;  // partial of the block's first head
  attend_split(q_nope + qh * head_dim_ckv, q_pe + qh * head_dim_kpe, heads, ckv_cache, kpe_cache,
               head_dim_ckv, head_dim_kpe, t_begin, t_end, sm_scale, row_of, w, p0, splits);
}

// Combines the splits of (request b, q head h): every thread recomputes M and L (a few dozen
// splits in the families' workloads, at most 1024) and writes output dimensions threadIdx.x,
// threadIdx.x + blockDim.x, ...
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_paged_decode_ps64_merge(unsigned char* workspace, __nv_bfloat16* output, float* lse,
                                int batch_size, int num_qo_heads, int head_dim_ckv) {
  const int h = blockIdx.x, b = blockIdx.y;
  if (h >= num_qo_heads || b >= batch_size) return;
  const int splits = *reinterpret_cast<const int*>(workspace);
  const Partials w = carve_workspace(workspace, batch_size, num_qo_heads, splits);
  const size_t bh = static_cast<size_t>(b) * num_qo_heads + h;
  const size_t p0 = bh * splits;
  __nv_bfloat16* out = output + bh * head_dim_ckv;
  float m_all = neg_inf();
  for (int s = 0; s < splits; ++s) m_all = fmaxf(m_all, w.ml[2 * (p0 + s)]);
  if (m_all == neg_inf()) {  // no tokens
    for (int d = threadIdx.x; d < head_dim_ckv; d += blockDim.x) out[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[bh] = neg_inf();
    return;
  }
  float l_all = 0.0f;
  for (int s = 0; s < splits; ++s) {
    l_all += w.ml[2 * (p0 + s) + 1] * expf(w.ml[2 * (p0 + s)] - m_all);  // 0 for an empty split
  }
  for (int d = threadIdx.x; d < head_dim_ckv; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < splits; ++s) {
      o += w.acc[(p0 + s) * head_dim_ckv + d] * expf(w.ml[2 * (p0 + s)] - m_all);
    }
    out[d] = __float2bfloat16_rn(o / l_all);
  }
  if (threadIdx.x == 0) lse[bh] = (m_all + logf(l_all)) * 1.4426950408889634f;
}
