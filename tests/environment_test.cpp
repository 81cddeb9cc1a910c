// probe_environment() and the pieces it is made of. On a machine without an NVIDIA driver (CI,
// the development container) the report must say so, quickly, without crashing.
#include <gtest/gtest.h>

#include <chrono>

#include "device/driver.hpp"
#include "device/environment_internal.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"

namespace kharness {
namespace {

TEST(EnvironmentProbe, ReportsToolkitVersionsAndDriverState) {
  const auto start = std::chrono::steady_clock::now();
  const EnvironmentReport r = probe_environment();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  EXPECT_FALSE(r.nvrtc_version.empty());
  EXPECT_GE(r.runtime_version, 12000);
  EXPECT_GT(r.cupti_api_version, 0);
  EXPECT_FALSE(r.kharness_version.empty());
  EXPECT_GE(r.probe_seconds, 0.0);

  if (!r.driver.available) {
    // The driverless machine: a reason, no GPUs, nothing about profiling, and quick.
    EXPECT_FALSE(r.driver.reason.empty());
    EXPECT_NE(r.driver.reason.find("NVIDIA"), std::string::npos) << r.driver.reason;
    EXPECT_TRUE(r.gpus.empty());
    EXPECT_FALSE(r.gpu_ready());
    EXPECT_EQ(r.profiling.permission, ProfilingPermission::kUnknown);
    EXPECT_FALSE(gpu_available());
    EXPECT_EQ(default_arch_for_device(), "");
    EXPECT_LT(seconds, 0.5);
  } else {
    EXPECT_GE(r.driver.cuda_version, 12000);
    EXPECT_EQ(gpu_available(), !r.gpus.empty());
  }
}

TEST(EnvironmentProbe, RepeatedProbesAgree) {
  const EnvironmentReport a = probe_environment();
  const EnvironmentReport b = probe_environment();
  EXPECT_EQ(a.driver.available, b.driver.available);
  EXPECT_EQ(a.driver.reason, b.driver.reason);
  EXPECT_EQ(a.gpus.size(), b.gpus.size());
}

TEST(EnvironmentDriver, UnavailableDriverIsAValueAndRequireThrowsExit3) {
  const auto& cu = device::Driver::instance();
  if (cu.available() && cu.device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(cu.unavailable_reason().empty());
  try {
    cu.require();
    FAIL() << "require() did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kEnvironment);
    EXPECT_EQ(e.message(), cu.unavailable_reason());
  }
  if (!cu.available()) {
    EXPECT_EQ(cu.cuInit, nullptr);
    // Without a driver there is nothing to name an error with; the code is kept.
    EXPECT_EQ(cu.error_name(CUDA_ERROR_ILLEGAL_ADDRESS), "CUresult 700");
    const device::CudaError e = cu.error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize");
    EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(e.call(), "cuCtxSynchronize");
    EXPECT_NE(std::string(e.what()).find("cuCtxSynchronize"), std::string::npos);
  }
}

TEST(EnvironmentDriver, StickyErrors) {
  EXPECT_TRUE(device::is_sticky_error(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_TRUE(device::is_sticky_error(CUDA_ERROR_LAUNCH_FAILED));
  EXPECT_TRUE(device::is_sticky_error(CUDA_ERROR_ASSERT));
  EXPECT_FALSE(device::is_sticky_error(CUDA_ERROR_INVALID_VALUE));
  EXPECT_FALSE(device::is_sticky_error(CUDA_ERROR_OUT_OF_MEMORY));
}

TEST(EnvironmentDriver, CudaErrorMessageNamesCallAndError) {
  const device::CudaError e("cuModuleLoadData", CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX",
                            "a PTX JIT compilation failed");
  EXPECT_STREQ(e.what(), "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)");
  EXPECT_EQ(e.name(), "CUDA_ERROR_INVALID_PTX");
}

TEST(EnvironmentDriver, FormatsUuidLikeNvidiaSmi) {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(i * 17);
  EXPECT_EQ(device::format_uuid(u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(EnvironmentArch, DefaultArchUsesArchSpecificVariantWhereOneExists) {
  EXPECT_EQ(default_arch_for(9, 0), "sm_90a");
  EXPECT_EQ(default_arch_for(10, 0), "sm_100a");
  EXPECT_EQ(default_arch_for(10, 3), "sm_103a");
  EXPECT_EQ(default_arch_for(11, 0), "sm_110a");
  EXPECT_EQ(default_arch_for(12, 0), "sm_120a");
  EXPECT_EQ(default_arch_for(12, 1), "sm_121a");
  EXPECT_EQ(default_arch_for(8, 9), "sm_89");
  EXPECT_EQ(default_arch_for(8, 6), "sm_86");
  EXPECT_EQ(default_arch_for(8, 0), "sm_80");
  EXPECT_EQ(default_arch_for(7, 5), "sm_75");
  EXPECT_EQ(default_arch_for(7, 0), "sm_70");
  EXPECT_EQ(default_arch_for(0, 0), "");
}

TEST(EnvironmentVersions, CudaVersionString) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cuda_version_string(0), "");
}

TEST(EnvironmentParse, NvidiaVersionFile) {
  EXPECT_EQ(
      device::parse_nvidia_version_file(
          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Wed Aug 27 "
          "18:49:04 UTC 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"),
      "580.82.07");
  EXPECT_EQ(device::parse_nvidia_version_file(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release "
                "Build  (dvs-builder@U16-I2-C03-12-4)  Thu Oct 2 2025\n"),
            "580.159.03");
  EXPECT_EQ(
      device::parse_nvidia_version_file("NVRM version: NVIDIA UNIX Kernel Module  550.54  x\n"),
      "550.54");
  EXPECT_EQ(device::parse_nvidia_version_file(""), "");
  EXPECT_EQ(device::parse_nvidia_version_file("garbage\n"), "");
}

TEST(EnvironmentParse, ProfilingAdminOnly) {
  const std::string params =
      "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nRmProfilingAdminOnly: 1\nRmMsg: \"\"\n";
  EXPECT_EQ(device::parse_profiling_admin_only(params), 1);
  EXPECT_EQ(device::parse_profiling_admin_only("RmProfilingAdminOnly: 0\n"), 0);
  EXPECT_EQ(device::parse_profiling_admin_only("XRmProfilingAdminOnly: 1\n"), std::nullopt);
  EXPECT_EQ(device::parse_profiling_admin_only(""), std::nullopt);
}

TEST(EnvironmentParse, ProfilingDecision) {
  using device::decide_profiling;
  const std::string admin_only = "RmProfilingAdminOnly: 1\n";
  const std::string open = "RmProfilingAdminOnly: 0\n";

  EXPECT_EQ(decide_profiling(false, true, admin_only).permission, ProfilingPermission::kUnknown);
  EXPECT_EQ(decide_profiling(true, true, admin_only).permission, ProfilingPermission::kPermitted);
  EXPECT_EQ(decide_profiling(true, false, open).permission, ProfilingPermission::kPermitted);
  EXPECT_EQ(decide_profiling(true, false, std::nullopt).permission, ProfilingPermission::kUnknown);

  const ProfilingInfo denied = decide_profiling(true, false, admin_only);
  EXPECT_EQ(denied.permission, ProfilingPermission::kNotPermitted);
  EXPECT_NE(denied.fix.find("NVreg_RestrictProfilingToAdminUsers=0"), std::string::npos);
  EXPECT_NE(denied.fix.find("https://developer.nvidia.com/ERR_NVGPUCTRPERM"), std::string::npos);
}

TEST(EnvironmentJson, StableSnakeCaseFields) {
  EnvironmentReport r;
  r.driver.available = true;
  r.driver.cuda_version = 13000;
  r.driver.nvidia_version = "580.82.07";
  r.runtime_version = 13000;
  r.nvrtc_version = "13.0";
  r.cupti_api_version = 130001;
  r.profiling.permission = ProfilingPermission::kNotPermitted;
  GpuInfo g;
  g.name = "NVIDIA H200";
  g.cc_major = 9;
  g.cc_minor = 0;
  g.arch = "sm_90a";
  g.sm_count = 132;
  g.l2_cache_bytes = 62914560;
  g.sm_clock_mhz = 1980;
  r.gpus.push_back(g);

  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["driver"]["available"], true);
  EXPECT_EQ(j["driver"]["cuda_version"], "13.0");
  EXPECT_EQ(j["driver"]["cuda_version_number"], 13000);
  EXPECT_EQ(j["driver"]["nvidia_version"], "580.82.07");
  EXPECT_TRUE(j["driver"]["reason"].is_null());
  EXPECT_EQ(j["runtime_version"], "13.0");
  EXPECT_EQ(j["nvrtc_version"], "13.0");
  EXPECT_EQ(j["cupti_api_version"], 130001);
  EXPECT_EQ(j["profiling"]["permission"], "not_permitted");
  ASSERT_EQ(j["gpus"].size(), 1u);
  const auto& jg = j["gpus"][0];
  EXPECT_EQ(jg["name"], "NVIDIA H200");
  EXPECT_EQ(jg["compute_capability"], "9.0");
  EXPECT_EQ(jg["arch"], "sm_90a");
  EXPECT_EQ(jg["sm_count"], 132);
  EXPECT_EQ(jg["l2_cache_bytes"], 62914560);
  EXPECT_EQ(jg["sm_clock_mhz"], 1980);
  EXPECT_TRUE(jg["max_sm_clock_mhz"].is_null());
  EXPECT_TRUE(jg["uuid"].is_null());

  // The probe's own report serialises too, whatever the machine.
  const nlohmann::json live = to_json(probe_environment());
  EXPECT_TRUE(live.contains("driver"));
  EXPECT_TRUE(live["gpus"].is_array());
}

}  // namespace
}  // namespace kharness
