/* kharness
{
  "launches": [
    { "kernel": "gemm_wmma_kernel",
      "grid": ["cdiv(N, 128)", "cdiv(M, 128)", 1],
      "block": [256, 1, 1],
      "shared_bytes": "61440",
      "args": ["A", "B", "C", "M", "N", "K"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for the gemm_n*_k* family: C[M, N] = fp16(A[M, K] @ B[N, K]^T), fp32 accumulate.
// Tensor cores through nvcuda::wmma (16x16x16 fp16 fragments, fp32 accumulators).
//  - One block of 256 threads (8 warps) computes a 128x128 tile of C; each warp a 64x32 sub-tile
//    (4x2 fragments, 8 accumulators).
//  - K advances in slices of 32. A and B slices are copied to shared memory with cp.async
//    (16-byte chunks, out-of-range rows zero-filled), 3 stages deep so copies overlap the MMAs.
//    B is stored as [n][k], which is exactly the col_major K x N operand wmma wants ("NT" GEMM).
//  - Rows are padded by 8 halves (40 halves, 80 bytes) to spread shared-memory banks.
//  - Epilogue: each warp stages one 16x16 fp32 fragment at a time in shared memory, then writes
//    it as fp16 (round to nearest) with bounds checks, so any M and N work.
//  - K must be a multiple of 8 for the 16-byte copies; otherwise a scalar load path is used.
// Knobs (tune.json beside this file; the tune provider passes -DBM=.. etc. and the matching grid,
// block and shared_bytes): block tile BM x BN, K slice BK, warp tile WARP_M x WARP_N (threads =
// (BM / WARP_M) * (BN / WARP_N) * 32), STAGES and GROUP_M (grouped block order for L2 reuse);
// the defaults are the plan above.
// Directions: split-K or smaller tiles for decode (small M), and on
// Hopper wgmma + TMA with warp specialisation.
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WARP_M
#define WARP_M 64
#endif
#ifndef WARP_N
#define WARP_N 32
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 1
#endif

constexpr int kBM = BM, kBN = BN, kBK = BK;
constexpr int kStages = STAGES;
constexpr int kGroupM = GROUP_M;  // tile rows per group of the block order (1: row by row)
constexpr int kWarpM = WARP_M, kWarpN = WARP_N;
constexpr int kWarpsN = kBN / kWarpN;
constexpr int kThreads = (kBM / kWarpM) * kWarpsN * 32;
constexpr int kLd = kBK + 8;                        // padded row length in halves
constexpr int kTileHalves = (kBM + kBN) * kLd;      // one stage: A rows then B rows
constexpr int kFragM = kWarpM / 16, kFragN = kWarpN / 16;
constexpr int kChunksPerRow = kBK / 8;              // 16-byte chunks in a row of a K slice

static_assert(kBM % kWarpM == 0 && kBN % kWarpN == 0, "warp tiles must cover the block tile");
static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0 && kBK % 16 == 0, "whole wmma fragments");
static_assert(kStages >= 2, "at least double buffering");
static_assert(kThreads <= 1024, "at most 1024 threads");
// The plan's shared_bytes is max(kStages * kTileHalves * 2, warps * 1024): the stages, then the
// 16x16 fp32 epilogue tile of each warp.

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_size = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies the K slice starting at k0 of A rows [m0, m0+kBM) and B rows [n0, n0+kBN) into `tile`.
__device__ __forceinline__ void load_stage(__half* tile, const __half* __restrict__ A,
                                           const __half* __restrict__ B, int M, int N, int K,
                                           int m0, int n0, int k0, bool vec) {
  __half* a_s = tile;
  __half* b_s = tile + kBM * kLd;
  if (vec) {
    // Rows x kChunksPerRow chunks of 8 halves; K % 8 == 0, so a chunk is wholly in or out.
    constexpr int kChunksA = kBM * kChunksPerRow, kChunksB = kBN * kChunksPerRow;
    if constexpr (kBM == kBN && kChunksA % kThreads == 0) {
      // Square tiles (the defaults): one loop copies the same chunk of A and of B.
#pragma unroll
      for (int i = 0; i < kChunksA / kThreads; ++i) {
        const unsigned c = threadIdx.x + i * kThreads;
        const int r = c / kChunksPerRow, kc = (c % kChunksPerRow) * 8;
        const int k = k0 + kc;
        const bool ka = k < K;
        const int m = m0 + r, n = n0 + r;
        const bool va = ka && m < M, vb = ka && n < N;
        cp_async_16(a_s + r * kLd + kc, va ? A + static_cast<size_t>(m) * K + k : A, va);
        cp_async_16(b_s + r * kLd + kc, vb ? B + static_cast<size_t>(n) * K + k : B, vb);
      }
    } else {
#pragma unroll
      for (int i = 0; i < (kChunksA + kThreads - 1) / kThreads; ++i) {
        const unsigned c = threadIdx.x + i * kThreads;
        if (kChunksA % kThreads != 0 && c >= kChunksA) continue;
        const int r = c / kChunksPerRow, kc = (c % kChunksPerRow) * 8;
        const int k = k0 + kc, m = m0 + r;
        const bool va = k < K && m < M;
        cp_async_16(a_s + r * kLd + kc, va ? A + static_cast<size_t>(m) * K + k : A, va);
      }
#pragma unroll
      for (int i = 0; i < (kChunksB + kThreads - 1) / kThreads; ++i) {
        const unsigned c = threadIdx.x + i * kThreads;
        if (kChunksB % kThreads != 0 && c >= kChunksB) continue;
        const int r = c / kChunksPerRow, kc = (c % kChunksPerRow) * 8;
        const int k = k0 + kc, n = n0 + r;
        const bool vb = k < K && n < N;
        cp_async_16(b_s + r * kLd + kc, vb ? B + static_cast<size_t>(n) * K + k : B, vb);
      }
    }
  } else if constexpr (kBM == kBN) {
    for (int c = threadIdx.x; c < kBM * kBK; c += kThreads) {
      const int r = c / kBK, kc = c % kBK;
      const int k = k0 + kc, m = m0 + r, n = n0 + r;
      a_s[r * kLd + kc] = (m < M && k < K) ? A[static_cast<size_t>(m) * K + k] : __float2half(0.0f);
      b_s[r * kLd + kc] = (n < N && k < K) ? B[static_cast<size_t>(n) * K + k] : __float2half(0.0f);
    }
  } else {
    for (int c = threadIdx.x; c < kBM * kBK; c += kThreads) {
      const int r = c / kBK, kc = c % kBK;
      const int k = k0 + kc, m = m0 + r;
      a_s[r * kLd + kc] = (m < M && k < K) ? A[static_cast<size_t>(m) * K + k] : __float2half(0.0f);
    }
    for (int c = threadIdx.x; c < kBN * kBK; c += kThreads) {
      const int r = c / kBK, kc = c % kBK;
      const int k = k0 + kc, n = n0 + r;
      b_s[r * kLd + kc] = (n < N && k < K) ? B[static_cast<size_t>(n) * K + k] : __float2half(0.0f);
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    gemm_wmma_kernel(const __half* __restrict__ A, const __half* __restrict__ B,
                     __half* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* smem = reinterpret_cast<__half*>(smem_raw);

  int tile_m = blockIdx.y, tile_n = blockIdx.x;
  if constexpr (kGroupM > 1) {
    // Grouped order: consecutive blocks walk kGroupM tile rows down one tile column before the
    // next column, so the B tiles they share are still in L2. A bijection of the grid's tiles.
    const int pid = blockIdx.y * gridDim.x + blockIdx.x;
    const int per_group = kGroupM * gridDim.x;
    const int first_m = (pid / per_group) * kGroupM;
    const int group_rows = min(static_cast<int>(gridDim.y) - first_m, kGroupM);
    tile_m = first_m + (pid % per_group) % group_rows;
    tile_n = (pid % per_group) / group_rows;
  }
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / kWarpsN) * kWarpM;  // defaults: 0 or 64
  const int wn = (warp % kWarpsN) * kWarpN;  // defaults: 0, 32, 64, 96
  const bool vec = (K % 8) == 0;
  const int num_k = (K + kBK - 1) / kBK;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragM][kFragN];
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // Prologue: stages 0 .. kStages-2 in flight (a group is committed even when empty).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k) load_stage(smem + s * kTileHalves, A, B, M, N, K, m0, n0, s * kBK, vec);
    cp_async_commit();
  }

  for (int kt = 0; kt < num_k; ++kt) {
    cp_async_wait<kStages - 2>();  // slice kt has landed (for this thread)
    __syncthreads();               // ... and for every thread; slice kt-1's buffer is free
    const int next = kt + kStages - 1;
    if (next < num_k) load_stage(smem + (next % kStages) * kTileHalves, A, B, M, N, K, m0, n0, next * kBK, vec);
    cp_async_commit();

    const __half* a_s = smem + (kt % kStages) * kTileHalves;
    const __half* b_s = a_s + kBM * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a_frag[kFragM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b_frag[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) wmma::load_matrix_sync(a_frag[i], a_s + (wm + i * 16) * kLd + kk, kLd);
#pragma unroll
      for (int j = 0; j < kFragN; ++j) wmma::load_matrix_sync(b_frag[j], b_s + (wn + j * 16) * kLd + kk, kLd);
#pragma unroll
      for (int i = 0; i < kFragM; ++i)
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the tiles: reuse shared memory for the epilogue

  float* stage = reinterpret_cast<float*>(smem_raw) + warp * 256;  // 16x16 floats per warp
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int row0 = m0 + wm + i * 16, col0 = n0 + wn + j * 16;
#pragma unroll
      for (int e = lane; e < 256; e += 32) {
        const int r = row0 + e / 16, c = col0 + e % 16;
        if (r < M && c < N) C[static_cast<size_t>(r) * N + c] = __float2half_rn(stage[e]);
      }
      __syncwarp();
    }
  }
}
