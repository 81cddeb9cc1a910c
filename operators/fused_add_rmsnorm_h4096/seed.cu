/* kharness
{
  "definition": "fused_add_rmsnorm_h4096",
  "launches": [
    { "kernel": "fused_add_rmsnorm_kernel",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "residual", "weight", "output", "batch_size", {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for fused_add_rmsnorm_h4096: a correct, reasonable starting point.
// One block of 256 threads per row; each thread loads 16 bf16 values of hidden_states and of
// residual as 128-bit vectors, keeps x = h + r in float32 registers, accumulates x^2, reduces
// with warp shuffles and a small shared array across the 8 warps, then writes 128-bit stores.
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
    fused_add_rmsnorm_kernel(const __nv_bfloat16* __restrict__ hidden_states,
                             const __nv_bfloat16* __restrict__ residual,
                             const __nv_bfloat16* __restrict__ weight,
                             __nv_bfloat16* __restrict__ output, int batch_size, float eps) {
  __shared__ float warp_sums[kWarps];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const size_t offset = static_cast<size_t>(row) * kHidden;
  const uint4* h = reinterpret_cast<const uint4*>(hidden_states + offset);
  const uint4* r = reinterpret_cast<const uint4*>(residual + offset);
  const uint4* w = reinterpret_cast<const uint4*>(weight);
  uint4* y = reinterpret_cast<uint4*>(output + offset);

  float xs[kVecsPerThread][kVec];
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) {
    Pack hp, rp;
    hp.raw = h[v * kThreads + threadIdx.x];
    rp.raw = r[v * kThreads + threadIdx.x];
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      const float2 fh = __bfloat1622float2(hp.h2[j]);
      const float2 fr = __bfloat1622float2(rp.h2[j]);
      xs[v][2 * j] = fh.x + fr.x;
      xs[v][2 * j + 1] = fh.y + fr.y;
      sum += xs[v][2 * j] * xs[v][2 * j] + xs[v][2 * j + 1] * xs[v][2 * j + 1];
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
      const float2 fw = __bfloat1622float2(ws.h2[j]);
      out.h2[j] = __floats2bfloat162_rn(xs[v][2 * j] * inv_rms * fw.x,
                                        xs[v][2 * j + 1] * inv_rms * fw.y);
    }
    y[v * kThreads + threadIdx.x] = out.raw;
  }
}
