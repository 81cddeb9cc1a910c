/* kharness
{
  "launches": [
    { "kernel": "moe_seed_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_seed_expert_lists",
      "grid": ["num_experts", 1, 1], "block": [1, 1, 1], "shared_bytes": "0",
      "args": ["workspace", "seq_len", "num_experts", "top_k"] },
    { "kernel": "moe_seed_gemm1_swiglu",
      "grid": ["cdiv(intermediate_size, 16)", "cdiv(seq_len, 16)", "num_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["hidden_states", "gemm1_weights", "output1_scales_scalar", "output1_scales_gate_scalar", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_seed_gemm2",
      "grid": ["cdiv(hidden_size, 16)", "cdiv(seq_len, 16)", "num_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["gemm2_weights", "output2_scales_scalar", "workspace", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] },
    { "kernel": "moe_seed_combine",
      "grid": ["cdiv(seq_len * hidden_size, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["workspace", "output", "seq_len", "num_experts", "hidden_size",
               "intermediate_size", "top_k"] }
  ],
  "workspace_bytes": "8 * seq_len * top_k + 4 * num_experts + 4 * num_experts * seq_len + 4 * seq_len * top_k * intermediate_size + 4 * seq_len * top_k * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Seed (for now the reference's kernels, renamed: correct and simple, a starting point;
// no faster kernel is written yet) for every trtllm_fp8_per_tensor_scale_moe_topk1_* definition
// (FlashInfer's TensorRT-LLM MoE as FlashInfer-Bench's reference text defines it), every size from
// the axes. With T = seq_len, E = num_experts (all local), H = hidden_size, I = intermediate_size,
// K = top_k:
//   routing: Llama 4 routing (routing_method_type 3): scores sigmoid(float(routing_logits[t])), the
//   top_k largest scores (ties: the lower expert id), weight = the score; routing_bias is an
//   input but ignored, as by the kernel and FlashInfer-Bench's reference;
//   dtypes: hidden_states, gemm1_weights and gemm2_weights float8_e4m3fn with per-expert
//   float32 scales: act = (a @ W1[e, :I].T) * output1_scales_scalar[e], gate = (a @
//   W1[e, I:].T) * output1_scales_gate_scalar[e], o = (c @ W2[e].T) *
//   output2_scales_scalar[e] (fp8 values dequantised exactly to float32);
//   weights: the routing weight scales the token's input: a = float(hidden[t]) * w_k (Llama 4,
//   use_routing_scales_on_input);
//   for each selection (t, k) of expert e: G = a @ W1[e].T (2I values), act = G[:I], gate = G[I:],
//     c = silu(gate) * act (silu(x) = x / (1 + e^-x)), o = c @ W2[e].T (H values);
//   output[t, h] = bf16( sum over the token's selections of (weighted) o[h] ).
#define KB_ROUTING 1      // 0 renormalize, 1 Llama 4 (sigmoid top_k), 2 pre-computed topk_ids
#define KB_FP8 1          // 1: fp8 e4m3 activations/weights + per-expert scales; 0: bf16/fp32
#define KB_SCALE_INPUT 1  // 1: routing weight on the input (Llama 4); 0: on the output
#define KB_KERNEL(name) moe_seed_##name
#include "../_shared/trtllm_moe/reference.cuh"
