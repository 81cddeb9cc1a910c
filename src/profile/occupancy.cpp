#include "profile/occupancy.hpp"

#include <cuda_occupancy.h>
#include <fmt/format.h>

#include <algorithm>

namespace kharness::profile {

Occupancy compute_occupancy(const OccupancyDevice& d, const OccupancyFunction& f, int block_threads,
                            std::size_t dynamic_shared, std::size_t carveout_bytes) {
  cudaOccDeviceProp prop;
  prop.computeMajor = d.cc_major;
  prop.computeMinor = d.cc_minor;
  prop.maxThreadsPerBlock = d.max_threads_per_block;
  prop.maxThreadsPerMultiprocessor = d.max_threads_per_sm;
  prop.regsPerBlock = d.regs_per_block;
  prop.regsPerMultiprocessor = d.regs_per_sm;
  prop.warpSize = d.warp_size;
  prop.sharedMemPerBlock = d.shared_per_block;
  prop.sharedMemPerMultiprocessor = d.shared_per_sm;
  prop.numSms = d.sm_count;
  prop.sharedMemPerBlockOptin = d.shared_per_block_optin;
  prop.reservedSharedMemPerBlock = d.reserved_shared_per_block;

  cudaOccFuncAttributes attr;
  attr.maxThreadsPerBlock = f.max_threads_per_block;
  attr.numRegs = f.registers;
  attr.sharedSizeBytes = f.static_shared;
  attr.partitionedGCConfig = PARTITIONED_GC_OFF;
  attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attr.maxDynamicSharedSizeBytes = f.max_dynamic_shared;
  attr.numBlockBarriers = 1;

  cudaOccDeviceState state;
  cudaOccResult result{};
  Occupancy out;
  const cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state,
                                                                 block_threads, dynamic_shared);
  if (e != CUDA_OCC_SUCCESS) {
    out.error = fmt::format("the occupancy calculator refused the launch (cudaOccError {})",
                            static_cast<int>(e));
    return out;
  }
  out.ok = true;
  out.blocks_per_sm = result.activeBlocksPerMultiprocessor;
  out.limit_registers = result.blockLimitRegs;
  // Without shared memory the calculator's limit is the SM's whole carveout over the per-block
  // reservation (228 on an H200); ncu reports it capped at the SM's block limit (32), as here.
  out.limit_shared_mem = std::min(result.blockLimitSharedMem, result.blockLimitBlocks);
  if (carveout_bytes > 0) {
    const std::size_t per_block = f.static_shared + dynamic_shared + d.reserved_shared_per_block;
    const std::size_t fit = per_block > 0 ? carveout_bytes / per_block
                                          : static_cast<std::size_t>(result.blockLimitBlocks);
    out.limit_shared_mem = static_cast<int>(
        std::min<std::size_t>(fit, static_cast<std::size_t>(result.blockLimitBlocks)));
  }
  out.limit_warps = result.blockLimitWarps;
  out.limit_blocks = result.blockLimitBlocks;
  const int warps_per_block = (block_threads + d.warp_size - 1) / d.warp_size;
  const int max_warps = d.max_threads_per_sm / d.warp_size;
  if (max_warps > 0) {
    out.theoretical_percent = 100.0 * out.blocks_per_sm * warps_per_block / max_warps;
  }
  return out;
}

}  // namespace kharness::profile
