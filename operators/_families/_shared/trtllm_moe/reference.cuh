// The kernels of the six trtllm MoE families' references and seeds (fp4 / routed / fp8
// per-tensor, each with its topk1 sibling; a seed is its family's reference with the kernels
// renamed), inlined where each family's reference.cu or seed.cu includes it. The family's file
// defines, before the include, KB_ROUTING (0 renormalize, 1 Llama 4 sigmoid top_k, 2 pre-computed
// topk_ids), KB_FP8 (1: fp8 e4m3 activations and weights with per-expert float32 output scales;
// 0: bf16 activations, float32 weights), KB_SCALE_INPUT (1: the routing weight scales the token's
// input, Llama 4; 0: the expert's output in the combine) and KB_KERNEL(name), the kernels' names
// (moe_ref_<name> or moe_seed_<name>).
#if !defined(KB_ROUTING) || !defined(KB_FP8) || !defined(KB_SCALE_INPUT) || \
    !defined(KB_KERNEL)
#error "define KB_ROUTING, KB_FP8, KB_SCALE_INPUT and KB_KERNEL before this text"
#endif
// Everything in float32 (fp8 values dequantised exactly). Five launches through a workspace:
// topk_idx int32 [T, K], topk_w float [T, K], counts int32 [E], lists int32 [E, T] (the slots t*K+k
// that chose each expert, in token order), C float [T*K, I] (SwiGLU output per slot), O float [T*K,
// H] (GEMM2 output per slot). Written to be obviously correct, not fast: one thread per token for
// routing, one per expert for the lists, 16x16 shared-memory tiles for the GEMMs (blocks past an
// expert's count exit), one thread per output element. A token's K experts are distinct (the
// generators make them so), so an expert's list holds at most T slots.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#if KB_ROUTING != 2
constexpr int kMaxTopK = 16;  // largest top_k the routing's per-thread arrays hold
#endif
constexpr int kTile = 16;     // must equal the GEMM plans' block size in x and y

struct Workspace {
  int* topk_idx;
  float* topk_w;
  int* counts;
  int* lists;
  float* C;
  float* O;
};

// The plan's workspace_bytes, in the same order.
__device__ Workspace carve(unsigned char* base, int T, int E, int H, int I, int K) {
  Workspace w;
  size_t off = 0;
  w.topk_idx = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(T) * K * 4;
  w.topk_w = reinterpret_cast<float*>(base + off);
  off += static_cast<size_t>(T) * K * 4;
  w.counts = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(E) * 4;
  w.lists = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(E) * T * 4;
  w.C = reinterpret_cast<float*>(base + off);
  off += static_cast<size_t>(T) * K * I * 4;
  w.O = reinterpret_cast<float*>(base + off);
  return w;
}

#if KB_ROUTING == 2
// Pre-computed routing: topk_ids[t, k] = expert << 16 | bf16 bits of the weight.
extern "C" __global__ void KB_KERNEL(routing)(const int* topk_ids, unsigned char* workspace,
                                              int seq_len, int num_experts, int top_k) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= seq_len) return;
  Workspace w = carve(workspace, seq_len, 0, 0, 0, top_k);
  for (int k = 0; k < top_k; ++k) {
    const unsigned v = static_cast<unsigned>(topk_ids[static_cast<size_t>(t) * top_k + k]);
    w.topk_idx[t * top_k + k] = static_cast<short>(v >> 16);         // an int16 expert id
    w.topk_w[t * top_k + k] = __uint_as_float((v & 0xFFFFu) << 16);  // bf16 bits -> float
  }
}
#else
// Renormalize (KB_ROUTING 0: softmax of the top_k logits) or Llama 4 routing (1: the top_k
// sigmoid scores, weight = the score).
extern "C" __global__ void KB_KERNEL(routing)(const __nv_bfloat16* routing_logits,
                                              unsigned char* workspace, int seq_len,
                                              int num_experts, int top_k) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= seq_len || top_k > kMaxTopK) return;
  Workspace w = carve(workspace, seq_len, 0, 0, 0, top_k);
  const __nv_bfloat16* logits = routing_logits + static_cast<size_t>(t) * num_experts;
  int chosen[kMaxTopK];
  float value[kMaxTopK];
  for (int r = 0; r < top_k; ++r) {
    int best = -1;
    float best_value = 0.0f;
    for (int e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int q = 0; q < r; ++q) taken = taken || chosen[q] == e;
#if KB_ROUTING == 1
      const float v = 1.0f / (1.0f + expf(-__bfloat162float(logits[e])));
#else
      const float v = __bfloat162float(logits[e]);
#endif
      if (!taken && (best < 0 || v > best_value)) {
        best = e;
        best_value = v;
      }
    }
    chosen[r] = best;
    value[r] = best_value;
  }
#if KB_ROUTING == 1
  for (int r = 0; r < top_k; ++r) {
    w.topk_idx[t * top_k + r] = chosen[r];
    w.topk_w[t * top_k + r] = value[r];
  }
#else
  float sum = 0.0f;  // value[0] is the largest
  for (int r = 0; r < top_k; ++r) sum += expf(value[r] - value[0]);
  for (int r = 0; r < top_k; ++r) {
    w.topk_idx[t * top_k + r] = chosen[r];
    w.topk_w[t * top_k + r] = expf(value[r] - value[0]) / sum;
  }
#endif
}
#endif

// lists[e, 0..counts[e]) = the slots t*K+k (in increasing order) that selected expert e.
extern "C" __global__ void KB_KERNEL(expert_lists)(unsigned char* workspace, int seq_len,
                                                   int num_experts, int top_k) {
  const int e = blockIdx.x;
  Workspace w = carve(workspace, seq_len, num_experts, 0, 0, top_k);
  int count = 0;
  for (int slot = 0; slot < seq_len * top_k; ++slot) {
    if (w.topk_idx[slot] == e && count < seq_len) {
      w.lists[static_cast<size_t>(e) * seq_len + count] = slot;
      ++count;
    }
  }
  w.counts[e] = count;
}

// C[slot, i] = silu(gate) * act for row blockIdx.y*16 + ty of expert e = blockIdx.z's list and
// i = blockIdx.x*16 + tx.
#if KB_FP8
extern "C" __global__ void KB_KERNEL(gemm1_swiglu)(const __nv_fp8_e4m3* hidden_states,
                                                   const __nv_fp8_e4m3* gemm1_weights,
                                                   const float* output1_scales_scalar,
                                                   const float* output1_scales_gate_scalar,
#else
extern "C" __global__ void KB_KERNEL(gemm1_swiglu)(const __nv_bfloat16* hidden_states,
                                                   const float* gemm1_weights,
#endif
                                                   unsigned char* workspace, int seq_len,
                                                int num_experts, int hidden_size,
                                                int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, H, I, top_k);
  const int e = blockIdx.z;
  const int count = w.counts[e];
  if (blockIdx.y * kTile >= count) return;  // the whole block: no row of this list is here

  __shared__ float a_tile[kTile][kTile];         // a_tile[r][kk] = a(row r, k0 + kk)
  __shared__ float up_tile[kTile][kTile + 1];    // up_tile[j][kk] = W1[e, col0 + j, k0 + kk]
  __shared__ float gate_tile[kTile][kTile + 1];  // gate_tile[j][kk] = W1[e, I + col0 + j, ...]

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;  // this thread's row of the list
  const int col = blockIdx.x * kTile + tx;  // this thread's i
  const int slot_of_row = row < count ? w.lists[static_cast<size_t>(e) * T + row] : -1;
  const int load_token = slot_of_row >= 0 ? slot_of_row / top_k : -1;
  const int w_row = blockIdx.x * kTile + ty;  // the row of W1 (act half) this thread loads
#if KB_FP8
  const __nv_fp8_e4m3* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
#else
  const float* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
#endif

  float up = 0.0f, gate = 0.0f;
  for (int k0 = 0; k0 < H; k0 += kTile) {
    const int k = k0 + tx;
#if KB_FP8 && KB_SCALE_INPUT
    a_tile[ty][tx] =
        (load_token >= 0 && k < H)
            ? static_cast<float>(hidden_states[static_cast<size_t>(load_token) * H + k]) *
                  w.topk_w[slot_of_row]
            : 0.0f;
#elif KB_FP8
    a_tile[ty][tx] =
        (load_token >= 0 && k < H)
            ? static_cast<float>(hidden_states[static_cast<size_t>(load_token) * H + k])
            : 0.0f;
#elif KB_SCALE_INPUT
    a_tile[ty][tx] =
        (load_token >= 0 && k < H)
            ? __bfloat162float(hidden_states[static_cast<size_t>(load_token) * H + k]) *
                  w.topk_w[slot_of_row]
            : 0.0f;
#else
    a_tile[ty][tx] = (load_token >= 0 && k < H)
                         ? __bfloat162float(hidden_states[static_cast<size_t>(load_token) * H + k])
                         : 0.0f;
#endif
    float u = 0.0f, g = 0.0f;
    if (w_row < I && k < H) {
      u = static_cast<float>(W1[static_cast<size_t>(w_row) * H + k]);
      g = static_cast<float>(W1[static_cast<size_t>(I + w_row) * H + k]);
    }
    up_tile[ty][tx] = u;
    gate_tile[ty][tx] = g;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) {
      up += a_tile[ty][kk] * up_tile[tx][kk];
      gate += a_tile[ty][kk] * gate_tile[tx][kk];
    }
    __syncthreads();
  }
  if (row < count && col < I) {
#if KB_FP8
    const float act = up * output1_scales_scalar[e], gt = gate * output1_scales_gate_scalar[e];
#else
    const float act = up, gt = gate;
#endif
    w.C[static_cast<size_t>(slot_of_row) * I + col] = gt / (1.0f + expf(-gt)) * act;
  }
}

// O[slot, h] = C[slot] @ W2[e, h].T, for row blockIdx.y*16 + ty of expert e = blockIdx.z's list
// and h = blockIdx.x*16 + tx.
#if KB_FP8
extern "C" __global__ void KB_KERNEL(gemm2)(const __nv_fp8_e4m3* gemm2_weights,
                                            const float* output2_scales_scalar,
#else
extern "C" __global__ void KB_KERNEL(gemm2)(const float* gemm2_weights,
#endif
                                            unsigned char* workspace, int seq_len, int num_experts,
                                            int hidden_size, int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, H, I, top_k);
  const int e = blockIdx.z;
  const int count = w.counts[e];
  if (blockIdx.y * kTile >= count) return;

  __shared__ float c_tile[kTile][kTile];      // c_tile[r][kk] = C[slot of row r, i0 + kk]
  __shared__ float w_tile[kTile][kTile + 1];  // w_tile[j][kk] = W2[e, col0 + j, i0 + kk]

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;
  const int col = blockIdx.x * kTile + tx;
  const int load_slot = row < count ? w.lists[static_cast<size_t>(e) * T + row] : -1;
  const int w_row = blockIdx.x * kTile + ty;
#if KB_FP8
  const __nv_fp8_e4m3* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
#else
  const float* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
#endif

  float sum = 0.0f;
  for (int i0 = 0; i0 < I; i0 += kTile) {
    const int i = i0 + tx;
    c_tile[ty][tx] = (load_slot >= 0 && i < I) ? w.C[static_cast<size_t>(load_slot) * I + i] : 0.0f;
    w_tile[ty][tx] =
        (w_row < H && i < I) ? static_cast<float>(W2[static_cast<size_t>(w_row) * I + i]) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += c_tile[ty][kk] * w_tile[tx][kk];
    __syncthreads();
  }
#if KB_FP8
  if (row < count && col < H)
    w.O[static_cast<size_t>(load_slot) * H + col] = sum * output2_scales_scalar[e];
#else
  if (row < count && col < H) w.O[static_cast<size_t>(load_slot) * H + col] = sum;
#endif
}

// output[t, h] = bf16( sum over k of (weighted) O[t*K+k, h] ).
extern "C" __global__ void KB_KERNEL(combine)(unsigned char* workspace, __nv_bfloat16* output,
                                              int seq_len, int num_experts, int hidden_size,
                                              int intermediate_size, int top_k) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(seq_len) * hidden_size) return;
  Workspace w = carve(workspace, seq_len, num_experts, hidden_size, intermediate_size, top_k);
  const int t = static_cast<int>(index / hidden_size), h = static_cast<int>(index % hidden_size);
  float sum = 0.0f;
  for (int k = 0; k < top_k; ++k) {
    const int slot = t * top_k + k;
    const int e = w.topk_idx[slot];
#if KB_SCALE_INPUT
    if (e >= 0 && e < num_experts) sum += w.O[static_cast<size_t>(slot) * hidden_size + h];
#else
    if (e >= 0 && e < num_experts)
      sum += w.topk_w[slot] * w.O[static_cast<size_t>(slot) * hidden_size + h];
#endif
  }
  output[index] = __float2bfloat16_rn(sum);
}
