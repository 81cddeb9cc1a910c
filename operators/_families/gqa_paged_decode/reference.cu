/* kharness
{
  "definition": "gqa_paged_decode_h32_kv8_d128_ps1",
  "launches": [
    { "kernel": "gqa_paged_decode_reference",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale", "output", "lse",
               "batch_size", "num_qo_heads", "num_kv_heads", "head_dim", "page_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
#define KB_LAST_PAGE_LEN 0
#define KB_KERNEL gqa_paged_decode_reference
#include "../_shared/gqa_paged_decode/reference.cuh"
