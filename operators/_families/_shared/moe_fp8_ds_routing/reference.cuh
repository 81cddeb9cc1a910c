// The reference of the DeepSeek-routed fp8 block-scale MoE families
// (moe_fp8_block_scale_ds_routing_topk8_ng1_kg1 and _ng8_kg4) after their constants, which is also
// their baseline with the kernels renamed: each family's reference.cu and baseline/solution.cu
// define kTopK, kGroups and kTopGroups and KB_KERNEL(name) (moe_ref_<name>, moe_base_<name>), then
// include this text (inlined when it is loaded).
#ifndef KB_KERNEL
#error "define KB_KERNEL(name) before this text"
#endif
constexpr int kMaxExperts = 512;  // largest num_experts the per-thread arrays hold
constexpr int kQuant = 128;       // quantisation block
constexpr int kTile = 16;         // must equal the GEMM plans' block size in x and y

struct Workspace {
  int* topk_idx;
  float* topk_w;
  int* counts;
  int* lists;
  float* C;
  float* O;
};

// The plan's workspace_bytes, in the same order.
__device__ Workspace carve(unsigned char* base, int T, int E, int H, int I) {
  Workspace w;
  size_t off = 0;
  w.topk_idx = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(T) * kTopK * 4;
  w.topk_w = reinterpret_cast<float*>(base + off);
  off += static_cast<size_t>(T) * kTopK * 4;
  w.counts = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(E) * 4;
  w.lists = reinterpret_cast<int*>(base + off);
  off += static_cast<size_t>(E) * T * 4;
  w.C = reinterpret_cast<float*>(base + off);
  off += static_cast<size_t>(T) * kTopK * I * 4;
  w.O = reinterpret_cast<float*>(base + off);
  return w;
}

extern "C" __global__ void KB_KERNEL(routing)(const float* routing_logits,
                                              const __nv_bfloat16* routing_bias,
                                              float routed_scaling_factor, unsigned char* workspace,
                                              int seq_len, int num_experts) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= seq_len || num_experts > kMaxExperts) return;
  Workspace w = carve(workspace, seq_len, 0, 0, 0);  // only topk_idx and topk_w are used
  const int group_size = num_experts / kGroups;

  float s[kMaxExperts], sb[kMaxExperts];
  for (int e = 0; e < num_experts; ++e) {
    const float x = routing_logits[static_cast<size_t>(t) * num_experts + e];
    s[e] = 1.0f / (1.0f + expf(-x));
    sb[e] = s[e] + __bfloat162float(routing_bias[e]);
  }
  // Group scores: the sum of the two largest sb of the group.
  float group_score[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    int best = g * group_size;
    for (int e = g * group_size; e < (g + 1) * group_size; ++e)
      if (sb[e] > sb[best]) best = e;
    int second = -1;
    for (int e = g * group_size; e < (g + 1) * group_size; ++e)
      if (e != best && (second < 0 || sb[e] > sb[second])) second = e;
    group_score[g] = sb[best] + (second >= 0 ? sb[second] : 0.0f);
  }
  // The topk_group best groups.
  bool kept[kGroups] = {};
  for (int r = 0; r < kTopGroups; ++r) {
    int best = -1;
    for (int g = 0; g < kGroups; ++g)
      if (!kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
    kept[best] = true;
  }
  // The top_k experts of the kept groups by sb.
  int chosen[kTopK];
  float s_sum = 0.0f;
  for (int r = 0; r < kTopK; ++r) {
    int best = -1;
    for (int e = 0; e < num_experts; ++e) {
      if (!kept[e / group_size]) continue;
      bool taken = false;
      for (int q = 0; q < r; ++q) taken = taken || chosen[q] == e;
      if (!taken && (best < 0 || sb[e] > sb[best])) best = e;
    }
    chosen[r] = best;
    s_sum += s[best];
  }
  for (int r = 0; r < kTopK; ++r) {
    w.topk_idx[t * kTopK + r] = chosen[r];
    w.topk_w[t * kTopK + r] = s[chosen[r]] / (s_sum + 1e-20f) * routed_scaling_factor;
  }
}

// lists[e, 0..counts[e]) = the slots t*8+k (in increasing order) that selected local expert e.
extern "C" __global__ void KB_KERNEL(expert_lists)(int local_expert_offset,
                                                   unsigned char* workspace, int seq_len,
                                                   int num_local_experts) {
  const int e = blockIdx.x;
  Workspace w = carve(workspace, seq_len, num_local_experts, 0, 0);
  int count = 0;
  for (int slot = 0; slot < seq_len * kTopK; ++slot) {
    if (w.topk_idx[slot] == local_expert_offset + e) {
      w.lists[static_cast<size_t>(e) * seq_len + count] = slot;
      ++count;
    }
  }
  w.counts[e] = count;
}

// C[slot, i] = silu(G[I + i]) * G[i] with G = a[token] @ W1[e].T, for row blockIdx.y*16 + ty of
// expert e = blockIdx.z's list and i = blockIdx.x*16 + tx.
extern "C" __global__ void KB_KERNEL(gemm1_swiglu)(
    const __nv_fp8_e4m3* hidden_states, const float* hidden_states_scale,
    const __nv_fp8_e4m3* gemm1_weights, const float* gemm1_weights_scale, unsigned char* workspace,
    int seq_len, int num_local_experts, int hidden_size, int intermediate_size,
    int num_hidden_blocks, int num_gemm1_out_blocks) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_local_experts, H, I);
  const int e = blockIdx.z;
  const int count = w.counts[e];
  if (blockIdx.y * kTile >= count) return;  // the whole block: no row of this list is here

  __shared__ float a_tile[kTile][kTile];         // a_tile[r][kk] = a(token of row r, k0 + kk)
  __shared__ float up_tile[kTile][kTile + 1];    // up_tile[j][kk] = W1[e, col0 + j, k0 + kk]
  __shared__ float gate_tile[kTile][kTile + 1];  // gate_tile[j][kk] = W1[e, I + col0 + j, ...]

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;  // this thread's row of the list
  const int col = blockIdx.x * kTile + tx;  // this thread's i
  const int load_token = row < count ? w.lists[static_cast<size_t>(e) * T + row] / kTopK : -1;
  const int w_row = blockIdx.x * kTile + ty;  // the row of W1 (up half) this thread loads
  const __nv_fp8_e4m3* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
  const float* S1 =
      gemm1_weights_scale + static_cast<size_t>(e) * num_gemm1_out_blocks * num_hidden_blocks;

  float up = 0.0f, gate = 0.0f;
  for (int k0 = 0; k0 < H; k0 += kTile) {
    const int k = k0 + tx;
    a_tile[ty][tx] =
        (load_token >= 0 && k < H)
            ? static_cast<float>(hidden_states[static_cast<size_t>(load_token) * H + k]) *
                  hidden_states_scale[static_cast<size_t>(k / kQuant) * T + load_token]
            : 0.0f;
    float u = 0.0f, g = 0.0f;
    if (w_row < I && k < H) {
      const int gr = I + w_row;
      u = static_cast<float>(W1[static_cast<size_t>(w_row) * H + k]) *
          S1[static_cast<size_t>(w_row / kQuant) * num_hidden_blocks + k / kQuant];
      g = static_cast<float>(W1[static_cast<size_t>(gr) * H + k]) *
          S1[static_cast<size_t>(gr / kQuant) * num_hidden_blocks + k / kQuant];
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
    const int slot = w.lists[static_cast<size_t>(e) * T + row];
    w.C[static_cast<size_t>(slot) * I + col] = gate / (1.0f + expf(-gate)) * up;
  }
}

// O[slot, h] = C[slot] @ W2[e, h].T, for row blockIdx.y*16 + ty of expert e = blockIdx.z's list
// and h = blockIdx.x*16 + tx.
extern "C" __global__ void KB_KERNEL(gemm2)(const __nv_fp8_e4m3* gemm2_weights,
                                            const float* gemm2_weights_scale,
                                            unsigned char* workspace,
                                            int seq_len, int num_local_experts, int hidden_size,
                                            int intermediate_size, int num_hidden_blocks,
                                            int num_intermediate_blocks) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_local_experts, H, I);
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
  const __nv_fp8_e4m3* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
  const float* S2 =
      gemm2_weights_scale + static_cast<size_t>(e) * num_hidden_blocks * num_intermediate_blocks;

  float sum = 0.0f;
  for (int i0 = 0; i0 < I; i0 += kTile) {
    const int i = i0 + tx;
    c_tile[ty][tx] = (load_slot >= 0 && i < I) ? w.C[static_cast<size_t>(load_slot) * I + i] : 0.0f;
    w_tile[ty][tx] =
        (w_row < H && i < I)
            ? static_cast<float>(W2[static_cast<size_t>(w_row) * I + i]) *
                  S2[static_cast<size_t>(w_row / kQuant) * num_intermediate_blocks + i / kQuant]
            : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += c_tile[ty][kk] * w_tile[tx][kk];
    __syncthreads();
  }
  if (row < count && col < H) w.O[static_cast<size_t>(load_slot) * H + col] = sum;
}

// output[t, h] = bf16( sum over k of topk_w[t, k] * O[t*8+k, h] for the local selections ).
extern "C" __global__ void KB_KERNEL(combine)(int local_expert_offset,
                                              unsigned char* workspace,
                                              __nv_bfloat16* output, int seq_len,
                                              int num_local_experts, int hidden_size,
                                              int intermediate_size) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(seq_len) * hidden_size) return;
  Workspace w = carve(workspace, seq_len, num_local_experts, hidden_size, intermediate_size);
  const int t = static_cast<int>(index / hidden_size), h = static_cast<int>(index % hidden_size);
  float sum = 0.0f;
  for (int k = 0; k < kTopK; ++k) {
    const int slot = t * kTopK + k;
    const int e = w.topk_idx[slot] - local_expert_offset;
    if (e >= 0 && e < num_local_experts)
      sum += w.topk_w[slot] * w.O[static_cast<size_t>(slot) * hidden_size + h];
  }
  output[index] = __float2bfloat16_rn(sum);
}
