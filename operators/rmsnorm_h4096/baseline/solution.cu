/* kharness
{
  "definition": "rmsnorm_h4096",
  "launches": [
    { "kernel": "rmsnorm_baseline",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "weight", "output", "batch_size", {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for rmsnorm_h4096: the straightforward hand-written kernel speedups are measured
// against. One block of 256 threads per row, scalar bf16 loads in a strided loop, float32
// accumulation, a shared-memory tree reduction, then a second pass over the row that re-reads
// x and the weight and writes the output.
#include <cuda_bf16.h>

constexpr int kHidden = 4096;
constexpr int kThreads = 256;

extern "C" __global__ void rmsnorm_baseline(const __nv_bfloat16* hidden_states,
                                            const __nv_bfloat16* weight, __nv_bfloat16* output,
                                            int batch_size, float eps) {
  __shared__ float partial[kThreads];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const __nv_bfloat16* x = hidden_states + static_cast<size_t>(row) * kHidden;
  __nv_bfloat16* y = output + static_cast<size_t>(row) * kHidden;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < kHidden; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }

  const float inv_rms = rsqrtf(partial[0] / kHidden + eps);
  for (int i = threadIdx.x; i < kHidden; i += kThreads) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
