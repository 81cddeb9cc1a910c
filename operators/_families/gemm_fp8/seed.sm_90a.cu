/* kharness
{
  "launches": [
    { "kernel": "gemm_fp8_tma_wgmma_kernel",
      "grid": ["min(cdiv(M, 128) * cdiv(N, 128), 132)", 1, 1],
      "block": [384, 1, 1],
      "shared_bytes": "5 * (128 + 128) * 128 + 1024",
      "tensor_maps": {
        "a_map": {"tensor": "A", "box": [128, 128], "swizzle": "128B", "l2_promotion": "256B"},
        "b_map": {"tensor": "B", "box": [128, 128], "swizzle": "128B", "l2_promotion": "256B"}
      },
      "args": [{"tensor_map": "a_map"}, {"tensor_map": "b_map"}, "A_scale", "B_scale", "C",
               "M", "N", "K", "num_k_blocks"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Hopper (sm_90a) seed for the gemm_fp8 family in the DeepGEMM style: C[M, N] =
// bf16(dequant(A) @ dequant(B)^T), A e4m3 [M, K] with 1x128 scales A_scale [M, K/128], B e4m3
// [N, K] with 128x128 scales B_scale [ceil(N/128), K/128].
//  - TMA: one tensor map per operand (BM x 128 and BN x 128 byte boxes, 128-byte swizzle), loaded
//    by one producer thread into a STAGES-deep ring of shared-memory stages guarded by mbarriers
//    (full: the copy engine's byte count; empty: one arrival per consumer warp).
//  - Warp specialisation: warpgroup 0 produces (40 registers after setmaxnreg), warpgroups
//    1..BM/64 consume, one 64-row slice each (232 registers).
//  - FP8 wgmma m64nBNk32 (e4m3 x e4m3 -> f32), four per 128-wide K block, into a block
//    accumulator that starts from zero (scale-d = 0 on the first); after each block the partial
//    sums are promoted into float32 accumulators with A_scale[row][kb] * B_scale[nb][kb]
//    (DeepGEMM's promotion: the Hopper FP8 tensor cores accumulate with limited precision, so a
//    block's sum never grows long). The scales are read with __ldg before the stage's wait.
//  - BN = 64 or 128 divides 128, so a tile lies in one 128-column block of B_scale; BN = 192
//    and 256 reach into a second one (n0 % 128 is 0 or 64), and each 8-column group of the
//    accumulator takes its own block's scale. BN = 256 runs as two 128-wide wgmma halves, each
//    promoted before the next, so that its partial sums fit the registers beside the accumulators.
//  - Split-K (SPLIT_K > 1, for small M where the tiles leave most SMs idle): the plan launches
//    clusters of SPLIT_K blocks, all walking the same tiles, block r of a cluster summing the K
//    blocks [r * kb / S, (r + 1) * kb / S). The float32 partial sums go to each block's shared
//    memory; after a cluster barrier each block adds its share of the tile's columns over the S
//    blocks in rank order, read through distributed shared memory, and stores the bf16 result:
//    deterministic, no workspace, no second launch.
//  - Persistent: min(tiles, 132) blocks (one per H200 SM) walk the tiles in grouped order
//    (GROUP_M); the ring runs on across a block's tiles, so the producer loads the next tile
//    while the consumers write this one's bf16 epilogue from registers (bounds-checked). On
//    16384 x 32768 x 512 (four K blocks a tile) this took the kernel from 1604 to 1188 us.
// Knobs (tune.sm_90a.json): BM (64, 128), BN (64, 128, 192, 256), STAGES, GROUP_M, CTAS (grid
// size), SPLIT_K (cluster size; 1: no split).
// Directions: two consumer warpgroups on different tiles (ping-pong), TMA-loaded A scales (in the
// transposed [K/128, M] layout DeepGEMM uses), 2-CTA clusters multicasting B, other
// non-power-of-two BN (DeepGEMM's 112/120/144), a TMA-store epilogue, overlapping split-K's
// reduction with the next tile's loads (the producer waits at the cluster barriers today).
#include <cuda_bf16.h>

// NVRTC has no C standard headers: the fixed-width types the PTX wrappers use.
using u32 = unsigned int;
using u64 = unsigned long long;
// The driver's CUtensorMap (cuda.h, which NVRTC cannot include): 128 opaque bytes, 64-byte
// aligned; taken by __grid_constant__ value, the PTX parameter is .param .align 64 .b8 [128].
struct alignas(64) CUtensorMap {
  u64 opaque[16];
};

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 5
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef SPLIT_K
#define SPLIT_K 1
#endif

constexpr int kBM = BM, kBN = BN, kStages = STAGES, kGroupM = GROUP_M, kSplitK = SPLIT_K;
constexpr int kBK = 128;  // 128 fp8 = 128 bytes: one row of the 128-byte swizzle, one scale block
constexpr int kConsumers = kBM / 64;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kATileBytes = kBM * kBK;
constexpr int kBTileBytes = kBN * kBK;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
// The wgmma N: the whole tile, except BN = 256, which runs as two 128-wide halves.
constexpr int kWN = kBN > 192 ? 128 : kBN;
constexpr int kChunks = kBN / kWN;
// Split-K's float32 partial sums of a tile, after the ring (none without split-K).
constexpr int kReduceBytes = kSplitK > 1 ? kBM * kBN * 4 : 0;
static_assert(kBM == 64 || kBM == 128, "BM is 64 or 128 (one or two consumer warpgroups)");
static_assert(kBN == 64 || kBN == 128 || kBN == 192 || kBN == 256,
              "BN is 64 or 128 (a divisor of the 128-wide scale block), 192 or 256 (two blocks)");
static_assert(kSplitK == 1 || kSplitK == 2 || kSplitK == 4 || kSplitK == 8,
              "SPLIT_K is the cluster size: 1, 2, 4 or 8 (8 is the portable maximum)");
static_assert(kStages >= 2 && kStages * kStageBytes + kReduceBytes + 1024 <= 232448,
              "stages exceed 227 KiB");

__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ---- mbarriers -------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(u64* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity) {
  u32 done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA ---------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, u64* bar,
                                            int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(smem_u32(bar)), "r"(inner), "r"(outer)
      : "memory");
}

// ---- wgmma -------------------------------------------------------------------------------------
// A K-major operand tile in shared memory with the 128-byte swizzle: rows of 128 bytes, 8-row
// core groups 1024 bytes apart; the tile base is 1024-byte aligned.
__device__ __forceinline__ u64 smem_desc(const void* p) {
  u64 addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (u64(16 >> 4) << 16) | (u64(1024 >> 4) << 32) |
         (u64(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Ties the accumulators to this point, so no use of them is moved above a wgmma wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}


template <int N>
__device__ __forceinline__ void wgmma_tile(float (&d)[N / 2], u64 da, u64 db,
                                           int accumulate) {
  if constexpr (N == 64) {
    wgmma_m64n64k32_e4m3(d, da, db, accumulate);
  } else if constexpr (N == 128) {
    wgmma_m64n128k32_e4m3(d, da, db, accumulate);
  } else {
    wgmma_m64n192k32_e4m3(d, da, db, accumulate);
  }
}

// The block order: tile t of the grid-stride sequence -> (tile_m, tile_n), grouped by GROUP_M rows.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int per_group = kGroupM * tiles_n;
  const int first_m = (tile / per_group) * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  m0 = (first_m + (tile % per_group) % group_rows) * kBM;
  n0 = ((tile % per_group) / group_rows) * kBN;
}

// One thread's two C values (row, col) and (row, col + 1), rounded to bf16, bounds-checked; a
// pair store where N is even.
__device__ __forceinline__ void store_pair(__nv_bfloat16* __restrict__ C, int row, int col, int M,
                                           int N, bool pairs, float v0, float v1) {
  if (row >= M || col >= N) return;
  __nv_bfloat16* out = C + static_cast<size_t>(row) * N + col;
  if (pairs && col + 1 < N) {
    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
  } else {
    out[0] = __float2bfloat16_rn(v0);
    if (col + 1 < N) out[1] = __float2bfloat16_rn(v1);
  }
}

// ---- clusters (split-K) ------------------------------------------------------------------------
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ u32 cluster_id() {
  u32 r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ u32 cluster_count() {
  u32 r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}
// The tiles a block walks: from its own index by the grid's size, or with split-K (a cluster of
// SPLIT_K blocks sharing each tile) from its cluster's index by the number of clusters.
__device__ __forceinline__ int first_tile() {
  if constexpr (kSplitK > 1) return static_cast<int>(cluster_id());
  return blockIdx.x;
}
__device__ __forceinline__ int tile_step() {
  if constexpr (kSplitK > 1) return static_cast<int>(cluster_count());
  return gridDim.x;
}
// Every thread of the cluster that has not exited arrives, then waits for the others; the arrive
// releases and the wait acquires, so shared-memory stores before it are seen by every CTA of the
// cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// A float of CTA `rank`'s shared memory at the address `p` has in this CTA's (distributed shared
// memory).
__device__ __forceinline__ float ld_cluster(const float* p, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(p)), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    gemm_fp8_tma_wgmma_kernel(const __grid_constant__ CUtensorMap a_map,
                              const __grid_constant__ CUtensorMap b_map,
                              const float* __restrict__ A_scale, const float* __restrict__ B_scale,
                              __nv_bfloat16* __restrict__ C, int M, int N, int K,
                              int num_k_blocks) {
  __shared__ __align__(8) u64 full[kStages];
  __shared__ __align__(8) u64 empty[kStages];
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);

  // Persistent: block b takes tiles b, b + gridDim.x, ... (the grid is min(tiles, CTAS)), so the
  // producer loads the next tile's K blocks while the consumers store this tile's C, and the
  // barrier set-up is paid once per SM rather than once per tile. The ring's position (it) runs
  // on across tiles: stage it % STAGES, phase (it / STAGES) & 1, the same count on both sides.
  // With split-K the unit is a cluster of SPLIT_K blocks instead: all of them walk the same tiles,
  // block `rank` of the cluster summing the K blocks [rank * kb / S, (rank + 1) * kb / S).
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int tiles = tiles_m * tiles_n;
  const int rank = kSplitK > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int kb_begin = kSplitK > 1 ? rank * num_k_blocks / kSplitK : 0;
  const int kb_end = kSplitK > 1 ? (rank + 1) * num_k_blocks / kSplitK : num_k_blocks;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&a_map)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&b_map)) : "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int it = 0;
      for (int tile = first_tile(); tile < tiles; tile += tile_step()) {
        int m0, n0;
        tile_coords(tile, tiles_m, tiles_n, m0, n0);
        for (int kb = kb_begin; kb < kb_end; ++kb, ++it) {
          const int s = it % kStages;
          mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          unsigned char* a = smem + s * kStageBytes;
          unsigned char* b = a + kATileBytes;
          mbar_expect_tx(&full[s], kStageBytes);
          tma_load_2d(a, &a_map, &full[s], kb * kBK, m0);
          tma_load_2d(b, &b_map, &full[s], kb * kBK, n0);
        }
        // A cluster barrier waits for every thread of the cluster that has not exited, this
        // one included: it takes part in the consumers' two barriers of each tile (after the
        // partial sums are stored, after they are read), once it has issued the tile's loads.
        if constexpr (kSplitK > 1) {
          cluster_sync();
          cluster_sync();
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int c = wg - 1;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  const bool pairs = (N & 1) == 0;
  int it = 0;
  for (int tile = first_tile(); tile < tiles; tile += tile_step()) {
    int m0, n0;
    tile_coords(tile, tiles_m, tiles_n, m0, n0);
    const int row0 = m0 + c * 64 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8
    const float* a_scale0 = A_scale + static_cast<size_t>(min(row0, M - 1)) * num_k_blocks;
    const float* a_scale1 = A_scale + static_cast<size_t>(min(row0 + 8, M - 1)) * num_k_blocks;
    const float* b_scale = B_scale + static_cast<size_t>(n0 / 128) * num_k_blocks;
    float acc[kBN / 2];
    float part[kWN / 2];
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
    for (int kb = kb_begin; kb < kb_end; ++kb, ++it) {
      const int s = it % kStages;
      const float sb = __ldg(b_scale + kb);
      const float s0 = __ldg(a_scale0 + kb) * sb, s1 = __ldg(a_scale1 + kb) * sb;
      // The tile's columns lie in one 128-wide block of B_scale when BN divides 128; a wider
      // tile reaches into the next one (n0 % 128 is 0 or 64, and n0 % 128 + BN <= 256), clamped
      // to the last block where the tile runs past N (those columns are not stored).
      float s0_hi = s0, s1_hi = s1;
      if constexpr (kBN > 128) {
        const int hi_block = min(n0 / 128 + 1, (N - 1) / 128);
        const float sb_hi = __ldg(B_scale + static_cast<size_t>(hi_block) * num_k_blocks + kb);
        s0_hi = __ldg(a_scale0 + kb) * sb_hi;
        s1_hi = __ldg(a_scale1 + kb) * sb_hi;
      }
      mbar_wait(&full[s], (it / kStages) & 1);
      const unsigned char* a = smem + s * kStageBytes + c * 64 * 128;
      const unsigned char* b = smem + s * kStageBytes + kATileBytes;
      const u64 da = smem_desc(a), db = smem_desc(b);
      // BN = 256 runs as two 128-wide halves (kChunks), each summed into `part` and promoted
      // before the next: 128 accumulators and 64 partial sums fit the consumers' 232 registers,
      // 128 and 128 would not.
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kBK / 32; ++k) {
          // +32 bytes per K step of 32; the second half's B rows start 128 rows (16 KiB) on.
          wgmma_tile<kWN>(part, da + 2 * k, db + ch * (kWN * 128 >> 4) + 2 * k, k > 0);
        }
        wgmma_commit();
        wgmma_wait_all();
        fence_regs(part);
        if (ch == kChunks - 1 && (threadIdx.x & 31) == 0) mbar_arrive(&empty[s]);
        // Promotion: register 4j + 2h + e holds row row0 + 8h, column 8j + 2 (lane % 4) + e.
#pragma unroll
        for (int jj = 0; jj < kWN / 8; ++jj) {
          const int j = ch * (kWN / 8) + jj;
          float t0 = s0, t1 = s1;
          if constexpr (kBN > 128) {
            const bool hi = n0 % 128 + 8 * j >= 128;
            t0 = hi ? s0_hi : s0;
            t1 = hi ? s1_hi : s1;
          }
          acc[4 * j + 0] += part[4 * jj + 0] * t0;
          acc[4 * j + 1] += part[4 * jj + 1] * t0;
          acc[4 * j + 2] += part[4 * jj + 2] * t1;
          acc[4 * j + 3] += part[4 * jj + 3] * t1;
        }
      }
    }

    if constexpr (kSplitK > 1) {
      // Split-K: each block of the cluster stores its float32 partial sums in its own shared
      // memory (accumulator i of consumer thread t at red[i * threads + t]: a warp's stores and
      // loads are 32 consecutive floats), and after the barrier block `rank` sums the 8-column
      // groups j with j % S == rank over the S blocks' partials, read through distributed shared
      // memory in rank order, so the sum (and the result) does not depend on timing. The second
      // barrier keeps every buffer until all its readers are done: the next tile overwrites it,
      // and a block that exits takes its shared memory with it.
      constexpr int kRedThreads = kConsumers * 128;
      float* red = reinterpret_cast<float*>(smem + kStages * kStageBytes);
      const int t = threadIdx.x - 128;
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) red[i * kRedThreads + t] = acc[i];
      cluster_sync();
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        if (j % kSplitK != rank) continue;
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[e] = 0.0f;
          const float* mine = red + (4 * j + e) * kRedThreads + t;
          for (int q = 0; q < kSplitK; ++q) v[e] += ld_cluster(mine, static_cast<u32>(q));
        }
        const int col = n0 + 8 * j + 2 * (lane & 3);
        store_pair(C, row0, col, M, N, pairs, v[0], v[1]);
        store_pair(C, row0 + 8, col, M, N, pairs, v[2], v[3]);
      }
      cluster_sync();
    } else {
      // The bf16 epilogue from registers; the stores drain while the next tile's K loop runs.
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * (lane & 3);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          store_pair(C, row0 + 8 * h, col, M, N, pairs, acc[4 * j + 2 * h],
                     acc[4 * j + 2 * h + 1]);
        }
      }
    }
  }
}
