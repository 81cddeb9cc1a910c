/* kharness
{
  "launches": [
    { "kernel": "gemm_reference",
      "grid": ["cdiv(N, 16)", "cdiv(M, 16)", 1],
      "block": [16, 16, 1],
      "shared_bytes": "0",
      "args": ["A", "B", "C", "M", "N", "K"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every gemm_n*_k* definition (family "gemm"), including FlashInfer-Bench
// definitions imported as they are, so the plan names only FlashInfer-Bench's tensors and axes.
//   C[m, n] = fp16( sum_k float(A[m, k]) * float(B[n, k]) )      i.e. C = A @ B.T
// A is row-major [M, K], B is row-major [N, K] (each row of B is one output column's weights),
// C is row-major [M, N]. The running sum is float32 (multiply-adds, possibly fused), k runs in
// increasing order, and the sum is rounded once, to nearest even, to fp16. M, N and K all come in as arguments.
// Written to be obviously correct, not fast: the textbook 16x16 shared-memory tiling, one
// thread per C element; out-of-range tile elements are loaded as zero, which adds nothing.
#include <cuda_fp16.h>

constexpr int kTile = 16;  // must equal the plan's block size in x and y

extern "C" __global__ void gemm_reference(const __half* A, const __half* B, __half* C, int M,
                                          int N, int K) {
  __shared__ float a_tile[kTile][kTile];  // a_tile[i][kk] = A[row0 + i, k0 + kk]
  __shared__ float b_tile[kTile][kTile + 1];  // b_tile[j][kk] = B[col0 + j, k0 + kk]; padded so
                                              // the 16 threads of a row read 16 different banks

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;  // m of this thread's element
  const int col = blockIdx.x * kTile + tx;  // n of this thread's element
  const int b_row = blockIdx.x * kTile + ty;  // the row of B this thread loads

  float sum = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    const int k = k0 + tx;
    a_tile[ty][tx] = (row < M && k < K) ? __half2float(A[static_cast<size_t>(row) * K + k]) : 0.0f;
    b_tile[ty][tx] = (b_row < N && k < K) ? __half2float(B[static_cast<size_t>(b_row) * K + k]) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += a_tile[ty][kk] * b_tile[tx][kk];
    __syncthreads();
  }
  if (row < M && col < N) C[static_cast<size_t>(row) * N + col] = __float2half_rn(sum);
}
