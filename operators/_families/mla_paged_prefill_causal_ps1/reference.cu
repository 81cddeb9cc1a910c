/* kharness
{
  "launches": [
    { "kernel": "mla_paged_prefill_ps1_reference",
      "grid": ["num_qo_heads", "total_q", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices",
               "sm_scale", "output", "lse", "total_q", "num_qo_heads", "head_dim_ckv",
               "head_dim_kpe", "page_size", "len_indptr"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
#include "../_shared/mla_paged_prefill/reference.cuh"

// Page size 1: no kv_last_page_len input, every page holds its one token.
extern "C" __global__ void mla_paged_prefill_ps1_reference(
    const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe, const __nv_bfloat16* ckv_cache,
    const __nv_bfloat16* kpe_cache, const int* qo_indptr, const int* kv_indptr,
    const int* kv_indices, float sm_scale, __nv_bfloat16* output, float* lse, int total_q,
    int num_qo_heads, int head_dim_ckv, int head_dim_kpe, int page_size, int len_indptr) {
  mla_paged_prefill(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, nullptr,
                    sm_scale, output, lse, total_q, num_qo_heads, head_dim_ckv, head_dim_kpe,
                    page_size, len_indptr);
}
