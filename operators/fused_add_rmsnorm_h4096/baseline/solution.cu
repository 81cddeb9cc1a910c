/* kharness
{
  "definition": "fused_add_rmsnorm_h4096",
  "launches": [
    { "kernel": "fused_add_rmsnorm_baseline",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["hidden_states", "residual", "weight", "output", "batch_size", {"float32": 1e-5}] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for fused_add_rmsnorm_h4096: the straightforward hand-written kernel speedups are
// measured against. One block of 256 threads per row, scalar bf16 loads in a strided loop,
// float32 accumulation of (h + r)^2, a shared-memory tree reduction, then a second pass that
// re-reads h, r and the weight and writes the output.
#include <cuda_bf16.h>

constexpr int kHidden = 4096;
constexpr int kThreads = 256;

extern "C" __global__ void fused_add_rmsnorm_baseline(const __nv_bfloat16* hidden_states,
                                                      const __nv_bfloat16* residual,
                                                      const __nv_bfloat16* weight,
                                                      __nv_bfloat16* output, int batch_size,
                                                      float eps) {
  __shared__ float partial[kThreads];

  const int row = blockIdx.x;
  if (row >= batch_size) return;
  const size_t offset = static_cast<size_t>(row) * kHidden;
  const __nv_bfloat16* h = hidden_states + offset;
  const __nv_bfloat16* r = residual + offset;
  __nv_bfloat16* y = output + offset;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < kHidden; i += kThreads) {
    const float v = __bfloat162float(h[i]) + __bfloat162float(r[i]);
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
    const float v = __bfloat162float(h[i]) + __bfloat162float(r[i]);
    y[i] = __float2bfloat16(v * inv_rms * __bfloat162float(weight[i]));
  }
}
