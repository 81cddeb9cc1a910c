/* kharness
{
  "launches": [
    { "kernel": "ragged_prefill_seed",
      "grid": ["num_qo_heads", "total_q", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale", "output", "lse", "total_q",
               "num_qo_heads", "num_kv_heads", "qk_dim", "vo_dim", "len_indptr"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
#include "../_shared/ragged_prefill/seed.cuh"
