/* kharness
{
  "launches": [
    { "kernel": "mamba_ssu_seed_copy_state",
      "grid": ["cdiv(state_cache_size * nheads * head_dim * dstate, 256)", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["state", "new_state", "state_cache_size", "nheads", "head_dim", "dstate"] },
    { "kernel": "mamba_ssu_seed_update",
      "grid": ["nheads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["state", "x", "dt", "A", "B", "C", "D", "dt_bias", "state_batch_indices", "output",
               "new_state", "batch_size", "nheads", "head_dim", "dstate", "ngroups"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed (for now the reference's kernels, renamed: correct and simple, a starting point; no faster
// kernel is written yet) for every mamba_ssu_decode_* definition (FlashInfer-Bench op_type
// "mamba_ssu": Mamba2 selective state update, one decode token per sequence), transcribing
// FlashInfer-Bench's reference text.
#define KB_KERNEL(name) mamba_ssu_seed_##name
#include "../_shared/mamba_ssu_decode/reference.cuh"
