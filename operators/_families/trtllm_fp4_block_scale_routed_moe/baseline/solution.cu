/* kharness
{
  "launches": [
    { "kernel": "moe_base_routing",
      "grid": ["cdiv(seq_len * top_k, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["topk_ids", "workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_base_expert_lists",
      "grid": ["num_experts", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_base_gemm1_skinny",
      "grid": ["cdiv(intermediate_size, 8)", "num_experts", 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "gemm1_weights", "workspace", "seq_len", "num_experts",
               "hidden_size", "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm1_tiled",
      "grid": ["cdiv(intermediate_size, 64)", "cdiv(seq_len, 64)", "num_experts"],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "gemm1_weights", "workspace", "seq_len", "num_experts",
               "hidden_size", "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm2_skinny",
      "grid": ["cdiv(hidden_size, 8)", "num_experts", 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["gemm2_weights", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm2_tiled",
      "grid": ["cdiv(hidden_size, 64)", "cdiv(seq_len, 64)", "num_experts"], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["gemm2_weights", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_base_combine",
      "grid": ["cdiv(seq_len * hidden_size, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "output", "seq_len", "num_experts", "hidden_size", "intermediate_size",
               "top_k"] }
  ],
  "workspace_bytes": "2 * 256 * cdiv(4 * seq_len * top_k, 256) + 256 * cdiv(4 * num_experts, 256) + 256 * cdiv(4 * num_experts * seq_len, 256) + 256 * cdiv(4 * seq_len * top_k * intermediate_size, 256) + 4 * seq_len * top_k * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for every trtllm_fp4_block_scale_routed_moe_* definition, following the family's
// reference.cu exactly: pre-computed routing: topk_ids[t, k] packs the expert (high 16 bits, an
// int16) and the bf16 weight (low 16 bits); bf16 activations, float32 weights (FlashInfer-Bench
// takes them unquantised: no fp4 decoding); the routing weight scales the expert's output in the
// combine; every expert local; SwiGLU c = silu(G[I:]) * G[:I] with G = a @ W1[e].T.
#define KB_ROUTING 2      // 0 renormalize, 1 Llama 4 (sigmoid top_k), 2 pre-computed topk_ids
#define KB_FP8 0          // 1: fp8 e4m3 activations/weights + per-expert scales; 0: bf16/fp32
#define KB_SCALE_INPUT 0  // 1: routing weight on the input (Llama 4); 0: on the output
#include "../../_shared/trtllm_moe/baseline.cuh"
