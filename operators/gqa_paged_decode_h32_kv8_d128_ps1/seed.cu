/* kharness
{
  "definition": "gqa_paged_decode_h32_kv8_d128_ps1",
  "launches": [
    { "kernel": "gqa_decode_kernel",
      "grid": ["num_kv_heads", "batch_size", 1],
      "block": [128, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale", "output", "lse",
               "batch_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for gqa_paged_decode_h32_kv8_d128_ps1: a correct, reasonable starting point.
// One block of 128 threads per (kv head, request) serves the 4 query heads of the group, so each
// K/V row is read from DRAM once for the 4 heads. Each half-warp (16 lanes x 8 dims = one
// 128-dim row, one 128-bit load per lane) walks every 8th token of the request with an online
// softmax per head in base 2 (logits pre-multiplied by sm_scale * log2(e)); the 8 half-warp states
// are then merged through shared memory. A request with no tokens writes 0 and lse = -inf.
// Knobs (tune.json beside this file; the tune provider passes -DTHREADS=.. -DVEC=.. -DUNROLL=..
// and the matching block size): THREADS per block, VEC bf16 per load (8: 128-bit, 4: 64-bit;
// a row takes head_dim / VEC lanes) and UNROLL, the tokens each row group loads before it
// computes (more loads in flight); the defaults are the plan above.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

#ifndef THREADS
#define THREADS 128
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

constexpr int kHeadDim = 128;
constexpr int kGroup = 4;       // query heads per kv head (32 / 8)
constexpr int kKvHeads = 8;
constexpr int kQoHeads = kKvHeads * kGroup;
constexpr int kThreads = THREADS;
constexpr int kVec = VEC;                       // bf16 per load: 8 = 128 bits
constexpr int kUnroll = UNROLL;                 // tokens a row group loads before computing
constexpr int kLanesPerRow = kHeadDim / kVec;   // defaults: 16, a half-warp
constexpr int kRowsInFlight = kThreads / kLanesPerRow;  // defaults: 8 half-warps
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kVec == 4 || kVec == 8, "64- or 128-bit loads");
static_assert(kLanesPerRow <= 32 && kThreads % 32 == 0 && kThreads % kLanesPerRow == 0,
              "a row is read by the lanes of one warp");
static_assert(kUnroll >= 1, "at least one token per step");

template <int kBytes>
struct RawOf;
template <>
struct RawOf<8> { using type = uint2; };
template <>
struct RawOf<16> { using type = uint4; };
using Raw = typename RawOf<kVec * 2>::type;  // one load
union Pack {
  Raw raw;
  __nv_bfloat162 h2[kVec / 2];
};

__device__ __forceinline__ Raw zero_raw() { return Raw{}; }  // all bits 0

extern "C" __global__ void __launch_bounds__(kThreads)
    gqa_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                      const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_indptr,
                      const int* __restrict__ kv_indices, float sm_scale,
                      __nv_bfloat16* __restrict__ output, float* __restrict__ lse, int batch_size) {
  __shared__ float s_acc[kRowsInFlight][kGroup][kHeadDim];
  __shared__ float s_m[kRowsInFlight][kGroup];
  __shared__ float s_l[kRowsInFlight][kGroup];

  const int kv_head = blockIdx.x;
  const int b = blockIdx.y;
  if (b >= batch_size) return;
  const int row_group = threadIdx.x / kLanesPerRow;  // which half-warp
  const int sub = threadIdx.x % kLanesPerRow;        // which 8 dims
  const int begin = kv_indptr[b];
  const int end = kv_indptr[b + 1];
  const float scale2 = sm_scale * kLog2e;

  // q of the 4 heads of the group, this lane's 8 dims, in float32.
  float qf[kGroup][kVec];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    Pack p;
    p.raw = reinterpret_cast<const Raw*>(
        q + (static_cast<size_t>(b) * kQoHeads + kv_head * kGroup + g) * kHeadDim)[sub];
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      const float2 f = __bfloat1622float2(p.h2[j]);
      qf[g][2 * j] = f.x;
      qf[g][2 * j + 1] = f.y;
    }
  }

  float m[kGroup], l[kGroup], acc[kGroup][kVec];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = neg_inf();
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[g][j] = 0.0f;
  }

  // page_size is 1: page id == token row.
  // The trip count is the same for every thread (the shuffles below need every row group of a
  // warp); a row group past the end of the request loads nothing and skips the update. Each step
  // loads kUnroll tokens per row group (tokens base + u * kRowsInFlight + row_group) first.
  for (int base = begin; base < end; base += kRowsInFlight * kUnroll) {
    Pack kp[kUnroll], vp[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kRowsInFlight + row_group;
      valid[u] = i < end;
      kp[u].raw = zero_raw();
      vp[u].raw = zero_raw();
      if (valid[u]) {
        const size_t row = (static_cast<size_t>(kv_indices[i]) * kKvHeads + kv_head) * kHeadDim;
        kp[u].raw = reinterpret_cast<const Raw*>(k_cache + row)[sub];
        vp[u].raw = reinterpret_cast<const Raw*>(v_cache + row)[sub];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kVec], vf[kVec];
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const float2 fk = __bfloat1622float2(kp[u].h2[j]);
        const float2 fv = __bfloat1622float2(vp[u].h2[j]);
        kf[2 * j] = fk.x;
        kf[2 * j + 1] = fk.y;
        vf[2 * j] = fv.x;
        vf[2 * j + 1] = fv.y;
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < kVec; ++j) dot += qf[g][j] * kf[j];
        // Reduce over the lanes of this row group (xor offsets below kLanesPerRow stay inside it).
#pragma unroll
        for (int off = kLanesPerRow / 2; off > 0; off /= 2) {
          dot += __shfl_xor_sync(0xffffffffu, dot, off);
        }
        if (!valid[u]) continue;
        const float s = dot * scale2;  // base-2 logit
        const float m_new = fmaxf(m[g], s);
        const float correction = exp2f(m[g] - m_new);  // 0 on the first token (m = -inf)
        const float p = exp2f(s - m_new);
        l[g] = l[g] * correction + p;
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[g][j] = acc[g][j] * correction + p * vf[j];
        m[g] = m_new;
      }
    }
  }

  // Merge the states of the kRowsInFlight row groups.
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) s_acc[row_group][g][sub * kVec + j] = acc[g][j];
    if (sub == 0) {
      s_m[row_group][g] = m[g];
      s_l[row_group][g] = l[g];
    }
  }
  __syncthreads();

  // Thread t writes dims t, t + kThreads, ... of each of the 4 heads.
  for (int d = threadIdx.x; d < kHeadDim; d += kThreads) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float m_all = neg_inf();
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r) m_all = fmaxf(m_all, s_m[r][g]);
      const size_t out = static_cast<size_t>(b) * kQoHeads + kv_head * kGroup + g;
      if (m_all == neg_inf()) {  // no tokens
        output[out * kHeadDim + d] = __float2bfloat16_rn(0.0f);
        if (d == 0) lse[out] = neg_inf();
        continue;
      }
      float l_all = 0.0f, o = 0.0f;
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r) {
        const float w = exp2f(s_m[r][g] - m_all);  // 0 for half-warps that saw no token
        l_all += s_l[r][g] * w;
        o += s_acc[r][g][d] * w;
      }
      output[out * kHeadDim + d] = __float2bfloat16_rn(o / l_all);
      if (d == 0) lse[out] = m_all + log2f(l_all);
    }
  }
}
