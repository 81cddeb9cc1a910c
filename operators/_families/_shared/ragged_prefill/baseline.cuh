// Baseline for the ragged causal prefill families, gqa_ragged_prefill_causal_* and
// mla_ragged_prefill_causal_* (semantics in their reference.cu, transcribed from
// FlashInfer-Bench's reference text): the straightforward implementation speedups are measured
// against. One block of 4 warps per (query row, KV head) computes all the q heads of that KV
// group together (GQA: groups of 2 to 8; MLA ragged has one q head per KV head), so each K/V row
// is read once per query row and group (the seed reads it once per q head and query row). The
// row's visible keys (the request's rows kv_indptr[b] + t, t <= i + kv_len - q_len) stream
// through shared memory in tiles of kTile = 64, K rows of qk_dim and V rows of vo_dim copied with
// 16-byte loads, then
//   Q K^T    two threads per key, each with up to 8 of the group's heads (the queries staged as
//            float32, read as broadcasts); float32 dot products in the reference's order;
//   softmax  a warp per head: running maximum m, alpha = exp(m_old - m_new), p = exp(logit - m),
//            l = l * alpha + sum p (natural exponent, as the reference);
//   P V      each thread owns one output dimension of every head (vo_dim above 128: two
//            dimensions of half as many heads): acc = acc * alpha + sum_t p[t] v[t, d], four keys
//            at a time.
// Finally output = bf16(acc / l) (one rounding) and lse = (m + ln l) / ln 2; a row that sees no
// key (its request has no keys) writes 0 and -inf, as the reference. CUDA cores only, no tensor
// cores, no reuse across query rows. A group larger than one pass (16 heads; 8 for head_dim 256)
// runs in several passes over the keys. Sizes come from the axes: qk_dim and vo_dim multiples of
// 8 (vo_dim up to 256) and num_qo_heads a multiple of num_kv_heads (every definition: head_dim
// 128 or 256, or 192 / 128 for MLA), else the kernel traps rather than compute garbage.
// The two families' baselines are one text with their own argument names in the plan (as their
// references are); attend_pass, the engine, is gqa_paged_prefill_causal's baseline's
// (_shared/gqa_attention/attend_pass.cuh).
#include "../gqa_attention/attend_pass.cuh"

// The block's query row for the q heads [0, group) at `q` (stride qk_dim), into `out` (stride
// vo_dim) and `lse`: as many passes as the group needs, then output = bf16(acc / l) and
// lse = (m + ln l) / ln 2, or 0 and -inf for a row that sees no token.
template <class RowOf>
__device__ __forceinline__ void attend_row(const __nv_bfloat16* q, __nv_bfloat16* out, float* lse,
                                           int group, const __nv_bfloat16* k_cache,
                                           const __nv_bfloat16* v_cache, int qk_dim, int vo_dim,
                                           int num_tokens, float sm_scale, RowOf row_of) {
  const Shared s = carve(qk_dim);
  const bool wide = vo_dim > kThreads;
  for (int h0 = 0; h0 < group; h0 += pass_heads(qk_dim, vo_dim)) {
    const int heads = min(pass_heads(qk_dim, vo_dim), group - h0);
    float acc[kSlots];
    attend_pass(s, q + static_cast<size_t>(h0) * qk_dim, heads, k_cache, v_cache, qk_dim, vo_dim, 0,
                num_tokens, sm_scale, row_of, acc);
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int g = slot_head(j, wide), d = slot_dim(j, wide);
      if (g < heads && d < vo_dim) {
        const float l = s.l[g];  // >= 1 when the row saw a token: its maximum term is exp(0)
        out[static_cast<size_t>(h0 + g) * vo_dim + d] =
            __float2bfloat16_rn(l > 0.0f ? acc[j] / l : 0.0f);
      }
    }
    if (threadIdx.x < heads) {
      const int g = threadIdx.x;
      const float l = s.l[g];
      lse[h0 + g] = l > 0.0f ? (s.m[g] + logf(l)) * 1.4426950408889634f : neg_inf();
    }
  }
}

// The reference's request lookup and causal visibility, then the (query row, KV head) block's
// group of q heads.
extern "C" __global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    ragged_prefill_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                            const int* qo_indptr, const int* kv_indptr, float sm_scale,
                            __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
                            int num_kv_heads, int qk_dim, int vo_dim, int len_indptr) {
  require_supported(num_qo_heads, num_kv_heads, qk_dim, vo_dim);
  const int kv_head = blockIdx.x;
  const int row_q = blockIdx.y;
  if (kv_head >= num_kv_heads || row_q >= total_q) return;
  const int batch = len_indptr - 1;
  int b = 0;  // the request whose query rows hold row_q
  while (b + 1 < batch && row_q >= qo_indptr[b + 1]) ++b;
  const int q_len = qo_indptr[b + 1] - qo_indptr[b];
  const int i = row_q - qo_indptr[b];
  const int kv_start = kv_indptr[b];
  const int kv_len = max(kv_indptr[b + 1] - kv_start, 0);
  const int visible = min(kv_len, i + (kv_len - q_len) + 1);  // causal
  const int num_tokens = q_len > 0 && visible > 0 ? visible : 0;
  const int group = num_qo_heads / num_kv_heads;  // q heads kv_head * group + g read kv_head
  // Key t of the request: row kv_start + t of k and v, this KV head.
  auto row_of = [=](int t) { return (static_cast<size_t>(kv_start) + t) * num_kv_heads + kv_head; };
  const size_t qh =
      static_cast<size_t>(row_q) * num_qo_heads + static_cast<size_t>(kv_head) * group;
  attend_row(q + qh * qk_dim, output + qh * vo_dim, lse + qh, group, k, v, qk_dim, vo_dim,
             num_tokens, sm_scale, row_of);
}
