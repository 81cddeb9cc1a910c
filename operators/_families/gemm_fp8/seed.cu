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
//   GEMM_FP8_PAD  float padding of a shared row     (default 4; CUDA-core path only)
//   GEMM_FP8_MMA  0: CUDA-core FMAs (default); 1: FP8 tensor cores through
//                 mma.sync.m16n8k32.e4m3 (sm_89+), warps 2 (M) x 4 (N), BM a multiple of 32,
//                 BN of 32, BK of 32 dividing 128; raw fp8 tiles in shared memory, the partial
//                 sums of each 128-wide K block scaled by A_scale * B_scale and added to float32
//                 accumulators (DeepGEMM-style promotion)
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
#ifndef GEMM_FP8_MMA
#define GEMM_FP8_MMA 0
#endif

constexpr int kBM = GEMM_FP8_BM, kBN = GEMM_FP8_BN, kBK = GEMM_FP8_BK, kPad = GEMM_FP8_PAD;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kQuant = 128;  // quantisation block along K (and N for B)

#if !GEMM_FP8_MMA
constexpr int kTM = kBM / kWarps, kTN = kBN / 32;

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

#else  // GEMM_FP8_MMA: FP8 tensor cores

constexpr int kWarpsM = 2, kWarpsN = 4;  // 8 warps
constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;
constexpr int kMI = kWM / 16, kNI = kWN / 8;  // m16n8k32 tiles per warp
constexpr int kRow = kBK + 16;                // bytes per shared row: 16-byte aligned, and the
                                              // 8 rows of a fragment load hit distinct banks

static_assert(kPad >= 0, "GEMM_FP8_PAD is unused with GEMM_FP8_MMA");
static_assert(kBM % 32 == 0, "GEMM_FP8_BM must be a multiple of 32 with GEMM_FP8_MMA");
static_assert(kBN % 32 == 0, "GEMM_FP8_BN must be a multiple of 32 with GEMM_FP8_MMA");
static_assert(kBK % 32 == 0 && kQuant % kBK == 0,
              "GEMM_FP8_BK must be 32, 64 or 128 with GEMM_FP8_MMA");
static_assert((kBM + kBN) * kRow <= 48 * 1024, "tile exceeds 48 KiB of shared memory");

__device__ __forceinline__ unsigned int lds32(const unsigned char* p) {
  return *reinterpret_cast<const unsigned int*>(p);
}

// D = A (16x32 e4m3, row) * B (32x8 e4m3, col) + D, float32.
__device__ __forceinline__ void mma_e4m3(float* d, const unsigned int* a, const unsigned int* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Raw bytes of rows [r0, r0 + rows) x [k0, k0 + BK) of a [R, K] fp8 matrix into dst[row][...],
// 16 bytes per load; rows past R are zeros.
template <int kRows>
__device__ __forceinline__ void stage_raw(unsigned char (*dst)[kRow], const __nv_fp8_e4m3* src,
                                          int R, int K, int r0, int k0, int tid) {
  constexpr int kChunks = kBK / 16;
  for (int e = tid; e < kRows * kChunks; e += kThreads) {
    const int r = e / kChunks, c = e % kChunks;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r0 + r < R) {
      v = *reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(src) +
                                          static_cast<size_t>(r0 + r) * K + k0 + 16 * c);
    }
    *reinterpret_cast<uint4*>(&dst[r][16 * c]) = v;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    gemm_fp8_seed(const __nv_fp8_e4m3* __restrict__ A, const float* __restrict__ A_scale,
                  const __nv_fp8_e4m3* __restrict__ B, const float* __restrict__ B_scale,
                  __nv_bfloat16* __restrict__ C, int M, int N, int K, int num_k_blocks) {
  __shared__ __align__(16) unsigned char a_s[kBM][kRow];  // a_s[i][kk] = A[m0 + i, k0 + kk]
  __shared__ __align__(16) unsigned char b_s[kBN][kRow];  // b_s[j][kk] = B[n0 + j, k0 + kk]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int g = lane / 4, t = lane % 4;  // the mma fragments' groupID and thread-in-group
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;

  for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    for (int tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
      const int m0 = tm * kBM, n0 = tn * kBN;
      const bool active = m0 + wm * kWM < M;  // warp-uniform: rows past M do no MMAs
      float acc[kMI][kNI][4], part[kMI][kNI][4];
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[i][j][q] = part[i][j][q] = 0.0f;

      for (int k0 = 0; k0 < K; k0 += kBK) {
        stage_raw<kBM>(a_s, A, M, K, m0, k0, tid);
        stage_raw<kBN>(b_s, B, N, K, n0, k0, tid);
        __syncthreads();
        if (active) {
#pragma unroll
          for (int kk = 0; kk < kBK; kk += 32) {
            unsigned int af[kMI][4], bf[kNI][2];
#pragma unroll
            for (int i = 0; i < kMI; ++i) {
              const int r = wm * kWM + i * 16 + g;
              af[i][0] = lds32(&a_s[r][kk + 4 * t]);
              af[i][1] = lds32(&a_s[r + 8][kk + 4 * t]);
              af[i][2] = lds32(&a_s[r][kk + 16 + 4 * t]);
              af[i][3] = lds32(&a_s[r + 8][kk + 16 + 4 * t]);
            }
#pragma unroll
            for (int j = 0; j < kNI; ++j) {
              const int c = wn * kWN + j * 8 + g;
              bf[j][0] = lds32(&b_s[c][kk + 4 * t]);
              bf[j][1] = lds32(&b_s[c][kk + 16 + 4 * t]);
            }
#pragma unroll
            for (int i = 0; i < kMI; ++i)
#pragma unroll
              for (int j = 0; j < kNI; ++j) mma_e4m3(part[i][j], af[i], bf[j]);
          }
          // End of a 128-wide K block: promote the raw partial sums with the two scales.
          if ((k0 + kBK) % kQuant == 0) {
            const int kb = k0 / kQuant;
#pragma unroll
            for (int i = 0; i < kMI; ++i) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm * kWM + i * 16 + g + 8 * h;
                const float sa = m < M ? A_scale[static_cast<size_t>(m) * num_k_blocks + kb] : 0.0f;
#pragma unroll
                for (int j = 0; j < kNI; ++j) {
#pragma unroll
                  for (int q = 0; q < 2; ++q) {
                    const int n = n0 + wn * kWN + j * 8 + 2 * t + q;
                    const float sb =
                        n < N ? B_scale[static_cast<size_t>(n / kQuant) * num_k_blocks + kb] : 0.0f;
                    acc[i][j][2 * h + q] =
                        fmaf(part[i][j][2 * h + q], sa * sb, acc[i][j][2 * h + q]);
                    part[i][j][2 * h + q] = 0.0f;
                  }
                }
              }
            }
          }
        }
        __syncthreads();
      }
      if (active) {
#pragma unroll
        for (int i = 0; i < kMI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * kWM + i * 16 + g + 8 * h;
            if (m >= M) continue;
#pragma unroll
            for (int j = 0; j < kNI; ++j)
#pragma unroll
              for (int q = 0; q < 2; ++q) {
                const int n = n0 + wn * kWN + j * 8 + 2 * t + q;
                if (n < N)
                  C[static_cast<size_t>(m) * N + n] = __float2bfloat16_rn(acc[i][j][2 * h + q]);
              }
          }
      }
    }
  }
}

#endif  // GEMM_FP8_MMA
