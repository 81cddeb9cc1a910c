/* kharness
{
  "definition": "copy_f32",
  "launches": [
    { "kernel": "copy_scalar", "grid": ["cdiv(n, 256)", 1, 1], "block": [256, 1, 1],
      "args": ["x", "y", "n"] }
  ]
}
*/
// Baseline: the straightforward copy, one 4-byte element per thread.
extern "C" __global__ void copy_scalar(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
