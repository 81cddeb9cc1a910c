/* kharness
{
  "launches": [
    { "kernel": "gqa_paged_decode_ps64_reference",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len",
               "sm_scale", "output", "lse",
               "batch_size", "num_qo_heads", "num_kv_heads", "head_dim", "page_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// The gqa_paged_decode family's reference for definitions with pages of more than one token
// (FlashInfer-Bench's *_ps64 decode definitions, which take kv_last_page_len): request b's
// tokens are every slot of its pages but the last, which holds kv_last_page_len[b]. The rest
// as in gqa_paged_decode's reference, whose text (_shared/gqa_paged_decode/reference.cuh) follows.
#define KB_LAST_PAGE_LEN 1
#define KB_KERNEL gqa_paged_decode_ps64_reference
#include "../_shared/gqa_paged_decode/reference.cuh"
