/* kharness
{
  "launches": [
    { "kernel": "moe_base_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_base_expert_lists",
      "grid": ["num_local_experts", 1, 1], "block": [1, 1, 1], "shared_bytes": "0",
      "args": [{"int32": 0}, "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_base_gemm1_swiglu",
      "grid": ["cdiv(intermediate_size, 16)", "cdiv(seq_len, 16)", "num_local_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["hidden_states", "hidden_states_scale", "gemm1_weights", "gemm1_weights_scale",
               "workspace", "seq_len", "num_local_experts", "hidden_size", "intermediate_size",
               "num_hidden_blocks", "num_gemm1_out_blocks"] },
    { "kernel": "moe_base_gemm2",
      "grid": ["cdiv(hidden_size, 16)", "cdiv(seq_len, 16)", "num_local_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["gemm2_weights", "gemm2_weights_scale", "workspace", "seq_len",
               "num_local_experts", "hidden_size", "intermediate_size", "num_hidden_blocks",
               "num_intermediate_blocks"] },
    { "kernel": "moe_base_combine",
      "grid": ["cdiv(seq_len * hidden_size, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": [{"int32": 0}, "workspace", "output", "seq_len", "num_local_experts",
               "hidden_size", "intermediate_size"] }
  ],
  "workspace_bytes": "64 * seq_len + 4 * num_local_experts + 4 * num_local_experts * seq_len + 32 * seq_len * intermediate_size + 32 * seq_len * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for moe_fp8_block_scale_renorm_topk8_* (renormalize routing: the top 8 logits, a
// softmax over them; fp8 block-scale GEMM1 -> SwiGLU -> GEMM2, weighted sum; semantics in the
// family's reference.cu):
// the straightforward implementation speedups are measured against. Five launches through a
// workspace: routing with one thread per token; per local expert the list of slots t*8+k that
// chose it (one thread per expert, in token order); GEMM1 + SwiGLU and GEMM2 per expert over its
// gathered tokens as 16x16 shared-memory tiles on CUDA cores (each fp8 value dequantised to float32
// when staged; blocks past an expert's token count exit); one thread per output element for the
// weighted sum. Workspace: topk_idx, topk_w [T, 8]; counts [E]; lists [E, T]; C [T*8, I] and
// O [T*8, H] indexed by slot.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kTopK = 8;
#define KB_KERNEL(name) moe_base_##name
#include "../../_shared/moe_fp8_renorm/reference.cuh"
