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
      "args": ["hidden_states", "gemm1_weights", "output1_scales_scalar",
               "output1_scales_gate_scalar", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm1_tiled",
      "grid": ["cdiv(intermediate_size, 64)", "cdiv(seq_len, 64)", "num_experts"],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "gemm1_weights", "output1_scales_scalar",
               "output1_scales_gate_scalar", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm2_skinny",
      "grid": ["cdiv(hidden_size, 8)", "num_experts", 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["gemm2_weights", "output2_scales_scalar", "workspace", "seq_len", "num_experts",
               "hidden_size", "intermediate_size", "top_k"] },
    { "kernel": "moe_base_gemm2_tiled",
      "grid": ["cdiv(hidden_size, 64)", "cdiv(seq_len, 64)", "num_experts"], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["gemm2_weights", "output2_scales_scalar", "workspace", "seq_len", "num_experts",
               "hidden_size", "intermediate_size", "top_k"] },
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
// Baseline for every trtllm_fp8_per_tensor_scale_moe_topk1_* definition, following the family's
// reference.cu exactly: Llama 4 routing (routing_method_type 3): the top_k largest sigmoid
// scores of the logits (ties to the lower expert id), weight = the score; routing_bias is
// ignored, as by the reference; fp8 e4m3 activations and weights, dequantised exactly, with
// per-expert float32 output scales (act * output1_scales_scalar[e], gate *
// output1_scales_gate_scalar[e], GEMM2 * output2_scales_scalar[e]); the routing weight scales
// the token's input (a = float(x) * w, Llama 4) and the combine sums the expert outputs
// unweighted; every expert local; SwiGLU c = silu(G[I:]) * G[:I] with G = a @ W1[e].T.
#define KB_ROUTING 1      // 0 renormalize, 1 Llama 4 (sigmoid top_k), 2 pre-computed topk_ids
#define KB_FP8 1          // 1: fp8 e4m3 activations/weights + per-expert scales; 0: bf16/fp32
#define KB_SCALE_INPUT 1  // 1: routing weight on the input (Llama 4); 0: on the output
#include "../../_shared/trtllm_moe/baseline.cuh"
