/* kharness
{
  "launches": [
    { "kernel": "mla_paged_decode_reference",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices", "sm_scale",
               "output", "lse", "batch_size", "num_qo_heads", "head_dim_ckv", "head_dim_kpe",
               "page_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
#define KB_LAST_PAGE_LEN 0
#define KB_KERNEL mla_paged_decode_reference
#include "../_shared/mla_paged_decode/reference.cuh"
