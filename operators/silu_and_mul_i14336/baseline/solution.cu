/* kharness
{
  "definition": "silu_and_mul_i14336",
  "launches": [
    { "kernel": "silu_and_mul_baseline",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["x", "out", "num_tokens"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for silu_and_mul_i14336: the straightforward hand-written kernel. One block of 256
// threads per token, scalar bf16 loads in a strided loop, silu(g) * u in float32 with expf.
#include <cuda_bf16.h>

constexpr int kInter = 14336;

extern "C" __global__ void silu_and_mul_baseline(const __nv_bfloat16* x, __nv_bfloat16* out,
                                                 int num_tokens) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const __nv_bfloat16* gate = x + static_cast<size_t>(t) * (2 * kInter);
  __nv_bfloat16* y = out + static_cast<size_t>(t) * kInter;
  for (int i = threadIdx.x; i < kInter; i += blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    const float u = __bfloat162float(gate[kInter + i]);
    y[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}
