/* kharness
{
  "launches": [
    { "kernel": "gemm_tiled_kernel",
      "grid": ["cdiv(N, 64)", "cdiv(M, 64)", 1],
      "block": [16, 16, 1],
      "shared_bytes": "0",
      "args": ["A", "B", "C", "M", "N", "K"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for the gemm_n*_k* family: C[M, N] = fp16(A[M, K] @ B[N, K]^T), a straightforward
// shared-memory-tiled CUDA-core GEMM with fp32 accumulation and no tensor cores.
// A block of 16x16 threads computes a 64x64 tile of C, each thread a 4x4 grid of elements
// (rows ty + 16 i, columns tx + 16 j). K advances in slices of 16: the A and B slices are
// converted to fp32 into shared memory (stored k-major so the inner loop reads them as
// broadcasts / consecutive words), then each thread does 16 x 16 fused multiply-adds from
// registers. Out-of-range elements load as zero; stores are bounds-checked, so any M, N, K work.
#include <cuda_fp16.h>

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kT = 16;  // threads per block side; must equal the plan's block

extern "C" __global__ void __launch_bounds__(kT * kT)
    gemm_tiled_kernel(const __half* __restrict__ A, const __half* __restrict__ B,
                      __half* __restrict__ C, int M, int N, int K) {
  __shared__ float a_s[kBK][kBM + 4];  // a_s[kk][i] = A[m0 + i, k0 + kk]
  __shared__ float b_s[kBK][kBN + 4];  // b_s[kk][j] = B[n0 + j, k0 + kk]

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kT + tx;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;

  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    // 64 rows x 16 k of A and of B: 4 elements each per thread; consecutive threads read
    // consecutive k of one row.
#pragma unroll
    for (int i = 0; i < (kBM * kBK) / (kT * kT); ++i) {
      const int e = tid + i * kT * kT;
      const int r = e / kBK, kk = e % kBK;
      const int k = k0 + kk, m = m0 + r, n = n0 + r;
      a_s[kk][r] = (m < M && k < K) ? __half2float(A[static_cast<size_t>(m) * K + k]) : 0.0f;
      b_s[kk][r] = (n < N && k < K) ? __half2float(B[static_cast<size_t>(n) * K + k]) : 0.0f;
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
      if (n < N) C[static_cast<size_t>(m) * N + n] = __float2half_rn(acc[i][j]);
    }
  }
}
