/* kharness
{
  "launches": [
    { "kernel": "mla_paged_prefill_ps1_baseline",
      "grid": ["cdiv(num_qo_heads, 8)", "total_q", 1],
      "block": [256, 1, 1],
      "shared_bytes": "1632 + 96 * (head_dim_ckv + head_dim_kpe)",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices",
               "sm_scale", "output", "lse", "total_q", "num_qo_heads", "head_dim_ckv",
               "head_dim_kpe", "page_size", "len_indptr"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for every mla_paged_prefill_causal_*_ps1 definition (page size 1: no kv_last_page_len,
// every page holds its one token; semantics in the family's reference.cu, transcribed from
// FlashInfer-Bench's reference text):
#include "../../_shared/mla_paged_prefill/baseline.cuh"

// Page size 1: no kv_last_page_len input, every page holds its one token.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_paged_prefill_ps1_baseline(const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe,
                                   const __nv_bfloat16* ckv_cache, const __nv_bfloat16* kpe_cache,
                                   const int* qo_indptr, const int* kv_indptr,
                                   const int* kv_indices, float sm_scale, __nv_bfloat16* output,
                                   float* lse, int total_q, int num_qo_heads, int head_dim_ckv,
                                   int head_dim_kpe, int page_size, int len_indptr) {
  mla_paged_prefill(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, nullptr,
                    sm_scale, output, lse, total_q, num_qo_heads, head_dim_ckv, head_dim_kpe,
                    page_size, len_indptr);
}
