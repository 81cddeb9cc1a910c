/* kharness
{
  "definition": "fused_add_rmsnorm_h4096",
  "launches": [
    { "kernel": "fused_add_rmsnorm_reference",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "residual", "weight", "output", "batch_size", "hidden_size",
               {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every fused_add_rmsnorm_h* definition (family "fused_add_rmsnorm"),
// including the FlashInfer-Bench ones (fused_add_rmsnorm_h2048 ... _h7168).
//   x[b, i]      = float(hidden_states[b, i]) + float(residual[b, i])      (kept in float32)
//   output[b, i] = bf16( x[b, i] * (1 / sqrt(mean_j x[b, j]^2 + eps)) * float(weight[i]) )
// One rounding to bfloat16 at the end. hidden_size is an argument, so one plan fits every
// hidden size; eps is a literal of the plan. Written to be obviously correct, not fast: one block
// of 256 threads per row, strided loops that recompute x, a fixed shared-memory tree reduction.
#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the plan's block size (a power of two)

extern "C" __global__ void fused_add_rmsnorm_reference(const __nv_bfloat16* hidden_states,
                                                       const __nv_bfloat16* residual,
                                                       const __nv_bfloat16* weight,
                                                       __nv_bfloat16* output, int batch_size,
                                                       int hidden_size, float eps) {
  __shared__ float partial[kThreads];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const size_t offset = static_cast<size_t>(row) * hidden_size;
  const __nv_bfloat16* h = hidden_states + offset;
  const __nv_bfloat16* r = residual + offset;
  __nv_bfloat16* y = output + offset;

  // 1. Each thread sums the squares of its elements of x = h + r.
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(h[i]) + __bfloat162float(r[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();

  // 2. Tree reduction: partial[0] ends up holding the row's sum of squares.
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }

  // 3. Normalise and scale.
  const float inv_rms = 1.0f / sqrtf(partial[0] / static_cast<float>(hidden_size) + eps);
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(h[i]) + __bfloat162float(r[i]);
    y[i] = __float2bfloat16_rn(v * inv_rms * __bfloat162float(weight[i]));
  }
}
