// The seed of the renormalize-routed fp8 block-scale MoE families (moe_fp8_block_scale_renorm_topk8
// and _topk10) after their constants: each family's seed.cu defines kTopK, then includes this text
// (inlined when it is loaded).
constexpr int kQuant = 128;
constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 256;
constexpr int kTM = kBM / 8, kTN = kBN / 32;

struct Workspace {
  int* topk_idx;
  float* topk_w;
  int* counts;
  int* lists;
  float* C;
  float* O;
};

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

__device__ __forceinline__ void fp8x4_to_float(unsigned int w, float* f) {
  const __half2_raw lo =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xFFFFu), __NV_E4M3);
  const __half2_raw hi =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

// Renormalize routing (FlashInfer routing_method_type 1, no bias, every expert local): the
// top_k experts by logit (ties: the lower expert id), weights the softmax of their logits.
extern "C" __global__ void moe_seed_routing(const __nv_bfloat16* routing_logits,
                                unsigned char* workspace, int seq_len, int num_experts) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= seq_len) return;
  Workspace w = carve(workspace, seq_len, 0, 0, 0);  // only topk_idx and topk_w are used
  const __nv_bfloat16* logits = routing_logits + static_cast<size_t>(t) * num_experts;
  int chosen[kTopK];
  float value[kTopK];
  for (int r = 0; r < kTopK; ++r) {
    int best = -1;
    for (int e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int q = 0; q < r; ++q) taken = taken || chosen[q] == e;
      if (!taken && (best < 0 || __bfloat162float(logits[e]) > __bfloat162float(logits[best])))
        best = e;
    }
    chosen[r] = best;
    value[r] = __bfloat162float(logits[best]);
  }
  float sum = 0.0f;  // value[0] is the largest
  for (int r = 0; r < kTopK; ++r) sum += expf(value[r] - value[0]);
  for (int r = 0; r < kTopK; ++r) {
    w.topk_idx[t * kTopK + r] = chosen[r];
    w.topk_w[t * kTopK + r] = expf(value[r] - value[0]) / sum;
  }
}

// One block per local expert: the slots that chose it, in increasing order.
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_seed_expert_lists(int local_expert_offset, unsigned char* workspace, int seq_len,
                          int num_local_experts) {
  __shared__ int warp_counts[kThreads / 32];
  __shared__ int base;
  const int e = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  Workspace w = carve(workspace, seq_len, num_local_experts, 0, 0);
  int* list = w.lists + static_cast<size_t>(e) * seq_len;
  if (tid == 0) base = 0;
  __syncthreads();
  const int slots = seq_len * kTopK;
  for (int s0 = 0; s0 < slots; s0 += kThreads) {
    const int slot = s0 + tid;
    const bool hit = slot < slots && w.topk_idx[slot] == local_expert_offset + e;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, hit);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = base;
    for (int q = 0; q < warp; ++q) before += warp_counts[q];
    if (hit) list[before + __popc(ballot & ((1u << lane) - 1u))] = slot;
    __syncthreads();
    if (tid == 0) {
      int total = 0;
      for (int q = 0; q < kThreads / 32; ++q) total += warp_counts[q];
      base += total;
    }
    __syncthreads();
  }
  if (tid == 0) w.counts[e] = base;
}

// Stages rows [n0, n0 + 64) x K-slice [k0, k0 + 32) of a [rows, K] fp8 matrix with 128x128
// block scales `scale` ([rows/128, K/128]) into dst[kk][j], dequantised.
__device__ __forceinline__ void stage_weights(float (*dst)[kBN + 4], const __nv_fp8_e4m3* W,
                                              const float* scale, int rows, int K, int n0, int k0,
                                              int k_blocks, int tid) {
  const unsigned int* W32 = reinterpret_cast<const unsigned int*>(W);
  for (int e = tid; e < kBN * (kBK / 4); e += kThreads) {
    const int r = e / (kBK / 4), q = e % (kBK / 4);
    const int n = n0 + r;
    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n < rows) {
      fp8x4_to_float(W32[(static_cast<size_t>(n) * K + k0) / 4 + q], f);
      const float s = scale[static_cast<size_t>(n / kQuant) * k_blocks + k0 / kQuant];
#pragma unroll
      for (int x = 0; x < 4; ++x) f[x] *= s;
    }
#pragma unroll
    for (int x = 0; x < 4; ++x) dst[4 * q + x][r] = f[x];
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_seed_gemm1_swiglu(const __nv_fp8_e4m3* __restrict__ hidden_states,
                          const float* __restrict__ hidden_states_scale,
                          const __nv_fp8_e4m3* __restrict__ gemm1_weights,
                          const float* __restrict__ gemm1_weights_scale, unsigned char* workspace,
                          int seq_len, int num_local_experts, int hidden_size,
                          int intermediate_size, int num_hidden_blocks, int num_gemm1_out_blocks) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_local_experts, H, I);
  const int e = blockIdx.z, count = w.counts[e];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (m0 >= count) return;

  __shared__ float a_s[kBK][kBM + 4];
  __shared__ float up_s[kBK][kBN + 4];
  __shared__ float gate_s[kBK][kBN + 4];
  __shared__ int token_s[kBM];
  __shared__ int slot_s[kBM];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid < kBM) {
    const int row = m0 + tid;
    slot_s[tid] = row < count ? w.lists[static_cast<size_t>(e) * T + row] : -1;
    token_s[tid] = row < count ? slot_s[tid] / kTopK : -1;
  }
  __syncthreads();
  const int my_rows = min(kTM, max(0, count - m0 - warp * kTM));
  const __nv_fp8_e4m3* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
  const float* S1 =
      gemm1_weights_scale + static_cast<size_t>(e) * num_gemm1_out_blocks * num_hidden_blocks;
  const unsigned int* X32 = reinterpret_cast<const unsigned int*>(hidden_states);

  float up[kTM][kTN], gate[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) up[i][j] = gate[i][j] = 0.0f;

  for (int k0 = 0; k0 < H; k0 += kBK) {
    for (int x = tid; x < kBM * (kBK / 4); x += kThreads) {
      const int r = x / (kBK / 4), q = x % (kBK / 4);
      const int t = token_s[r];
      float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (t >= 0) {
        fp8x4_to_float(X32[(static_cast<size_t>(t) * H + k0) / 4 + q], f);
        const float s = hidden_states_scale[static_cast<size_t>(k0 / kQuant) * T + t];
#pragma unroll
        for (int y = 0; y < 4; ++y) f[y] *= s;
      }
#pragma unroll
      for (int y = 0; y < 4; ++y) a_s[4 * q + y][r] = f[y];
    }
    stage_weights(up_s, W1, S1, I, H, n0, k0, num_hidden_blocks, tid);
    stage_weights(gate_s, W1 + static_cast<size_t>(I) * H, S1 + (I / kQuant) * num_hidden_blocks, I,
                  H, n0, k0, num_hidden_blocks, tid);
    __syncthreads();
    if (my_rows > 0) {
#pragma unroll 4
      for (int kk = 0; kk < kBK; ++kk) {
        float u[kTN], g[kTN];
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          u[j] = up_s[kk][lane + 32 * j];
          g[j] = gate_s[kk][lane + 32 * j];
        }
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
          if (i < my_rows) {
            const float a = a_s[kk][warp * kTM + i];
#pragma unroll
            for (int j = 0; j < kTN; ++j) {
              up[i][j] = fmaf(a, u[j], up[i][j]);
              gate[i][j] = fmaf(a, g[j], gate[i][j]);
            }
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    if (i >= my_rows) break;
    const int slot = slot_s[warp * kTM + i];
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int n = n0 + lane + 32 * j;
      if (n < I) {
        const float gt = gate[i][j];
        w.C[static_cast<size_t>(slot) * I + n] = gt / (1.0f + expf(-gt)) * up[i][j];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_seed_gemm2(const __nv_fp8_e4m3* __restrict__ gemm2_weights,
                   const float* __restrict__ gemm2_weights_scale, unsigned char* workspace,
                   int seq_len, int num_local_experts, int hidden_size, int intermediate_size,
                   int num_hidden_blocks, int num_intermediate_blocks) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_local_experts, H, I);
  const int e = blockIdx.z, count = w.counts[e];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (m0 >= count) return;

  __shared__ float c_s[kBK][kBM + 4];
  __shared__ float w_s[kBK][kBN + 4];
  __shared__ int slot_s[kBM];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid < kBM) {
    const int row = m0 + tid;
    slot_s[tid] = row < count ? w.lists[static_cast<size_t>(e) * T + row] : -1;
  }
  __syncthreads();
  const int my_rows = min(kTM, max(0, count - m0 - warp * kTM));
  const __nv_fp8_e4m3* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
  const float* S2 =
      gemm2_weights_scale + static_cast<size_t>(e) * num_hidden_blocks * num_intermediate_blocks;

  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < I; k0 += kBK) {
    for (int x = tid; x < kBM * (kBK / 4); x += kThreads) {
      const int r = x / (kBK / 4), q = x % (kBK / 4);
      const int slot = slot_s[r];
      const float* c = w.C + static_cast<size_t>(slot) * I + k0 + 4 * q;
#pragma unroll
      for (int y = 0; y < 4; ++y) c_s[4 * q + y][r] = slot >= 0 ? c[y] : 0.0f;
    }
    stage_weights(w_s, W2, S2, H, I, n0, k0, num_intermediate_blocks, tid);
    __syncthreads();
    if (my_rows > 0) {
#pragma unroll 4
      for (int kk = 0; kk < kBK; ++kk) {
        float b[kTN];
#pragma unroll
        for (int j = 0; j < kTN; ++j) b[j] = w_s[kk][lane + 32 * j];
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
          if (i < my_rows) {
            const float a = c_s[kk][warp * kTM + i];
#pragma unroll
            for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a, b[j], acc[i][j]);
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    if (i >= my_rows) break;
    const int slot = slot_s[warp * kTM + i];
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int n = n0 + lane + 32 * j;
      if (n < H) w.O[static_cast<size_t>(slot) * H + n] = acc[i][j];
    }
  }
}

// One block per token.
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_seed_combine(int local_expert_offset, unsigned char* workspace,
                     __nv_bfloat16* __restrict__ output, int seq_len, int num_local_experts,
                     int hidden_size, int intermediate_size) {
  const int t = blockIdx.x;
  Workspace w = carve(workspace, seq_len, num_local_experts, hidden_size, intermediate_size);
  __shared__ int slots[kTopK];
  __shared__ float weights[kTopK];
  __shared__ int n_local;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int k = 0; k < kTopK; ++k) {
      const int slot = t * kTopK + k;
      const int e = w.topk_idx[slot] - local_expert_offset;
      if (e >= 0 && e < num_local_experts) {
        slots[n] = slot;
        weights[n] = w.topk_w[slot];
        ++n;
      }
    }
    n_local = n;
  }
  __syncthreads();
  for (int h = threadIdx.x; h < hidden_size; h += blockDim.x) {
    float sum = 0.0f;
    for (int q = 0; q < n_local; ++q)
      sum += weights[q] * w.O[static_cast<size_t>(slots[q]) * hidden_size + h];
    output[static_cast<size_t>(t) * hidden_size + h] = __float2bfloat16_rn(sum);
  }
}
