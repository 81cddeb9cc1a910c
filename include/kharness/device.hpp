// The machine kharness runs on: NVIDIA driver, GPUs, toolkit library versions and whether
// profiling counters are permitted (`kharness doctor`, and the environment of every verdict).
// Nothing here prints or throws for a missing driver or GPU: the report says what is missing.
// The CUDA driver API itself (function table, contexts, modules, launches) is internal to
// src/device/driver.hpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kharness {

struct GpuInfo {
  int index = 0;     // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;  // compute capability
  int cc_minor = 0;
  std::string arch;  // default NVRTC target for this GPU: "sm_90a" (default_arch_for)
  int sm_count = 0;
  std::uint64_t total_memory_bytes = 0;
  int l2_cache_bytes = 0;
  int max_persisting_l2_bytes = 0;
  int shared_memory_per_block_optin_bytes =
      0;  // the most dynamic+static shared one block may opt into
  int shared_memory_per_sm_bytes = 0;
  int max_threads_per_sm = 0;
  int registers_per_sm = 0;
  int memory_bus_width_bits = 0;
  bool cluster_launch = false;  // thread block clusters supported
  bool ecc_enabled = false;
  // Clocks in MHz from NVML; nullopt when NVML is missing or does not say.
  std::optional<int> sm_clock_mhz;
  std::optional<int> memory_clock_mhz;
  std::optional<int> max_sm_clock_mhz;
  std::optional<int> max_memory_clock_mhz;
  std::string pci_bus_id;  // "0000:19:00.0"
  std::string uuid;        // "GPU-4c1f0a2e-...", the form nvidia-smi prints
};

struct DriverInfo {
  bool available = false;
  std::string reason;          // why not, when !available (a sentence a user can act on)
  int cuda_version = 0;        // cuDriverGetVersion: 13000; 0 when unknown
  std::string nvidia_version;  // kernel module version "580.82.07"; empty when unknown
};

enum class ProfilingPermission { kPermitted, kNotPermitted, kUnknown };

struct ProfilingInfo {
  ProfilingPermission permission = ProfilingPermission::kUnknown;
  std::string reason;  // how it was decided ("running as root", "RmProfilingAdminOnly=1", ...)
  std::string fix;     // what to do when not permitted; empty otherwise
};

struct EnvironmentReport {
  DriverInfo driver;
  int runtime_version = 0;    // CUDA runtime kharness was built with (cudaRuntimeGetVersion)
  std::string nvrtc_version;  // "13.0"; empty when unknown
  int cupti_api_version = 0;  // cuptiGetVersion (CUPTI_API_VERSION, e.g. 130001); 0 when unknown
  bool nvml_available = false;
  ProfilingInfo profiling;
  std::vector<GpuInfo> gpus;
  std::vector<std::string> notes;  // things worth knowing that are not errors (NVML missing, ...)
  std::string kharness_version;
  std::string kharness_commit;
  std::string hostname;
  std::string os;  // "Linux 6.8.0-45-generic x86_64"
  double probe_seconds = 0.0;

  bool gpu_ready() const { return driver.available && !gpus.empty(); }
};

// Probes everything above. Never throws, never prints; quick without a driver (well under 50 ms).
// Loads the driver (cuInit) but creates no context and changes no GPU setting.
EnvironmentReport probe_environment();

// Reads `gpu`'s clocks now (NVML, as probe_environment() does), for a verdict that records the
// clocks at the start of its evaluation without probing everything again. Leaves them as they
// are where NVML is missing or does not know the GPU. Never throws.
void read_clocks(GpuInfo& gpu);

// True when the driver loads and at least one CUDA device is visible.
bool gpu_available();

// NVRTC target for a compute capability: the arch-specific "a" variant where one exists
// (9.0, 10.0, 10.3, 11.0, 12.0, 12.1), the plain target otherwise: 9.0 -> "sm_90a",
// 8.9 -> "sm_89", 10.0 -> "sm_100a", 12.0 -> "sm_120a".
std::string default_arch_for(int cc_major, int cc_minor);
// default_arch_for() of CUDA device `device`; empty when there is no such GPU (or no driver).
std::string default_arch_for_device(int device = 0);

// 13000 -> "13.0", 12080 -> "12.8"; 0 -> "".
std::string cuda_version_string(int version);
std::string_view profiling_permission_name(
    ProfilingPermission p);  // "permitted", "not_permitted", "unknown"

// Stable snake_case fields; unknown values are null.
nlohmann::json to_json(const GpuInfo& gpu);
nlohmann::json to_json(const EnvironmentReport& report);

}  // namespace kharness
