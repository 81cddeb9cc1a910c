/* kharness
{
  "launches": [
    { "kernel": "gqa_paged_prefill_reference",
      "grid": ["num_qo_heads", "total_q", 1],
      "block": [128, 1, 1],
      "shared_bytes": "(128 * (head_dim + 1) + head_dim) * 4",
      "args": ["q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices",
               "kv_last_page_len", "sm_scale", "output", "lse", "total_q", "num_qo_heads",
               "num_kv_heads", "head_dim", "page_size", "len_indptr"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
#include "../_shared/gqa_paged_prefill/reference.cuh"

extern "C" __global__ void gqa_paged_prefill_reference(
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
    const int* qo_indptr, const int* kv_indptr, const int* kv_indices, const int* kv_last_page_len,
    float sm_scale, __nv_bfloat16* output, float* lse, int total_q, int num_qo_heads,
    int num_kv_heads, int head_dim, int page_size, int len_indptr) {
  gqa_paged_prefill(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                    sm_scale, output, lse, total_q, num_qo_heads, num_kv_heads, head_dim,
                    page_size, len_indptr);
}
