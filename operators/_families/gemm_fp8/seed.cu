/* kharness
{
  "launches": [
    { "kernel": "gemm_fp8_seed",
      "grid": ["cdiv(N, 128)", "cdiv(M, 64)", 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["A", "A_scale", "B", "B_scale", "C", "M", "N", "K", "num_k_blocks"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed for the gemm_fp8 family (C[M, N] = bf16(dequant(A) @ dequant(B).T), A e4m3 [M, K] with
// 1x128 scales A_scale [M, K/128], B e4m3 [N, K] with 128x128 scales B_scale [N/128, K/128]):
// a shared-memory-tiled, register-blocked CUDA-core GEMM with float32 accumulation.
//
// Tuning macros (each has an #ifndef default below; a tuner sets them with -D in
// compile_options):
//   GEMM_FP8_BM   rows of C per block tile          (default 64;  a multiple of 8)
//   GEMM_FP8_BN   columns of C per block tile       (default 128; a multiple of 32)
//   GEMM_FP8_BK   K per shared-memory stage         (default 32;  a multiple of 4 dividing 128)
//   GEMM_FP8_PAD  float padding of a shared row     (default 4)
// The block always has 256 threads (8 warps). Warp w owns rows w*TM .. w*TM+TM-1 of the tile
// (TM = BM/8) and lane l columns l, l+32, ... (TN = BN/32), so a warp skips the rows past M
// (decode batches of 1..16 rows do not pay for a full tile). The plan's grid should be
// [cdiv(N, BN), cdiv(M, BM), 1]; the kernel loops over tiles with grid strides, so a grid of
// any size is still correct (extra blocks exit, missing ones are covered by the loop).
// Shared memory, one stage of BK * (BM + BN + 2 PAD) * 4 bytes, must stay within the 48 KiB of
// static shared memory (the defaults use 25.6 KiB).
//
// Scales are folded in while a tile is staged: each fp8 value becomes float(x) * scale in
// shared memory (the reference's dequantisation, element by element), so the inner loop is
// plain float32 FMAs. Loads are 4 fp8 values (one 32-bit word) per thread and step; K is a
// multiple of 128, so every row start and every BK slice is word-aligned.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#ifndef GEMM_FP8_BM
#define GEMM_FP8_BM 64
#endif
#ifndef GEMM_FP8_BN
#define GEMM_FP8_BN 128
#endif
#ifndef GEMM_FP8_BK
#define GEMM_FP8_BK 32
#endif
#ifndef GEMM_FP8_PAD
#define GEMM_FP8_PAD 4
#endif

constexpr int kBM = GEMM_FP8_BM, kBN = GEMM_FP8_BN, kBK = GEMM_FP8_BK, kPad = GEMM_FP8_PAD;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kTM = kBM / kWarps, kTN = kBN / 32;
constexpr int kQuant = 128;  // quantisation block along K (and N for B)

static_assert(kBM % kWarps == 0 && kTM >= 1, "GEMM_FP8_BM must be a multiple of 8");
static_assert(kBN % 32 == 0 && kTN >= 1, "GEMM_FP8_BN must be a multiple of 32");
static_assert(kBK % 4 == 0 && kQuant % kBK == 0,
              "GEMM_FP8_BK must be a multiple of 4 dividing 128");
static_assert(kBK * (kBM + kBN + 2 * kPad) * 4 <= 48 * 1024,
              "tile exceeds 48 KiB of shared memory");

// Four e4m3 values of one 32-bit word, in memory order, as floats.
__device__ __forceinline__ void fp8x4_to_float(unsigned int w, float* f) {
  const __half2_raw lo =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xFFFFu), __NV_E4M3);
  const __half2_raw hi =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

extern "C" __global__ void __launch_bounds__(kThreads)
    gemm_fp8_seed(const __nv_fp8_e4m3* __restrict__ A, const float* __restrict__ A_scale,
                  const __nv_fp8_e4m3* __restrict__ B, const float* __restrict__ B_scale,
                  __nv_bfloat16* __restrict__ C, int M, int N, int K, int num_k_blocks) {
  __shared__ float a_s[kBK][kBM + kPad];  // a_s[kk][i] = a(m0 + i, k0 + kk), dequantised
  __shared__ float b_s[kBK][kBN + kPad];  // b_s[kk][j] = b(n0 + j, k0 + kk), dequantised

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const unsigned int* A32 = reinterpret_cast<const unsigned int*>(A);
  const unsigned int* B32 = reinterpret_cast<const unsigned int*>(B);
  const int words_per_row = K / 4;
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;

  for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    for (int tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
      const int m0 = tm * kBM, n0 = tn * kBN;
      const int my_rows = min(kTM, max(0, M - m0 - warp * kTM));  // warp-uniform
      float acc[kTM][kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

      for (int k0 = 0; k0 < K; k0 += kBK) {
        const int kb = k0 / kQuant;  // a BK slice never straddles a 128 block
        // Stage A: BM rows x BK/4 words.
        for (int e = tid; e < kBM * (kBK / 4); e += kThreads) {
          const int r = e / (kBK / 4), w = e % (kBK / 4);
          const int m = m0 + r;
          float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if (m < M) {
            fp8x4_to_float(A32[static_cast<size_t>(m) * words_per_row + k0 / 4 + w], f);
            const float s = A_scale[static_cast<size_t>(m) * num_k_blocks + kb];
#pragma unroll
            for (int q = 0; q < 4; ++q) f[q] *= s;
          }
#pragma unroll
          for (int q = 0; q < 4; ++q) a_s[4 * w + q][r] = f[q];
        }
        // Stage B: BN rows x BK/4 words.
        for (int e = tid; e < kBN * (kBK / 4); e += kThreads) {
          const int r = e / (kBK / 4), w = e % (kBK / 4);
          const int n = n0 + r;
          float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if (n < N) {
            fp8x4_to_float(B32[static_cast<size_t>(n) * words_per_row + k0 / 4 + w], f);
            const float s = B_scale[static_cast<size_t>(n / kQuant) * num_k_blocks + kb];
#pragma unroll
            for (int q = 0; q < 4; ++q) f[q] *= s;
          }
#pragma unroll
          for (int q = 0; q < 4; ++q) b_s[4 * w + q][r] = f[q];
        }
        __syncthreads();
        if (my_rows > 0) {
#pragma unroll 4
          for (int kk = 0; kk < kBK; ++kk) {
            float b[kTN];
#pragma unroll
            for (int j = 0; j < kTN; ++j) b[j] = b_s[kk][lane + 32 * j];
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
              if (i < my_rows) {
                const float a = a_s[kk][warp * kTM + i];  // a broadcast within the warp
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a, b[j], acc[i][j]);
              }
            }
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        const int m = m0 + warp * kTM + i;
        if (i >= my_rows) break;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          const int n = n0 + lane + 32 * j;
          if (n < N) C[static_cast<size_t>(m) * N + n] = __float2bfloat16_rn(acc[i][j]);
        }
      }
    }
  }
}
