/* kharness
{
  "launches": [
    { "kernel": "mla_paged_decode_ps64_seed",
      "grid": ["num_qo_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices",
               "kv_last_page_len", "sm_scale",
               "output", "lse", "batch_size", "num_qo_heads", "head_dim_ckv", "head_dim_kpe",
               "page_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed (for now the reference's kernel, renamed: correct and simple, a starting point; no faster
// kernel is written yet). The reference's description follows.
// The mla_paged_decode family's reference for definitions with pages of more than one token
// (FlashInfer-Bench's *_ps64 decode definitions, which take kv_last_page_len): request b's
// tokens are every slot of its pages but the last, which holds kv_last_page_len[b]. The rest
// as in mla_paged_decode's reference, whose text (_shared/mla_paged_decode/reference.cuh) follows.
#define KB_LAST_PAGE_LEN 1
#define KB_KERNEL mla_paged_decode_ps64_seed
#include "../_shared/mla_paged_decode/reference.cuh"
