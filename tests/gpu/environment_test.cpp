// The driver table and environment probe on a real GPU. Every test skips without one.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <vector>

#include "device/driver.hpp"
#include "gpu_test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

// out[blockIdx.x] = 42, written by hand so the test needs no compiler.
constexpr const char* kWrite42Ptx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry write42(
    .param .u64 out
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    mov.u32 %r2, 42;
    st.global.u32 [%rd4], %r2;
    ret;
}
)";

// out[blockIdx.x] = number of blocks in this block's cluster (sm_90+).
constexpr const char* kClusterSizePtx = R"(
.version 7.8
.target sm_90
.address_size 64

.visible .entry cluster_size(
    .param .u64 out
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %cluster_nctarank;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}
)";

TEST(GpuEnvironment, ReportDescribesTheGpu) {
  SKIP_WITHOUT_GPU();
  const EnvironmentReport r = probe_environment();
  std::cout << to_json(r).dump(2) << "\n";
  ASSERT_TRUE(r.driver.available);
  ASSERT_FALSE(r.gpus.empty());
  EXPECT_GE(r.driver.cuda_version, 12000);
  EXPECT_FALSE(r.driver.nvidia_version.empty());
  EXPECT_NE(r.profiling.permission, ProfilingPermission::kUnknown) << r.profiling.reason;
  for (const GpuInfo& g : r.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GT(g.l2_cache_bytes, 0);
    EXPECT_GE(g.cc_major * 10 + g.cc_minor, 70);
    EXPECT_GT(g.total_memory_bytes, 0u);
    EXPECT_GE(g.shared_memory_per_block_optin_bytes, 48 * 1024);
    EXPECT_EQ(g.arch, default_arch_for(g.cc_major, g.cc_minor));
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_FALSE(g.pci_bus_id.empty());
    if (r.nvml_available) {
      EXPECT_TRUE(g.max_sm_clock_mhz.has_value());
      EXPECT_TRUE(g.sm_clock_mhz.has_value());
    }
  }
  EXPECT_EQ(default_arch_for_device(0), r.gpus[0].arch);
  EXPECT_LT(r.probe_seconds, 5.0);
}

// The table alone, as the brief for the correctness worker will use it.
TEST(GpuEnvironment, RawTableLoadsPtxLaunchesAndCopiesBack) {
  SKIP_WITHOUT_GPU();
  const auto& cu = device::Driver::instance();
  device::PrimaryContext ctx(0);

  CUmodule mod = nullptr;
  KHARNESS_CU(cu, cuModuleLoadData, &mod, kWrite42Ptx);
  CUfunction f = nullptr;
  KHARNESS_CU(cu, cuModuleGetFunction, &f, mod, "write42");

  constexpr unsigned kBlocks = 8;
  CUdeviceptr out = 0;
  KHARNESS_CU(cu, cuMemAlloc, &out, kBlocks * sizeof(std::uint32_t));
  KHARNESS_CU(cu, cuMemsetD8, out, 0, kBlocks * sizeof(std::uint32_t));

  CUlaunchConfig config{};
  config.gridDimX = kBlocks;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  void* params[] = {&out};
  KHARNESS_CU(cu, cuLaunchKernelEx, &config, f, params, nullptr);
  KHARNESS_CU(cu, cuCtxSynchronize);

  std::vector<std::uint32_t> host(kBlocks, 0);
  KHARNESS_CU(cu, cuMemcpyDtoH, host.data(), out, kBlocks * sizeof(std::uint32_t));
  for (unsigned i = 0; i < kBlocks; ++i) EXPECT_EQ(host[i], 42u) << "block " << i;

  KHARNESS_CU(cu, cuMemFree, out);
  KHARNESS_CU(cu, cuModuleUnload, mod);
}

TEST(GpuEnvironment, HelpersStreamsEventsAndDynamicSharedOptIn) {
  SKIP_WITHOUT_GPU();
  device::PrimaryContext ctx(0);
  device::Module mod(kWrite42Ptx);
  const CUfunction f = mod.function("write42");
  device::DeviceBuffer out(4 * sizeof(std::uint32_t));
  out.fill(0);
  device::Stream stream;
  device::Event start, stop;

  CUdeviceptr p = out.ptr();
  void* params[] = {&p};
  device::LaunchConfig c;
  c.grid = {4, 1, 1};
  c.block = {64, 1, 1};
  c.stream = stream.get();
  c.shared_bytes = 100 * 1024;  // above the 48 KiB default: needs the opt-in

  const auto& cu = device::Driver::instance();
  const CUresult refused = device::launch_kernel(f, c, params);
  EXPECT_NE(refused, CUDA_SUCCESS);
  EXPECT_EQ(cu.error_name(refused), "CUDA_ERROR_INVALID_VALUE");

  ASSERT_EQ(device::opt_in_dynamic_shared(f, c.shared_bytes), CUDA_SUCCESS);
  start.record(stream.get());
  ASSERT_EQ(device::launch_kernel(f, c, params), CUDA_SUCCESS);
  stop.record(stream.get());
  stream.synchronize();
  EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);

  std::vector<std::uint32_t> host(4, 0);
  out.download(host.data(), host.size() * sizeof(std::uint32_t));
  for (auto v : host) EXPECT_EQ(v, 42u);
}

TEST(GpuEnvironment, ClusterLaunchAttribute) {
  SKIP_WITHOUT_GPU();
  const EnvironmentReport env = probe_environment();
  if (env.gpus.empty() || env.gpus[0].cc_major < 9) GTEST_SKIP() << "clusters need sm_90 or newer";
  device::PrimaryContext ctx(0);
  device::Module mod(kClusterSizePtx);
  const CUfunction f = mod.function("cluster_size");
  device::DeviceBuffer out(8 * sizeof(std::uint32_t));
  out.fill(0);
  CUdeviceptr p = out.ptr();
  void* params[] = {&p};
  device::LaunchConfig c;
  c.grid = {8, 1, 1};
  c.block = {32, 1, 1};
  c.cluster = {2, 1, 1};
  ASSERT_EQ(device::launch_kernel(f, c, params), CUDA_SUCCESS);
  KHARNESS_CU(device::Driver::instance(), cuCtxSynchronize);
  std::vector<std::uint32_t> host(8, 0);
  out.download(host.data(), host.size() * sizeof(std::uint32_t));
  for (auto v : host) EXPECT_EQ(v, 2u);
}

TEST(GpuEnvironment, ErrorsCarryTheCudaErrorName) {
  SKIP_WITHOUT_GPU();
  device::PrimaryContext ctx(0);
  device::Module mod(kWrite42Ptx);
  try {
    mod.function("no_such_kernel");
    FAIL() << "no exception";
  } catch (const device::CudaError& e) {
    EXPECT_EQ(e.name(), "CUDA_ERROR_NOT_FOUND");
    EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos);
  }
  try {
    device::Module bad(
        ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k() { bogus; }\n");
    FAIL() << "no exception";
  } catch (const device::CudaError& e) {
    EXPECT_EQ(e.name(), "CUDA_ERROR_INVALID_PTX") << e.what();
  }
}

}  // namespace
}  // namespace kharness
