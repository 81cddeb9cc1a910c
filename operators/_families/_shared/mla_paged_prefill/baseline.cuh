// the straightforward implementation speedups are measured against. One block of 8 warps per
// (query row, tile of 8 q heads) stages each compressed token once for all 8 heads (the seed
// reads it once per head and query row): the row's visible tokens stream through shared memory
// in tiles of kTile = 32, each token's ckv and kpe rows copied with 16-byte loads into one
// [ckv | kpe] row, then
//   Q K^T + softmax  warp g owns head g, lane t token t: the float32 dot product over ckv then
//                    kpe (the reference's order; the queries staged as float32 [q_nope | q_pe],
//                    read as broadcasts), then the running maximum m, alpha = exp(m_old - m_new),
//                    p = exp(logit - m), l = l * alpha + sum p through warp shuffles (natural
//                    exponent, as the reference);
//   P V              the value is the staged ckv row itself: each thread owns two of the 512
//                    output dimensions of every head, acc = acc * alpha + sum_t p[t] ckv[t, d],
//                    four tokens at a time.
// Finally output = bf16(acc / l) (one rounding) and lse = (m + ln l) / ln 2; a row that sees no
// token (its request has no pages) writes 0 and -inf, as the reference. CUDA cores only, no
// tensor cores, no reuse across query rows (16 heads: two blocks per row, the second reading the
// latents from L2). Sizes come from the axes: head_dim_ckv a multiple of 8 up to 512,
// head_dim_kpe a multiple of 8 (every definition: 512 and 64), else the kernel traps rather than
// compute garbage.
// mla_paged_prefill_causal_ps1 (page size 1: no kv_last_page_len) shares this text
// (operators/_families/_shared/mla_paged_prefill/baseline.cuh) with an entry kernel of its own;
// its engine, attend_heads (_shared/mla_attention/attend_heads.cuh), is also
// mla_paged_decode_ps64's.
#include "../mla_attention/attend_heads.cuh"

// The heads [0, heads) of one query row into `out` (stride ckv_dim) and `lse`:
// output = bf16(acc / l) and lse = (m + ln l) / ln 2, or 0 and -inf for a row that sees no token.
template <class RowOf>
__device__ __forceinline__ void attend_row(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                           __nv_bfloat16* out, float* lse, int heads,
                                           const __nv_bfloat16* ckv_cache,
                                           const __nv_bfloat16* kpe_cache, int ckv_dim, int kpe_dim,
                                           int num_tokens, float sm_scale, RowOf row_of) {
  const Shared s = carve(ckv_dim + kpe_dim);
  float acc[kSlots];
  attend_heads(s, q_nope, q_pe, heads, ckv_cache, kpe_cache, ckv_dim, kpe_dim, 0, num_tokens,
               sm_scale, row_of, acc);
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h < heads) {
      const float l = s.l[h];  // >= 1 when the row saw a token: its maximum term is exp(0)
      __nv_bfloat16* o = out + static_cast<size_t>(h) * ckv_dim;
#pragma unroll
      for (int j = 0; j < kMaxDims; ++j) {
        const int d = threadIdx.x + kThreads * j;
        if (d < ckv_dim) o[d] = __float2bfloat16_rn(l > 0.0f ? acc[h * kMaxDims + j] / l : 0.0f);
      }
      if (threadIdx.x == 0) {
        lse[h] = l > 0.0f ? (s.m[h] + logf(l)) * 1.4426950408889634f : neg_inf();
      }
    }
  }
}

// The reference's request lookup and causal visibility, then the (query row, head tile) block.
// kv_last_page_len: nullptr when every page is full (page size 1).
__device__ void mla_paged_prefill(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                  const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                                  const int* qo_indptr, const int* kv_indptr, const int* kv_indices,
                                  const int* kv_last_page_len, float sm_scale,
                                  __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
                                  int head_dim_ckv, int head_dim_kpe, int page_size,
                                  int len_indptr) {
  require_supported(head_dim_ckv, head_dim_kpe);
  const int h0 = blockIdx.x * kHeads;
  const int row_q = blockIdx.y;
  if (h0 >= num_qo_heads || row_q >= total_q) return;
  const int heads = min(kHeads, num_qo_heads - h0);
  const int batch = len_indptr - 1;
  int b = 0;  // the request whose query rows hold row_q
  while (b + 1 < batch && row_q >= qo_indptr[b + 1]) ++b;
  const int q_len = qo_indptr[b + 1] - qo_indptr[b];
  const int i = row_q - qo_indptr[b];
  const int num_pages = kv_indptr[b + 1] - kv_indptr[b];
  const int kv_len = num_pages <= 0
                         ? 0
                         : (kv_last_page_len ? (num_pages - 1) * page_size + kv_last_page_len[b]
                                             : num_pages * page_size);
  const int visible = min(kv_len, i + (kv_len - q_len) + 1);  // causal
  const int num_tokens = q_len > 0 && visible > 0 ? visible : 0;
  const int* pages = kv_indices + kv_indptr[b];
  // Token t of the request: slot t % page_size of page pages[t / page_size].
  auto row_of = [=](int t) {
    return static_cast<size_t>(pages[t / page_size]) * page_size + t % page_size;
  };
  const size_t qh = static_cast<size_t>(row_q) * num_qo_heads + h0;
  attend_row(q_nope + qh * head_dim_ckv, q_pe + qh * head_dim_kpe, output + qh * head_dim_ckv,
             lse + qh, heads, ckv_cache, kpe_cache, head_dim_ckv, head_dim_kpe, num_tokens,
             sm_scale, row_of);
}
