/* kharness
{
  "launches": [
    { "kernel": "gemm_fp8_tiled_kernel",
      "grid": ["cdiv(N, 64)", "cdiv(M, 64)", 1],
      "block": [16, 16, 1],
      "shared_bytes": "0",
      "args": ["A", "A_scale", "B", "B_scale", "C", "M", "N", "K", "num_k_blocks"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for the gemm_fp8 family: C[M, N] = bf16(dequant(A) @ dequant(B).T) with A e4m3
// [M, K] and 1x128 scales A_scale [M, K/128], B e4m3 [N, K] and 128x128 scales
// B_scale [N/128, K/128]. A straightforward shared-memory-tiled CUDA-core GEMM, no tensor cores:
// a block of 16x16 threads computes a 64x64 tile of C, each thread a 4x4 grid of elements (rows
// ty + 16 i, columns tx + 16 j). K advances in slices of 16; each fp8 value is dequantised
// (times its scale) into float32 shared memory, then each thread does 16 x 16 fused
// multiply-adds from registers. Out-of-range elements load as zero; stores are bounds-checked.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kT = 16;       // threads per block side; must equal the plan's block
constexpr int kQuant = 128;  // quantisation block

extern "C" __global__ void __launch_bounds__(kT* kT)
    gemm_fp8_tiled_kernel(const __nv_fp8_e4m3* __restrict__ A, const float* __restrict__ A_scale,
                          const __nv_fp8_e4m3* __restrict__ B, const float* __restrict__ B_scale,
                          __nv_bfloat16* __restrict__ C, int M, int N, int K, int num_k_blocks) {
  __shared__ float a_s[kBK][kBM + 4];  // a_s[kk][i] = a(m0 + i, k0 + kk)
  __shared__ float b_s[kBK][kBN + 4];  // b_s[kk][j] = b(n0 + j, k0 + kk)

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kT + tx;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;

  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int i = 0; i < (kBM * kBK) / (kT * kT); ++i) {
      const int e = tid + i * kT * kT;
      const int r = e / kBK, kk = e % kBK;
      const int k = k0 + kk, m = m0 + r, n = n0 + r;
      a_s[kk][r] = (m < M && k < K)
                       ? static_cast<float>(A[static_cast<size_t>(m) * K + k]) *
                             A_scale[static_cast<size_t>(m) * num_k_blocks + k / kQuant]
                       : 0.0f;
      b_s[kk][r] = (n < N && k < K)
                       ? static_cast<float>(B[static_cast<size_t>(n) * K + k]) *
                             B_scale[static_cast<size_t>(n / kQuant) * num_k_blocks + k / kQuant]
                       : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = a_s[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = b_s[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n < N) C[static_cast<size_t>(m) * N + n] = __float2bfloat16_rn(acc[i][j]);
    }
  }
}
