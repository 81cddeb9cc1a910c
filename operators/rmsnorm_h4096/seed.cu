/* kharness
{
  "definition": "rmsnorm_h4096",
  "launches": [
    { "kernel": "rmsnorm_kernel",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "weight", "output", "batch_size", {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for rmsnorm_h4096: a correct, reasonable starting point for optimisation.
// One block of THREADS threads per row; each thread loads hidden_size / THREADS bf16 values as
// vectors of VEC (8: 128-bit loads), keeps them in registers, accumulates x^2 in float32, reduces
// with warp shuffles and a small shared array across the warps, then writes its outputs with the
// same vector width. Knobs THREADS and VEC (tune.json beside this file: the tune provider passes
// -DTHREADS=.. -DVEC=.. and the matching block size); the defaults, 256 threads of two 128-bit
// vectors each, are the plan above.
#include <cuda_bf16.h>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif

constexpr int kHidden = 4096;
constexpr int kThreads = THREADS;
constexpr int kVec = VEC;  // bf16 values in one vector access: 8 = 128 bits
constexpr int kVecsPerThread = kHidden / (kThreads * kVec);
constexpr int kWarps = kThreads / 32;

static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
static_assert(kVec == 1 || kVec == 2 || kVec == 4 || kVec == 8, "a vector is 16 to 128 bits");
static_assert(kHidden % (kThreads * kVec) == 0, "hidden size must split evenly");

// The unsigned type of one vector access.
template <int kBytes>
struct RawOf;
template <>
struct RawOf<2> { using type = unsigned short; };
template <>
struct RawOf<4> { using type = unsigned int; };
template <>
struct RawOf<8> { using type = uint2; };
template <>
struct RawOf<16> { using type = uint4; };
using Raw = typename RawOf<kVec * 2>::type;

union Pack {
  Raw raw;
  __nv_bfloat16 h[kVec];
  __nv_bfloat162 h2[kVec / 2 > 0 ? kVec / 2 : 1];
};

// Sum of squares of a vector, in pairs where there are pairs (the seed's order of additions).
__device__ __forceinline__ float sum_squares(const Pack& p) {
  float sum = 0.0f;
  if constexpr (kVec >= 2) {
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      const float2 f = __bfloat1622float2(p.h2[j]);
      sum += f.x * f.x + f.y * f.y;
    }
  } else {
    const float f = __bfloat162float(p.h[0]);
    sum += f * f;
  }
  return sum;
}

extern "C" __global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const __nv_bfloat16* __restrict__ hidden_states,
                   const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ output,
                   int batch_size, float eps) {
  __shared__ float warp_sums[kWarps];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const size_t offset = static_cast<size_t>(row) * kHidden;
  const Raw* x = reinterpret_cast<const Raw*>(hidden_states + offset);
  const Raw* w = reinterpret_cast<const Raw*>(weight);
  Raw* y = reinterpret_cast<Raw*>(output + offset);

  Pack xs[kVecsPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) {
    xs[v].raw = x[v * kThreads + threadIdx.x];  // consecutive threads read consecutive vectors
    sum += sum_squares(xs[v]);
  }

#pragma unroll
  for (int mask = 16; mask > 0; mask /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, mask);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) total += warp_sums[i];

  const float inv_rms = rsqrtf(total / static_cast<float>(kHidden) + eps);

#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) {
    Pack ws, out;
    ws.raw = w[v * kThreads + threadIdx.x];
    if constexpr (kVec >= 2) {
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const float2 fx = __bfloat1622float2(xs[v].h2[j]);
        const float2 fw = __bfloat1622float2(ws.h2[j]);
        out.h2[j] = __floats2bfloat162_rn(fx.x * inv_rms * fw.x, fx.y * inv_rms * fw.y);
      }
    } else {
      out.h[0] = __float2bfloat16_rn(__bfloat162float(xs[v].h[0]) * inv_rms *
                                     __bfloat162float(ws.h[0]));
    }
    y[v * kThreads + threadIdx.x] = out.raw;
  }
}
