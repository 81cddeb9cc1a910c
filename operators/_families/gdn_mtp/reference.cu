/* kharness
{
  "launches": [
    { "kernel": "gdn_mtp_reference_tokens",
      "grid": ["num_v_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "initial_state", "initial_state_indices", "A_log", "a", "dt_bias",
               "b", "scale", "output", "batch_size", "seq_len", "num_q_heads", "num_k_heads",
               "num_v_heads", "head_size"] },
    { "kernel": "gdn_mtp_reference_final_state",
      "grid": ["cdiv(pool_size * num_v_heads * head_size * head_size, 256)", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["initial_state", "final_state", "pool_size", "num_v_heads", "head_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every gdn_mtp_* definition (FlashInfer-Bench op_type "gdn", multi-token
// prediction: seq_len > 1 draft tokens per sequence verified in order, k-last state layout),
// transcribing FlashInfer-Bench's reference text.
#define KB_KERNEL(name) gdn_mtp_reference_##name
#include "../_shared/gdn_mtp/reference.cuh"
