/* kharness
{
  "launches": [
    { "kernel": "moe_base_routing",
      "grid": ["cdiv(seq_len, 8)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_experts", "top_k"] },
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
// Baseline for every trtllm_fp4_block_scale_moe_* definition, following the family's
// reference.cu exactly: renormalize routing (routing_method_type 1): the top_k largest bf16
// logits (ties to the lower expert id), weights the softmax over them; bf16 activations, float32
// weights (FlashInfer-Bench takes them unquantised: no fp4 decoding); the routing weight scales
// the expert's output in the combine; every expert local; SwiGLU c = silu(G[I:]) * G[:I] with G
// = a @ W1[e].T.
#define KB_ROUTING 0      // 0 renormalize, 1 Llama 4 (sigmoid top_k), 2 pre-computed topk_ids
#define KB_FP8 0          // 1: fp8 e4m3 activations/weights + per-expert scales; 0: bf16/fp32
#define KB_SCALE_INPUT 0  // 1: routing weight on the input (Llama 4); 0: on the output
#include "../../_shared/trtllm_moe/baseline.cuh"
