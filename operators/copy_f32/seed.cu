/* kharness
{
  "definition": "copy_f32",
  "launches": [
    { "kernel": "copy_vec4", "grid": ["min(cdiv(n, 1024), 132 * 16)", 1, 1], "block": [256, 1, 1],
      "args": ["x", "y", "n"] }
  ]
}
*/
// Seed: 16-byte loads and stores in a grid-stride loop (buffers are 256-byte aligned), the tail
// element by element.
extern "C" __global__ void copy_vec4(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long vectors = n / 4;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const float4* xv = reinterpret_cast<const float4*>(x);
  float4* yv = reinterpret_cast<float4*>(y);
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    yv[i] = xv[i];
  }
  for (long long i = vectors * 4 + static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = x[i];
  }
}
