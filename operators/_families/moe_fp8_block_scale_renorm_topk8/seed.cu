/* kharness
{
  "launches": [
    { "kernel": "moe_seed_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_seed_expert_lists",
      "grid": ["num_local_experts", 1, 1], "block": [256, 1, 1], "shared_bytes": "0",
      "args": [{"int32": 0}, "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_seed_gemm1_swiglu",
      "grid": ["cdiv(intermediate_size, 64)", "cdiv(seq_len, 64)", "num_local_experts"],
      "block": [256, 1, 1], "shared_bytes": "0",
      "args": ["hidden_states", "hidden_states_scale", "gemm1_weights", "gemm1_weights_scale",
               "workspace", "seq_len", "num_local_experts", "hidden_size", "intermediate_size",
               "num_hidden_blocks", "num_gemm1_out_blocks"] },
    { "kernel": "moe_seed_gemm2",
      "grid": ["cdiv(hidden_size, 64)", "cdiv(seq_len, 64)", "num_local_experts"],
      "block": [256, 1, 1], "shared_bytes": "0",
      "args": ["gemm2_weights", "gemm2_weights_scale", "workspace", "seq_len",
               "num_local_experts", "hidden_size", "intermediate_size", "num_hidden_blocks",
               "num_intermediate_blocks"] },
    { "kernel": "moe_seed_combine",
      "grid": ["seq_len", 1, 1], "block": [256, 1, 1], "shared_bytes": "0",
      "args": [{"int32": 0}, "workspace", "output", "seq_len", "num_local_experts",
               "hidden_size", "intermediate_size"] }
  ],
  "workspace_bytes": "64 * seq_len + 4 * num_local_experts + 4 * num_local_experts * seq_len + 32 * seq_len * intermediate_size + 32 * seq_len * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Seed for moe_fp8_block_scale_renorm_topk8_* (renormalize routing: the top 8 logits, a
// softmax over them; fp8 block-scale GEMM1 -> SwiGLU -> GEMM2, weighted sum; semantics in the
// family's reference.cu). The same five steps as the reference, with the GEMMs as
// register-blocked CUDA-core tiles:
//   1. routing, one thread per token (the top 8 logits, a softmax over them);
//   2. per local expert, the slots t*8+k that chose it, in token order (a block-wide ordered
//      compaction: ballots and a prefix over the warps);
//   3. GEMM1 + SwiGLU per expert over its gathered tokens: 64 rows x 64 columns of `up` and the
//      matching 64 of `gate` per block, K = hidden_size in slices of 32;
//   4. GEMM2 per expert: 64 rows x 64 columns of H, K = intermediate_size in slices of 32;
//   5. combine: one block per token sums its local selections' rows, weighted, into bf16.
// GEMM tiles: warp w (of 8) owns rows 8w..8w+7 and lane l columns l and l+32; a warp whose rows
// are all past the expert's token count skips the multiply-adds, so decode batches do not pay
// for a 64-row tile. fp8 values are dequantised (times their block scale) while staged in shared
// memory, four per 32-bit load (the hidden and intermediate sizes are multiples of 128).
// Workspace layout as in the reference: topk_idx, topk_w [T, 8]; counts [E]; lists [E, T];
// C [T*8, I] and O [T*8, H] indexed by slot.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kTopK = 8;
#include "../_shared/moe_fp8_renorm/seed.cuh"
