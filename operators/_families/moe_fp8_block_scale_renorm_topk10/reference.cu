/* kharness
{
  "launches": [
    { "kernel": "moe_ref_routing",
      "grid": ["cdiv(seq_len, 128)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["routing_logits", "workspace", "seq_len", "num_local_experts"] },
    { "kernel": "moe_ref_expert_lists",
      "grid": ["num_local_experts", 1, 1], "block": [1, 1, 1], "shared_bytes": "0",
      "args": [{"int32": 0}, "workspace", "seq_len", "num_local_experts"] },
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
      "args": [{"int32": 0}, "workspace", "output", "seq_len", "num_local_experts",
               "hidden_size", "intermediate_size"] }
  ],
  "workspace_bytes": "80 * seq_len + 4 * num_local_experts + 4 * num_local_experts * seq_len + 40 * seq_len * intermediate_size + 40 * seq_len * hidden_size",
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for the moe_fp8_block_scale_renorm_topk10 family (FlashInfer's
// trtllm_fp8_block_scale_moe with renormalize routing, routing_method_type 1, top_k 10; Qwen3
// MoE), transcribing FlashInfer-Bench's reference text; every size from the axes. With T =
// seq_len, E = num_local_experts (all experts are local: no offset, no bias, no scaling factor),
// H = hidden_size, I = intermediate_size, block 128:
//   a[t, h]      = float(hidden_states[t, h]) * hidden_states_scale[h / 128, t]      (transposed)
//   W1[e, j, h]  = float(gemm1_weights[e, j, h]) * gemm1_weights_scale[e, j / 128, h / 128]
//   W2[e, h, i]  = float(gemm2_weights[e, h, i]) * gemm2_weights_scale[e, h / 128, i / 128]
//   routing:  the 10 largest float(routing_logits[t]) (ties: the lower expert id; torch.topk
//             leaves ties unspecified), weight_k = softmax over those 10 logits
//   for each selected expert e: G = a[t] @ W1[e].T (2I values);
//     c[i] = silu(G[I + i]) * G[i] (silu(x) = x / (1 + e^-x)); o = c @ W2[e].T (H values)
//   output[t, h] = bf16( sum over the token's selections of weight_k * o[h] )
// Everything in float32, each fp8 value dequantised element by element. Five launches (the
// DeepSeek-routed family's, with this routing), through a workspace:
//   topk_idx int32 [T, 10], topk_w float [T, 10], counts int32 [E], lists int32 [E, T] (slots
//   t*10+k in token order), C float [T*10, I] (SwiGLU output per slot), O float [T*10, H].
// Written to be obviously correct, not fast: one thread per token for routing, one per expert
// for the lists, 16x16 shared-memory tiles for the GEMMs (blocks past an expert's token count
// exit), one thread per output element.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kTopK = 10;
#define KB_KERNEL(name) moe_ref_##name
#include "../_shared/moe_fp8_renorm/reference.cuh"
