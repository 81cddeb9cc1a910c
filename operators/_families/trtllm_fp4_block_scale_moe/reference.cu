/* kharness
{
  "launches": [
    { "kernel": "moe_ref_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_ref_expert_lists",
      "grid": ["num_experts", 1, 1], "block": [1, 1, 1], "shared_bytes": "0",
      "args": ["workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_ref_gemm1_swiglu",
      "grid": ["cdiv(intermediate_size, 16)", "cdiv(seq_len, 16)", "num_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["hidden_states", "gemm1_weights", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_ref_gemm2",
      "grid": ["cdiv(hidden_size, 16)", "cdiv(seq_len, 16)", "num_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["gemm2_weights", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_ref_combine",
      "grid": ["cdiv(seq_len * hidden_size, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "output", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] }
  ],
  "workspace_bytes": "8 * seq_len * top_k + 4 * num_experts + 4 * num_experts * seq_len + 4 * seq_len * top_k * intermediate_size + 4 * seq_len * top_k * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every trtllm_fp4_block_scale_moe_* definition (FlashInfer's TensorRT-LLM
// MoE as FlashInfer-Bench's reference text defines it), every size from the axes. With T = seq_len,
// E = num_experts (all local), H = hidden_size, I = intermediate_size, K = top_k:
//   routing: renormalize routing (routing_method_type 1): the top_k largest
//   float(routing_logits[t]) (ties: the lower expert id; torch.topk leaves ties unspecified),
//   weights the softmax of those top_k logits; dtypes: hidden_states bfloat16, gemm1_weights and
//   gemm2_weights float32 (FlashInfer-Bench's definition takes the weights unquantised: the MxFP4
//   packing is the kernel's business); weights: the routing weight scales the expert's output; for
//   each selection (t, k) of expert e: G = a @ W1[e].T (2I values), act = G[:I], gate = G[I:],
//     c = silu(gate) * act (silu(x) = x / (1 + e^-x)), o = c @ W2[e].T (H values);
//   output[t, h] = bf16( sum over the token's selections of (weighted) o[h] ).
#define KB_ROUTING 0      // 0 renormalize, 1 Llama 4 (sigmoid top_k), 2 pre-computed topk_ids
#define KB_FP8 0          // 1: fp8 e4m3 activations/weights + per-expert scales; 0: bf16/fp32
#define KB_SCALE_INPUT 0  // 1: routing weight on the input (Llama 4); 0: on the output
#define KB_KERNEL(name) moe_ref_##name
#include "../_shared/trtllm_moe/reference.cuh"
