/* kharness
{
  "launches": [
    { "kernel": "gemm_fp8_reference",
      "grid": ["cdiv(N, 16)", "cdiv(M, 16)", 1],
      "block": [16, 16, 1],
      "shared_bytes": "0",
      "args": ["A", "A_scale", "B", "B_scale", "C", "M", "N", "K", "num_k_blocks"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for the gemm_fp8 family: the FP8 block-scaled GEMM of DeepSeek-V3 inference.
//   a(m, k) = float(A[m, k]) * A_scale[m, k / 128]                  1x128 per-token groups
//   b(n, k) = float(B[n, k]) * B_scale[n / 128, k / 128]            128x128 weight blocks
//   C[m, n] = bf16( sum_k a(m, k) * b(n, k) )                       i.e. C = dequant(A) @
//   dequant(B).T
// A is row-major [M, K] e4m3, A_scale row-major [M, num_k_blocks] float32, B row-major [N, K]
// e4m3 (nn.Linear weight layout), B_scale row-major [num_n_blocks, num_k_blocks] float32, C
// row-major [M, N] bf16. Each operand is dequantised element by element to float32 (exact fp8
// value times its scale, one float32 rounding), the products are summed in float32 in increasing
// k, and the sum is rounded once, to nearest even, to bf16: the semantics of PyTorch's
// (A.float() * scale_a) @ (B.float() * scale_b).T in float32.
// Written to be obviously correct, not fast: the textbook 16x16 shared-memory tiling, one thread
// per C element; out-of-range tile elements are loaded as zero, which adds nothing.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kTile = 16;    // must equal the plan's block size in x and y
constexpr int kBlock = 128;  // quantisation block along K (and along N for B)

extern "C" __global__ void gemm_fp8_reference(const __nv_fp8_e4m3* A, const float* A_scale,
                                              const __nv_fp8_e4m3* B, const float* B_scale,
                                              __nv_bfloat16* C, int M, int N, int K,
                                              int num_k_blocks) {
  __shared__ float a_tile[kTile][kTile];      // a_tile[i][kk] = a(row0 + i, k0 + kk)
  __shared__ float b_tile[kTile][kTile + 1];  // b_tile[j][kk] = b(col0 + j, k0 + kk); padded

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;    // m of this thread's element
  const int col = blockIdx.x * kTile + tx;    // n of this thread's element
  const int b_row = blockIdx.x * kTile + ty;  // the row of B this thread loads

  float sum = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    const int k = k0 + tx;
    float a = 0.0f, b = 0.0f;
    if (row < M && k < K) {
      a = static_cast<float>(A[static_cast<size_t>(row) * K + k]) *
          A_scale[static_cast<size_t>(row) * num_k_blocks + k / kBlock];
    }
    if (b_row < N && k < K) {
      b = static_cast<float>(B[static_cast<size_t>(b_row) * K + k]) *
          B_scale[static_cast<size_t>(b_row / kBlock) * num_k_blocks + k / kBlock];
    }
    a_tile[ty][tx] = a;
    b_tile[ty][tx] = b;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += a_tile[ty][kk] * b_tile[tx][kk];
    __syncthreads();
  }
  if (row < M && col < N) C[static_cast<size_t>(row) * N + col] = __float2bfloat16_rn(sum);
}
