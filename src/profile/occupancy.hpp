// Theoretical occupancy of a launch and what limits it, by the CUDA occupancy calculator
// (<cuda_occupancy.h>, the rules Nsight Compute's launch__occupancy_limit_* report). Pure: the
// device and function attributes are plain numbers, so it is tested without a GPU.
#pragma once

#include <cstddef>
#include <string>

namespace kharness::profile {

struct OccupancyDevice {
  int cc_major = 0;
  int cc_minor = 0;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int regs_per_block = 65536;
  int regs_per_sm = 65536;
  int warp_size = 32;
  std::size_t shared_per_block = 48 * 1024;
  std::size_t shared_per_sm = 0;
  std::size_t shared_per_block_optin = 0;
  std::size_t reserved_shared_per_block = 0;
  int sm_count = 0;
};

struct OccupancyFunction {
  int registers = 0;                   // per thread
  std::size_t static_shared = 0;       // per block
  std::size_t max_dynamic_shared = 0;  // the opt-in limit set on the function
  int max_threads_per_block = 1024;
};

struct Occupancy {
  bool ok = false;
  std::string error;      // why not ok
  int blocks_per_sm = 0;  // active blocks per SM
  int limit_registers = 0;
  int limit_shared_mem = 0;
  int limit_warps = 0;
  int limit_blocks = 0;
  double theoretical_percent = 0.0;  // active warps / max warps per SM, in %
};

// `carveout_bytes`: the shared-memory configuration the driver chose for the launch (CUPTI's
// sharedMemoryExecuted, ncu's launch__shared_mem_config_size), 0 when unknown. The driver picks a
// carveout just large enough for the blocks the other limits allow and gives the rest to L1, so
// the shared-memory limit Nsight Compute reports is the carveout over each block's share (its
// static and dynamic shared memory plus the per-block reservation), at most the SM's block limit
// (an H200 copy kernel: 32 KiB / 1 KiB = 32; a kernel limited to one block by registers: 8 KiB /
// 1 KiB = 8). Unknown: the calculator's limit with the largest carveout, capped the same way.
Occupancy compute_occupancy(const OccupancyDevice& device, const OccupancyFunction& function,
                            int block_threads, std::size_t dynamic_shared,
                            std::size_t carveout_bytes = 0);

}  // namespace kharness::profile
