// The straightforward implementation speedups are measured against, on CUDA cores in float32,
// seven launches through a workspace:
//   1. routing: one warp per token, top_k rounds of a warp arg-max (lane r keeps pick r);
//      pre-computed routing (KB_ROUTING 2): one thread per (token, k) unpacks topk_ids;
//   2. per expert, the slots t*K+k that chose it in slot order (one block per expert, a
//      block-wide scan: deterministic);
//   3-4. GEMM1 + SwiGLU over each expert's gathered rows: experts with 1..16 rows by a skinny
//      kernel (one warp per output column, lanes over K, warp-shuffle sums: streams the
//      weights once, for decode), the others by a tiled kernel (64 rows x 64 columns a block,
//      K in stages of 16 through shared memory, 4x4 register tiles; sums in increasing k, as
//      the reference);
//   5-6. GEMM2 the same way;
//   7. combine: one thread per output element, the token's K slots in increasing k.
// Workspace (each section padded to 256 bytes): topk_idx, topk_w [T, K]; counts [E]; lists [E,
// T]; C [T*K, I]; O [T*K, H] by slot. Nothing is assumed zero: every element read is written
// first in the same run.
// The six trtllm MoE baselines (fp4 / routed / fp8 per-tensor, each with its topk1 sibling)
// share this source (operators/_families/_shared/trtllm_moe/baseline.cuh, inlined where each
// family's baseline/solution.cu includes it): only the three KB_ defines differ, set by the
// family's file before the include; every size, top_k included, comes from the axes.

#if !defined(KB_ROUTING) || !defined(KB_FP8) || !defined(KB_SCALE_INPUT)
#error "define KB_ROUTING, KB_FP8 and KB_SCALE_INPUT before this text"
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#if KB_FP8
typedef __nv_fp8_e4m3 AType;  // hidden_states
typedef __nv_fp8_e4m3 WType;  // gemm1_weights, gemm2_weights
#else
typedef __nv_bfloat16 AType;
typedef float WType;
#endif

constexpr int kWarps = 8;    // warps per block: every kernel runs 256 threads (the plan's blocks)
constexpr int kSkinny = 16;  // experts with 1..16 rows: skinny kernels; more: tiled kernels
constexpr int kBM = 64;      // tiled kernels: rows of an expert's list per block
constexpr int kBN = 64;      // tiled kernels: output columns per block (GEMM1: 64 up + 64 gate)
constexpr int kBK = 16;      // tiled kernels: K per shared-memory stage
constexpr int kPad = 4;      // shared-memory row padding (keeps rows 16-byte aligned)
constexpr unsigned kFull = 0xffffffffu;

struct Workspace {
  int* topk_idx;  // [T, K]
  float* topk_w;  // [T, K]
  int* counts;    // [E]
  int* lists;     // [E, T]: slots t*K+k that chose expert e, increasing
  float* C;       // [T*K, I]: SwiGLU output per slot
  float* O;       // [T*K, H]: GEMM2 output per slot
};

__device__ __forceinline__ size_t pad256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The plan's workspace_bytes, in the same order: every section padded to 256 bytes.
__device__ Workspace carve(unsigned char* base, int T, int E, int I, int K) {
  Workspace w;
  size_t off = 0;
  w.topk_idx = reinterpret_cast<int*>(base + off);
  off += pad256(static_cast<size_t>(T) * K * 4);
  w.topk_w = reinterpret_cast<float*>(base + off);
  off += pad256(static_cast<size_t>(T) * K * 4);
  w.counts = reinterpret_cast<int*>(base + off);
  off += pad256(static_cast<size_t>(E) * 4);
  w.lists = reinterpret_cast<int*>(base + off);
  off += pad256(static_cast<size_t>(E) * T * 4);
  w.C = reinterpret_cast<float*>(base + off);
  off += pad256(static_cast<size_t>(T) * K * I * 4);
  w.O = reinterpret_cast<float*>(base + off);
  return w;
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<size_t>(p) & 15) == 0;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFull, v, offset);
  return v;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float fp8_bits(unsigned bits) {
  __nv_fp8_e4m3 v;
  v.__x = static_cast<__nv_fp8_storage_t>(bits & 0xFFu);
  return static_cast<float>(v);  // exact
}

// p[row + i .. row + i + 3] as floats (i a multiple of 4), elements at or past n read as 0.
// vec: the caller checked that n is a multiple of 4 and p 16-byte aligned, so one aligned vector
// load reads the group (all four inside the row when i < n).
__device__ __forceinline__ float4 load4(const float* p, size_t row, int i, int n, bool vec) {
  if (vec) {
    if (i >= n) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return *reinterpret_cast<const float4*>(p + row + i);
  }
  float4 r;
  r.x = i + 0 < n ? p[row + i + 0] : 0.0f;
  r.y = i + 1 < n ? p[row + i + 1] : 0.0f;
  r.z = i + 2 < n ? p[row + i + 2] : 0.0f;
  r.w = i + 3 < n ? p[row + i + 3] : 0.0f;
  return r;
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p, size_t row, int i, int n,
                                        bool vec) {
  if (vec) {
    if (i >= n) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const uint2 u = *reinterpret_cast<const uint2*>(p + row + i);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xFFFF0000u));
  }
  float4 r;
  r.x = i + 0 < n ? __bfloat162float(p[row + i + 0]) : 0.0f;
  r.y = i + 1 < n ? __bfloat162float(p[row + i + 1]) : 0.0f;
  r.z = i + 2 < n ? __bfloat162float(p[row + i + 2]) : 0.0f;
  r.w = i + 3 < n ? __bfloat162float(p[row + i + 3]) : 0.0f;
  return r;
}
__device__ __forceinline__ float4 load4(const __nv_fp8_e4m3* p, size_t row, int i, int n,
                                        bool vec) {
  if (vec) {
    if (i >= n) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const unsigned u = *reinterpret_cast<const unsigned*>(p + row + i);
    return make_float4(fp8_bits(u), fp8_bits(u >> 8), fp8_bits(u >> 16), fp8_bits(u >> 24));
  }
  float4 r;
  r.x = i + 0 < n ? to_float(p[row + i + 0]) : 0.0f;
  r.y = i + 1 < n ? to_float(p[row + i + 1]) : 0.0f;
  r.z = i + 2 < n ? to_float(p[row + i + 2]) : 0.0f;
  r.w = i + 3 < n ? to_float(p[row + i + 3]) : 0.0f;
  return r;
}

__device__ __forceinline__ float4 scaled(float4 a, float s) {
  return make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}

__device__ __forceinline__ float dot4(float acc, float4 a, float4 b) {
  acc += a.x * b.x;  // in increasing k, as the reference
  acc += a.y * b.y;
  acc += a.z * b.z;
  acc += a.w * b.w;
  return acc;
}

#if KB_ROUTING == 2
// Pre-computed routing: topk_ids[t, k] = expert (high 16 bits, an int16) | bf16 weight bits.
extern "C" __global__ void moe_base_routing(const int* topk_ids, unsigned char* workspace,
                                            int seq_len, int num_experts, int top_k) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(seq_len) * top_k) return;
  Workspace w = carve(workspace, seq_len, num_experts, 0, top_k);
  const unsigned v = static_cast<unsigned>(topk_ids[i]);
  w.topk_idx[i] = static_cast<short>(v >> 16);         // an int16 expert id
  w.topk_w[i] = __uint_as_float((v & 0xFFFFu) << 16);  // bf16 bits -> float
}
#else
__device__ __forceinline__ float routing_score(__nv_bfloat16 logit) {
#if KB_ROUTING == 0
  return __bfloat162float(logit);
#else
  return 1.0f / (1.0f + expf(-__bfloat162float(logit)));
#endif
}

// One warp per token. Round r picks the best expert after round r-1's pick in the order (score
// descending, expert id ascending): exactly the reference's "largest untaken, ties to the lower
// id". Lane r keeps round r's pick (top_k <= 32).
extern "C" __global__ void moe_base_routing(const __nv_bfloat16* routing_logits,
                                            unsigned char* workspace, int seq_len,
                                            int num_experts, int top_k) {
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (t >= seq_len || top_k > 32 || top_k > num_experts) return;  // whole warps
  Workspace w = carve(workspace, seq_len, num_experts, 0, top_k);
  const __nv_bfloat16* logits = routing_logits + static_cast<size_t>(t) * num_experts;
  float prev_v = 0.0f;
  int prev_e = -1;  // no pick before round 0
  float my_v = 0.0f;
  int my_e = -1;
  for (int r = 0; r < top_k; ++r) {
    float best_v = 0.0f;
    int best_e = -1;
    for (int e = lane; e < num_experts; e += 32) {  // increasing e: ties keep the lower id
      const float v = routing_score(logits[e]);
      const bool after = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (after && (best_e < 0 || v > best_v)) {
        best_v = v;
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(kFull, best_v, offset);
      const int oe = __shfl_xor_sync(kFull, best_e, offset);
      if (oe >= 0 && (best_e < 0 || ov > best_v || (ov == best_v && oe < best_e))) {
        best_v = ov;
        best_e = oe;
      }
    }
    prev_v = best_v;
    prev_e = best_e;
    if (lane == r) {
      my_v = best_v;
      my_e = best_e;
    }
  }
#if KB_ROUTING == 0
  // Softmax over the picks in the reference's order: sum of expf(value[r] - value[0]), r = 0, 1..
  const float v0 = __shfl_sync(kFull, my_v, 0);
  float sum = 0.0f;
  for (int r = 0; r < top_k; ++r) sum += expf(__shfl_sync(kFull, my_v, r) - v0);
  const float weight = expf(my_v - v0) / sum;
#else
  const float weight = my_v;  // Llama 4: the sigmoid score itself
#endif
  if (lane < top_k) {
    w.topk_idx[t * top_k + lane] = my_e;
    w.topk_w[t * top_k + lane] = weight;
  }
}
#endif

// lists[e, 0..counts[e]) = the slots t*K+k (increasing) that selected expert e: one block per
// expert, 1024 slots a pass (4 per thread), a block-wide exclusive scan of the hit counts.
extern "C" __global__ void moe_base_expert_lists(unsigned char* workspace, int seq_len,
                                                 int num_experts, int top_k) {
  const int e = blockIdx.x;
  Workspace w = carve(workspace, seq_len, num_experts, 0, top_k);
  __shared__ int warp_total[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int total = seq_len * top_k;
  int base = 0;  // the same in every thread
  for (int s0 = 0; s0 < total; s0 += 4 * kWarps * 32) {
    const int first = s0 + 4 * threadIdx.x;
    int hits = 0, mask = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int slot = first + j;
      if (slot < total && w.topk_idx[slot] == e) {
        mask |= 1 << j;
        ++hits;
      }
    }
    int inclusive = hits;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int y = __shfl_up_sync(kFull, inclusive, offset);
      if (lane >= offset) inclusive += y;
    }
    if (lane == 31) warp_total[warp] = inclusive;
    __syncthreads();
    int before = 0, all = 0;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) {
      const int c = warp_total[q];
      before += q < warp ? c : 0;
      all += c;
    }
    int pos = base + before + inclusive - hits;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((mask >> j) & 1) {
        if (pos < seq_len) w.lists[static_cast<size_t>(e) * seq_len + pos] = first + j;
        ++pos;
      }
    }
    base += all;
    __syncthreads();  // warp_total is rewritten by the next pass
  }
  if (threadIdx.x == 0) w.counts[e] = min(base, seq_len);
}

// ---- GEMM1 + SwiGLU: C[slot, i] = silu(gate) * act, act = a @ W1[e, i], gate = a @ W1[e, I + i]

// Experts with 1..kSkinny rows: one warp per column i, lanes over H (4 consecutive k each), all
// rows' partial sums in registers, then warp sums.
extern "C" __global__ void __launch_bounds__(256) moe_base_gemm1_skinny(
    const AType* hidden_states, const WType* gemm1_weights,
#if KB_FP8
    const float* output1_scales_scalar, const float* output1_scales_gate_scalar,
#endif
    unsigned char* workspace, int seq_len, int num_experts, int hidden_size,
    int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, I, top_k);
  const int e = blockIdx.y;
  const int count = w.counts[e];
  if (count <= 0 || count > kSkinny) return;  // the whole block
  __shared__ int s_token[kSkinny];
  __shared__ int s_slot[kSkinny];
  __shared__ float s_scale[kSkinny];  // the routing weight on the input (Llama 4), else 1
  if (threadIdx.x < kSkinny) {
    const int r = threadIdx.x;
    const int slot = r < count ? w.lists[static_cast<size_t>(e) * T + r] : 0;
    s_slot[r] = slot;
    s_token[r] = slot / top_k;
#if KB_SCALE_INPUT
    s_scale[r] = r < count ? w.topk_w[slot] : 0.0f;
#else
    s_scale[r] = 1.0f;
#endif
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int col = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (col >= I) return;  // whole warps; no barrier follows
  const bool vec = H % 4 == 0 && aligned16(hidden_states) && aligned16(gemm1_weights);
  const WType* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
  const size_t up_row = static_cast<size_t>(col) * H;
  const size_t gate_row = static_cast<size_t>(I + col) * H;
  float up[kSkinny], gate[kSkinny];
#pragma unroll
  for (int r = 0; r < kSkinny; ++r) up[r] = gate[r] = 0.0f;
  for (int k = 4 * lane; k < H; k += 128) {
    const float4 u = load4(W1, up_row, k, H, vec);
    const float4 g = load4(W1, gate_row, k, H, vec);
#pragma unroll
    for (int r = 0; r < kSkinny; ++r) {
      if (r < count) {
        float4 a = load4(hidden_states, static_cast<size_t>(s_token[r]) * H, k, H, vec);
#if KB_SCALE_INPUT
        a = scaled(a, s_scale[r]);
#endif
        up[r] = dot4(up[r], a, u);
        gate[r] = dot4(gate[r], a, g);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kSkinny; ++r) {
    if (r < count) {
      float act = warp_sum(up[r]), gt = warp_sum(gate[r]);
#if KB_FP8
      act = act * output1_scales_scalar[e];
      gt = gt * output1_scales_gate_scalar[e];
#endif
      if (lane == 0) w.C[static_cast<size_t>(s_slot[r]) * I + col] = gt / (1.0f + expf(-gt)) * act;
    }
  }
}

// Experts with more than kSkinny rows: 64 rows x 64 columns (their up and gate rows of W1) a
// block, K in stages of 16 through shared memory (the next stage's global loads in flight during
// the current one's math), each thread 4 rows x 4 columns of up and of gate. Every sum runs over
// k in increasing order, as in the reference.
extern "C" __global__ void __launch_bounds__(256) moe_base_gemm1_tiled(
    const AType* hidden_states, const WType* gemm1_weights,
#if KB_FP8
    const float* output1_scales_scalar, const float* output1_scales_gate_scalar,
#endif
    unsigned char* workspace, int seq_len, int num_experts, int hidden_size,
    int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, I, top_k);
  const int e = blockIdx.z;
  const int count = w.counts[e];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (count <= kSkinny || m0 >= count) return;  // the whole block

  __shared__ __align__(16) float As[kBK][kBM + kPad];      // As[kk][m] = a(row m0 + m, k0 + kk)
  __shared__ __align__(16) float Bs[kBK][2 * kBN + kPad];  // Bs[kk][n]: n < 64 up, else gate

  const int tid = threadIdx.x;
  const int tx = tid & 15, ty = tid >> 4;       // math: rows ty*4.., columns tx*4..
  const int lr = tid >> 2, lk = (tid & 3) * 4;  // loads: row / column lr, k lk..lk+3
  const bool vec = H % 4 == 0 && aligned16(hidden_states) && aligned16(gemm1_weights);
  const bool a_valid = m0 + lr < count;
  const int a_slot = a_valid ? w.lists[static_cast<size_t>(e) * T + m0 + lr] : 0;
  const size_t a_row = static_cast<size_t>(a_slot / top_k) * H;
#if KB_SCALE_INPUT
  const float a_scale = a_valid ? w.topk_w[a_slot] : 0.0f;
#endif
  const bool b_valid = n0 + lr < I;
  const WType* W1 = gemm1_weights + static_cast<size_t>(e) * 2 * I * H;
  const size_t up_row = static_cast<size_t>(n0 + lr) * H;
  const size_t gate_row = static_cast<size_t>(I + n0 + lr) * H;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  float4 ra = zero, ru = zero, rg = zero;
#define KB_FETCH1(k0)                                                 \
  do {                                                                \
    const int k_ = (k0) + lk;                                         \
    ra = a_valid ? load4(hidden_states, a_row, k_, H, vec) : zero;    \
    ru = b_valid ? load4(W1, up_row, k_, H, vec) : zero;              \
    rg = b_valid ? load4(W1, gate_row, k_, H, vec) : zero;            \
  } while (0)
  KB_FETCH1(0);
  float up[4][4], gate[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) up[i][j] = gate[i][j] = 0.0f;

  for (int k0 = 0; k0 < H; k0 += kBK) {
#if KB_SCALE_INPUT
    ra = scaled(ra, a_scale);
#endif
    As[lk + 0][lr] = ra.x;
    As[lk + 1][lr] = ra.y;
    As[lk + 2][lr] = ra.z;
    As[lk + 3][lr] = ra.w;
    Bs[lk + 0][lr] = ru.x;
    Bs[lk + 1][lr] = ru.y;
    Bs[lk + 2][lr] = ru.z;
    Bs[lk + 3][lr] = ru.w;
    Bs[lk + 0][kBN + lr] = rg.x;
    Bs[lk + 1][kBN + lr] = rg.y;
    Bs[lk + 2][kBN + lr] = rg.z;
    Bs[lk + 3][kBN + lr] = rg.w;
    __syncthreads();
    if (k0 + kBK < H) KB_FETCH1(k0 + kBK);
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a4 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
      const float4 u4 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
      const float4 g4 = *reinterpret_cast<const float4*>(&Bs[kk][kBN + tx * 4]);
      const float a[4] = {a4.x, a4.y, a4.z, a4.w};
      const float u[4] = {u4.x, u4.y, u4.z, u4.w};
      const float g[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          up[i][j] += a[i] * u[j];
          gate[i][j] += a[i] * g[j];
        }
    }
    __syncthreads();
  }
#undef KB_FETCH1
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= count) continue;
    const int slot = w.lists[static_cast<size_t>(e) * T + m];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx * 4 + j;
      if (c >= I) continue;
      float act = up[i][j], gt = gate[i][j];
#if KB_FP8
      act = act * output1_scales_scalar[e];
      gt = gt * output1_scales_gate_scalar[e];
#endif
      w.C[static_cast<size_t>(slot) * I + c] = gt / (1.0f + expf(-gt)) * act;
    }
  }
}

// ---- GEMM2: O[slot, h] = C[slot] @ W2[e, h] ----

extern "C" __global__ void __launch_bounds__(256) moe_base_gemm2_skinny(
    const WType* gemm2_weights,
#if KB_FP8
    const float* output2_scales_scalar,
#endif
    unsigned char* workspace, int seq_len, int num_experts, int hidden_size,
    int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, I, top_k);
  const int e = blockIdx.y;
  const int count = w.counts[e];
  if (count <= 0 || count > kSkinny) return;  // the whole block
  __shared__ int s_slot[kSkinny];
  if (threadIdx.x < kSkinny) {
    const int r = threadIdx.x;
    s_slot[r] = r < count ? w.lists[static_cast<size_t>(e) * T + r] : 0;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int col = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (col >= H) return;  // whole warps; no barrier follows
  const bool vec = I % 4 == 0 && aligned16(gemm2_weights) && aligned16(w.C);
  const WType* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
  const size_t w_row = static_cast<size_t>(col) * I;
  float acc[kSkinny];
#pragma unroll
  for (int r = 0; r < kSkinny; ++r) acc[r] = 0.0f;
  for (int k = 4 * lane; k < I; k += 128) {
    const float4 b = load4(W2, w_row, k, I, vec);
#pragma unroll
    for (int r = 0; r < kSkinny; ++r) {
      if (r < count) {
        const float4 c = load4(w.C, static_cast<size_t>(s_slot[r]) * I, k, I, vec);
        acc[r] = dot4(acc[r], c, b);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kSkinny; ++r) {
    if (r < count) {
      float sum = warp_sum(acc[r]);
#if KB_FP8
      sum = sum * output2_scales_scalar[e];
#endif
      if (lane == 0) w.O[static_cast<size_t>(s_slot[r]) * H + col] = sum;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) moe_base_gemm2_tiled(
    const WType* gemm2_weights,
#if KB_FP8
    const float* output2_scales_scalar,
#endif
    unsigned char* workspace, int seq_len, int num_experts, int hidden_size,
    int intermediate_size, int top_k) {
  const int H = hidden_size, I = intermediate_size, T = seq_len;
  Workspace w = carve(workspace, T, num_experts, I, top_k);
  const int e = blockIdx.z;
  const int count = w.counts[e];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (count <= kSkinny || m0 >= count) return;  // the whole block

  __shared__ __align__(16) float As[kBK][kBM + kPad];  // As[kk][m] = C[slot of row m0 + m, ...]
  __shared__ __align__(16) float Bs[kBK][kBN + kPad];  // Bs[kk][n] = W2[e, n0 + n, i0 + kk]

  const int tid = threadIdx.x;
  const int tx = tid & 15, ty = tid >> 4;
  const int lr = tid >> 2, lk = (tid & 3) * 4;
  const bool vec = I % 4 == 0 && aligned16(gemm2_weights) && aligned16(w.C);
  const bool a_valid = m0 + lr < count;
  const int a_slot = a_valid ? w.lists[static_cast<size_t>(e) * T + m0 + lr] : 0;
  const size_t a_row = static_cast<size_t>(a_slot) * I;
  const bool b_valid = n0 + lr < H;
  const WType* W2 = gemm2_weights + static_cast<size_t>(e) * H * I;
  const size_t b_row = static_cast<size_t>(n0 + lr) * I;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  float4 ra = a_valid ? load4(w.C, a_row, lk, I, vec) : zero;
  float4 rb = b_valid ? load4(W2, b_row, lk, I, vec) : zero;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < I; k0 += kBK) {
    As[lk + 0][lr] = ra.x;
    As[lk + 1][lr] = ra.y;
    As[lk + 2][lr] = ra.z;
    As[lk + 3][lr] = ra.w;
    Bs[lk + 0][lr] = rb.x;
    Bs[lk + 1][lr] = rb.y;
    Bs[lk + 2][lr] = rb.z;
    Bs[lk + 3][lr] = rb.w;
    __syncthreads();
    if (k0 + kBK < I) {
      const int k = k0 + kBK + lk;
      ra = a_valid ? load4(w.C, a_row, k, I, vec) : zero;
      rb = b_valid ? load4(W2, b_row, k, I, vec) : zero;
    }
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a4 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
      const float4 b4 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
      const float a[4] = {a4.x, a4.y, a4.z, a4.w};
      const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= count) continue;
    const int slot = w.lists[static_cast<size_t>(e) * T + m];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx * 4 + j;
      if (c >= H) continue;
#if KB_FP8
      w.O[static_cast<size_t>(slot) * H + c] = acc[i][j] * output2_scales_scalar[e];
#else
      w.O[static_cast<size_t>(slot) * H + c] = acc[i][j];
#endif
    }
  }
}

// output[t, h] = bf16( sum over k, increasing, of (weighted) O[t*K+k, h] ).
extern "C" __global__ void moe_base_combine(unsigned char* workspace, __nv_bfloat16* output,
                                            int seq_len, int num_experts, int hidden_size,
                                            int intermediate_size, int top_k) {
  const size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<size_t>(seq_len) * hidden_size) return;
  Workspace w = carve(workspace, seq_len, num_experts, intermediate_size, top_k);
  const int t = static_cast<int>(index / hidden_size), h = static_cast<int>(index % hidden_size);
  float sum = 0.0f;
  for (int k = 0; k < top_k; ++k) {
    const int slot = t * top_k + k;
    const int e = w.topk_idx[slot];
    if (e >= 0 && e < num_experts) {
#if KB_SCALE_INPUT
      sum += w.O[static_cast<size_t>(slot) * hidden_size + h];  // weight already on the input
#else
      sum += w.topk_w[slot] * w.O[static_cast<size_t>(slot) * hidden_size + h];
#endif
    }
  }
  output[index] = __float2bfloat16_rn(sum);
}
