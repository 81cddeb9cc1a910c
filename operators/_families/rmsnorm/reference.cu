/* kharness
{
  "definition": "rmsnorm_h4096",
  "launches": [
    { "kernel": "rmsnorm_reference",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "weight", "output", "batch_size", "hidden_size",
               {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every rmsnorm_h* definition (family "rmsnorm").
//   output[b, i] = bf16( x[b, i] * (1 / sqrt(mean_j x[b, j]^2 + eps)) * w[i] )
// with x and w read as float32, the mean of squares accumulated in float32 and one rounding
// (round to nearest even) to bfloat16 at the end. hidden_size comes in as an argument, so the
// same kernel and plan serve every hidden size; eps is a literal of the plan.
// Written to be obviously correct, not fast: one block of 256 threads per row, a strided loop,
// and a fixed shared-memory tree reduction (so the result is deterministic).
#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the plan's block size (a power of two)

extern "C" __global__ void rmsnorm_reference(const __nv_bfloat16* hidden_states,
                                             const __nv_bfloat16* weight,
                                             __nv_bfloat16* output, int batch_size,
                                             int hidden_size, float eps) {
  __shared__ float partial[kThreads];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const __nv_bfloat16* x = hidden_states + static_cast<size_t>(row) * hidden_size;
  __nv_bfloat16* y = output + static_cast<size_t>(row) * hidden_size;

  // 1. Each thread sums the squares of its elements.
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();

  // 2. Tree reduction in shared memory: partial[0] ends up holding the row's sum of squares.
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }

  // 3. Normalise and scale.
  const float mean_square = partial[0] / static_cast<float>(hidden_size);
  const float inv_rms = 1.0f / sqrtf(mean_square + eps);
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    const float w = __bfloat162float(weight[i]);
    y[i] = __float2bfloat16_rn(v * inv_rms * w);
  }
}
