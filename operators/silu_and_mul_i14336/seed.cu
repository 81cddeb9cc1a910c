/* kharness
{
  "definition": "silu_and_mul_i14336",
  "launches": [
    { "kernel": "silu_and_mul_kernel",
      "grid": ["cdiv(num_tokens * intermediate_size, 8 * 256)", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["x", "out", "num_tokens"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for silu_and_mul_i14336: a correct, reasonable starting point.
// The output is viewed as a flat array of 8-element (128-bit) chunks; 14336 is a multiple of 8,
// so no chunk crosses a row. Each thread loads one 128-bit chunk of the gate and the matching
// chunk of up, computes silu(g) * u in float32 with the fast exponential, and stores 128 bits.
#include <cuda_bf16.h>

constexpr int kInter = 14336;
constexpr int kVec = 8;
static_assert(kInter % kVec == 0, "rows must split into 128-bit chunks");

union Pack {
  uint4 raw;
  __nv_bfloat162 h2[kVec / 2];
};

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

extern "C" __global__ void __launch_bounds__(256)
    silu_and_mul_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                        int num_tokens) {
  const size_t chunk = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kChunksPerRow = kInter / kVec;
  if (chunk >= static_cast<size_t>(num_tokens) * kChunksPerRow) return;
  const size_t row = chunk / kChunksPerRow;
  const size_t col = (chunk % kChunksPerRow) * kVec;

  const __nv_bfloat16* gate = x + row * (2 * kInter) + col;
  Pack g, u, y;
  g.raw = *reinterpret_cast<const uint4*>(gate);
  u.raw = *reinterpret_cast<const uint4*>(gate + kInter);
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 fg = __bfloat1622float2(g.h2[j]);
    const float2 fu = __bfloat1622float2(u.h2[j]);
    y.h2[j] = __floats2bfloat162_rn(silu(fg.x) * fu.x, silu(fg.y) * fu.y);
  }
  *reinterpret_cast<uint4*>(out + row * kInter + col) = y.raw;
}
