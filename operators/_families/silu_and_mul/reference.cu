/* kharness
{
  "definition": "silu_and_mul_i14336",
  "launches": [
    { "kernel": "silu_and_mul_reference",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["x", "out", "num_tokens", "intermediate_size", "gate_up_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every silu_and_mul_i* definition (family "silu_and_mul").
//   g = float(x[t, i]), u = float(x[t, intermediate_size + i])   (gate first, then up)
//   out[t, i] = bf16( g / (1 + exp(-g)) * u )
// float32 math with the accurate expf, one rounding to bfloat16. gate_up_size is the row stride
// of x (2 * intermediate_size). One block of 256 threads per token, a strided loop.
#include <cuda_bf16.h>

extern "C" __global__ void silu_and_mul_reference(const __nv_bfloat16* x, __nv_bfloat16* out,
                                                  int num_tokens, int intermediate_size,
                                                  int gate_up_size) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const __nv_bfloat16* gate = x + static_cast<size_t>(t) * gate_up_size;
  const __nv_bfloat16* up = gate + intermediate_size;
  __nv_bfloat16* y = out + static_cast<size_t>(t) * intermediate_size;
  for (int i = threadIdx.x; i < intermediate_size; i += blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    const float u = __bfloat162float(up[i]);
    const float silu = g / (1.0f + expf(-g));
    y[i] = __float2bfloat16_rn(silu * u);
  }
}
