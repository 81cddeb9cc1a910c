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
// One block of 256 threads per row; each thread loads 16 bf16 values as two 128-bit vectors,
// keeps them in registers, accumulates x^2 in float32, reduces with warp shuffles and a small
// shared array across the 8 warps, then writes its 16 outputs as two 128-bit stores.
#include <cuda_bf16.h>

constexpr int kHidden = 4096;
constexpr int kThreads = 256;
constexpr int kVec = 8;  // bf16 values in one 128-bit access
constexpr int kVecsPerThread = kHidden / (kThreads * kVec);  // 2
constexpr int kWarps = kThreads / 32;

static_assert(kHidden % (kThreads * kVec) == 0, "hidden size must split evenly");

union Pack {
  uint4 raw;
  __nv_bfloat162 h2[kVec / 2];
};

extern "C" __global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const __nv_bfloat16* __restrict__ hidden_states,
                   const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ output,
                   int batch_size, float eps) {
  __shared__ float warp_sums[kWarps];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const size_t offset = static_cast<size_t>(row) * kHidden;
  const uint4* x = reinterpret_cast<const uint4*>(hidden_states + offset);
  const uint4* w = reinterpret_cast<const uint4*>(weight);
  uint4* y = reinterpret_cast<uint4*>(output + offset);

  Pack xs[kVecsPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) {
    xs[v].raw = x[v * kThreads + threadIdx.x];  // consecutive threads read consecutive 16 B
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      const float2 f = __bfloat1622float2(xs[v].h2[j]);
      sum += f.x * f.x + f.y * f.y;
    }
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
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      const float2 fx = __bfloat1622float2(xs[v].h2[j]);
      const float2 fw = __bfloat1622float2(ws.h2[j]);
      out.h2[j] = __floats2bfloat162_rn(fx.x * inv_rms * fw.x, fx.y * inv_rms * fw.y);
    }
    y[v * kThreads + threadIdx.x] = out.raw;
  }
}
