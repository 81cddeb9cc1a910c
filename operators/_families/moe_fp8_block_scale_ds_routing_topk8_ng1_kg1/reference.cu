/* kharness
{
  "launches": [
    { "kernel": "moe_ref_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "routing_bias", "routed_scaling_factor", "workspace",
               "seq_len", "num_experts"] },
    { "kernel": "moe_ref_expert_lists",
      "grid": ["num_local_experts", 1, 1], "block": [1, 1, 1], "shared_bytes": "0",
      "args": ["local_expert_offset", "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_ref_gemm1_swiglu",
      "grid": ["cdiv(intermediate_size, 16)", "cdiv(seq_len, 16)", "num_local_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["hidden_states", "hidden_states_scale", "gemm1_weights", "gemm1_weights_scale",
               "workspace", "seq_len", "num_local_experts", "hidden_size", "intermediate_size",
               "num_hidden_blocks", "num_gemm1_out_blocks"] },
    { "kernel": "moe_ref_gemm2",
      "grid": ["cdiv(hidden_size, 16)", "cdiv(seq_len, 16)", "num_local_experts"],
      "block": [16, 16, 1], "shared_bytes": "0",
      "args": ["gemm2_weights", "gemm2_weights_scale", "workspace", "seq_len",
               "num_local_experts", "hidden_size", "intermediate_size", "num_hidden_blocks",
               "num_intermediate_blocks"] },
    { "kernel": "moe_ref_combine",
      "grid": ["cdiv(seq_len * hidden_size, 256)", 1, 1], "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["local_expert_offset", "workspace", "output", "seq_len", "num_local_experts",
               "hidden_size", "intermediate_size"] }
  ],
  "workspace_bytes": "64 * seq_len + 4 * num_local_experts + 4 * num_local_experts * seq_len + 32 * seq_len * intermediate_size + 32 * seq_len * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for the moe_fp8_block_scale_ds_routing_topk8_ng1_kg1 family (FlashInfer's
// trtllm_fp8_block_scale_moe with DeepSeek routing, n_group 1, topk_group 1: one group, so the
// group selection keeps every expert and the routing is a direct top-8 of sb; the
// constants come from the family name, every size from the axes). With T = seq_len, E_g =
// num_experts, E = num_local_experts, H = hidden_size, I = intermediate_size, block 128:
//   a[t, h]      = float(hidden_states[t, h]) * hidden_states_scale[h / 128, t]      (transposed)
//   W1[e, j, h]  = float(gemm1_weights[e, j, h]) * gemm1_weights_scale[e, j / 128, h / 128]
//   W2[e, h, i]  = float(gemm2_weights[e, h, i]) * gemm2_weights_scale[e, h / 128, i / 128]
//   routing:  s = sigmoid(logits), sb = s + bias; groups of E_g / 8 experts scored by the sum
//             of their two largest sb; the 4 best groups kept; the 8 largest sb among their
//             experts selected; weight_k = s[sel_k] / (sum_k s[sel_k] + 1e-20) * routed_scaling
//   for each selected expert g = local_expert_offset + e that is local (0 <= e < E):
//     G = a[t] @ W1[e].T (2I values); c[i] = silu(G[I + i]) * G[i]   (silu(x) = x / (1 + e^-x))
//     o = c @ W2[e].T (H values)
//   output[t, h] = bf16( sum over the token's local selections of weight_k * o[h] )
// Everything in float32, each fp8 value dequantised element by element; ties in the top-k
// choices go to the lower index. Five launches, through a workspace:
//   topk_idx  int32 [T, 8]  global expert ids       topk_w   float [T, 8]
//   counts    int32 [E]                              lists    int32 [E, T]  slots t*8+k, token
//   order C         float [T*8, I] SwiGLU output per slot  O        float [T*8, H] GEMM2 output per
//   slot
// Only the slots of local selections are written and read. Written to be obviously correct, not
// fast: one thread per token for routing, one per expert for the lists, 16x16 shared-memory tiles
// for the GEMMs (blocks past an expert's token count exit), one thread per output element.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kTopK = 8, kGroups = 1, kTopGroups = 1;  // n_group 1: a direct top-8
#define KB_KERNEL(name) moe_ref_##name
#include "../_shared/moe_fp8_ds_routing/reference.cuh"
