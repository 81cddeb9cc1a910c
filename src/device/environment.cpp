#include <cuda_runtime_api.h>
#include <cupti.h>
#include <nvrtc.h>
#include <spdlog/spdlog.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "device/driver.hpp"
#include "device/environment_internal.hpp"
#include "device/nvml.hpp"
#include "kharness/device.hpp"
#include "kharness/version.hpp"

namespace kharness {

namespace device {

std::string parse_nvidia_version_file(const std::string& text) {
  // The first line names the kernel module: "... Kernel Module  580.82.07  Thu Aug ..." (also
  // "Open Kernel Module for x86_64  580.82.07 ..."). Take the first dotted version after "Module".
  const auto module = text.find("Module");
  if (module == std::string::npos) return {};
  const auto eol = text.find('\n', module);
  const std::string line = text.substr(module, eol == std::string::npos ? eol : eol - module);
  static const std::regex version(R"((^|\s)(\d+\.\d+(\.\d+)?)(\s|$))");
  std::smatch m;
  if (std::regex_search(line, m, version)) return m[2].str();
  return {};
}

std::optional<int> parse_profiling_admin_only(const std::string& params) {
  static const std::regex line(R"((^|\n)\s*RmProfilingAdminOnly\s*:\s*(\d+))");
  std::smatch m;
  if (std::regex_search(params, m, line)) return std::stoi(m[2].str());
  return std::nullopt;
}

ProfilingInfo decide_profiling(bool driver_available, bool is_root,
                               const std::optional<std::string>& params) {
  ProfilingInfo p;
  if (!driver_available) {
    p.permission = ProfilingPermission::kUnknown;
    p.reason = "no NVIDIA driver";
    return p;
  }
  if (is_root) {
    p.permission = ProfilingPermission::kPermitted;
    p.reason = "running as root";
    return p;
  }
  const std::optional<int> admin_only =
      params ? parse_profiling_admin_only(*params) : std::optional<int>();
  if (!admin_only) {
    p.permission = ProfilingPermission::kUnknown;
    p.reason = "/proc/driver/nvidia/params does not say RmProfilingAdminOnly";
    return p;
  }
  if (*admin_only == 0) {
    p.permission = ProfilingPermission::kPermitted;
    p.reason = "RmProfilingAdminOnly=0: counters open to all users";
    return p;
  }
  p.permission = ProfilingPermission::kNotPermitted;
  p.reason = "RmProfilingAdminOnly=1: GPU performance counters are restricted to admin users";
  p.fix =
      "run as root, or set NVreg_RestrictProfilingToAdminUsers=0 (see "
      "https://developer.nvidia.com/ERR_NVGPUCTRPERM)";
  return p;
}

}  // namespace device

namespace {

std::optional<std::string> read_file(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int attribute(const device::Driver& cu, CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  const CUresult r = cu.cuDeviceGetAttribute(&v, a, dev);
  if (r != CUDA_SUCCESS) {
    spdlog::debug("cuDeviceGetAttribute({}) on device {}: {}", static_cast<int>(a), dev,
                  cu.error_name(r));
    return 0;
  }
  return v;
}

// Fills what the driver knows; NVML fields are added by the caller.
std::optional<GpuInfo> query_gpu(const device::Driver& cu, int index, std::string* note) {
  CUdevice dev = 0;
  CUresult r = cu.cuDeviceGet(&dev, index);
  if (r != CUDA_SUCCESS) {
    *note = "device " + std::to_string(index) + ": cuDeviceGet failed: " + cu.error_name(r);
    return std::nullopt;
  }
  GpuInfo g;
  g.index = index;
  char name[256] = {};
  if (cu.cuDeviceGetName(name, sizeof name - 1, dev) == CUDA_SUCCESS) g.name = name;
  g.cc_major = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  g.cc_minor = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  g.arch = default_arch_for(g.cc_major, g.cc_minor);
  g.sm_count = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  size_t total = 0;
  if (cu.cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) g.total_memory_bytes = total;
  g.l2_cache_bytes = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  g.max_persisting_l2_bytes = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
  g.shared_memory_per_block_optin_bytes =
      attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  g.shared_memory_per_sm_bytes =
      attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  g.max_threads_per_sm = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  g.registers_per_sm = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  g.memory_bus_width_bits = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  g.cluster_launch = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) != 0;
  g.ecc_enabled = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_ECC_ENABLED) != 0;
  char bus[64] = {};
  if (cu.cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev) == CUDA_SUCCESS) g.pci_bus_id = bus;
  CUuuid uuid{};
  if (cu.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) g.uuid = device::format_uuid(uuid);
  return g;
}

template <typename T>
nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json or_null(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

nlohmann::json or_null(int v) { return v == 0 ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

std::string cuda_version_string(int version) {
  if (version <= 0) return {};
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string_view profiling_permission_name(ProfilingPermission p) {
  switch (p) {
    case ProfilingPermission::kPermitted:
      return "permitted";
    case ProfilingPermission::kNotPermitted:
      return "not_permitted";
    case ProfilingPermission::kUnknown:
      break;
  }
  return "unknown";
}

std::string default_arch_for(int cc_major, int cc_minor) {
  if (cc_major <= 0 || cc_minor < 0) return {};
  const int cc = cc_major * 10 + cc_minor;
  // Arch-specific ("a") targets: features such as wgmma, tcgen05 and setmaxnreg need them.
  const bool has_a = cc == 90 || cc == 100 || cc == 103 || cc == 110 || cc == 120 || cc == 121;
  return "sm_" + std::to_string(cc) + (has_a ? "a" : "");
}

void read_clocks(GpuInfo& gpu) {
  if (!device::Driver::instance().available()) return;  // as probe_environment: no NVML then
  const device::Nvml& nvml = device::Nvml::instance();
  if (!nvml.available()) return;
  if (auto c = nvml.clocks(gpu.uuid, gpu.pci_bus_id)) {
    gpu.sm_clock_mhz = c->sm_mhz;
    gpu.memory_clock_mhz = c->memory_mhz;
    gpu.max_sm_clock_mhz = c->max_sm_mhz;
    gpu.max_memory_clock_mhz = c->max_memory_mhz;
  }
}

bool gpu_available() {
  const auto& cu = device::Driver::instance();
  return cu.available() && cu.device_count() > 0;
}

std::string default_arch_for_device(int device) {
  const auto& cu = device::Driver::instance();
  if (!cu.available() || device < 0 || device >= cu.device_count()) return {};
  CUdevice dev = 0;
  if (cu.cuDeviceGet(&dev, device) != CUDA_SUCCESS) return {};
  return default_arch_for(attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                          attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
}

EnvironmentReport probe_environment() {
  const auto start = std::chrono::steady_clock::now();
  EnvironmentReport report;
  report.kharness_version = kVersion;
  report.kharness_commit = kGitCommit;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) report.hostname = host;
  struct utsname u {};
  if (uname(&u) == 0) {
    report.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  }

  // Toolkit libraries: none of these needs a driver.
  cudaRuntimeGetVersion(&report.runtime_version);
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) {
    report.nvrtc_version = std::to_string(major) + "." + std::to_string(minor);
  }
  uint32_t cupti = 0;
  if (cuptiGetVersion(&cupti) == CUPTI_SUCCESS) report.cupti_api_version = static_cast<int>(cupti);

  // Driver.
  const auto& cu = device::Driver::instance();
  report.driver.available = cu.available();
  report.driver.cuda_version = cu.cuda_version();
  if (!cu.available())
    report.driver.reason = cu.unavailable_reason();
  else if (cu.device_count() == 0)
    report.notes.push_back(cu.unavailable_reason());

  // NVML (optional): the driver version string and clocks.
  const device::Nvml* nvml = nullptr;
  if (cu.available()) {
    nvml = &device::Nvml::instance();
    report.nvml_available = nvml->available();
    if (!nvml->available()) {
      report.notes.push_back(nvml->unavailable_reason() + ": GPU clocks unknown");
    } else {
      report.driver.nvidia_version = nvml->driver_version();
    }
  }
  if (report.driver.nvidia_version.empty()) {
    if (auto text = read_file("/proc/driver/nvidia/version")) {
      report.driver.nvidia_version = device::parse_nvidia_version_file(*text);
    }
  }

  // GPUs.
  if (cu.available()) {
    for (int i = 0; i < cu.device_count(); ++i) {
      std::string note;
      auto gpu = query_gpu(cu, i, &note);
      if (!gpu) {
        report.notes.push_back(note);
        continue;
      }
      if (nvml != nullptr && nvml->available()) {
        if (auto c = nvml->clocks(gpu->uuid, gpu->pci_bus_id)) {
          gpu->sm_clock_mhz = c->sm_mhz;
          gpu->memory_clock_mhz = c->memory_mhz;
          gpu->max_sm_clock_mhz = c->max_sm_mhz;
          gpu->max_memory_clock_mhz = c->max_memory_mhz;
        } else {
          report.notes.push_back("NVML does not know device " + std::to_string(i) +
                                 ": its clocks are unknown");
        }
      }
      report.gpus.push_back(std::move(*gpu));
    }
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
      report.notes.push_back(std::string("CUDA_VISIBLE_DEVICES=") + visible);
    }
  }

  // Profiling counters.
  report.profiling = device::decide_profiling(cu.available(), geteuid() == 0,
                                              read_file("/proc/driver/nvidia/params"));

  report.probe_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::debug("environment probed in {:.1f} ms", report.probe_seconds * 1e3);
  return report;
}

nlohmann::json to_json(const GpuInfo& g) {
  return nlohmann::json{
      {"index", g.index},
      {"name", g.name},
      {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
      {"arch", g.arch},
      {"sm_count", g.sm_count},
      {"total_memory_bytes", g.total_memory_bytes},
      {"l2_cache_bytes", g.l2_cache_bytes},
      {"max_persisting_l2_bytes", g.max_persisting_l2_bytes},
      {"shared_memory_per_block_optin_bytes", g.shared_memory_per_block_optin_bytes},
      {"shared_memory_per_sm_bytes", g.shared_memory_per_sm_bytes},
      {"max_threads_per_sm", g.max_threads_per_sm},
      {"registers_per_sm", g.registers_per_sm},
      {"memory_bus_width_bits", g.memory_bus_width_bits},
      {"cluster_launch", g.cluster_launch},
      {"ecc_enabled", g.ecc_enabled},
      {"sm_clock_mhz", or_null(g.sm_clock_mhz)},
      {"memory_clock_mhz", or_null(g.memory_clock_mhz)},
      {"max_sm_clock_mhz", or_null(g.max_sm_clock_mhz)},
      {"max_memory_clock_mhz", or_null(g.max_memory_clock_mhz)},
      {"pci_bus_id", or_null(g.pci_bus_id)},
      {"uuid", or_null(g.uuid)},
  };
}

nlohmann::json to_json(const EnvironmentReport& r) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : r.gpus) gpus.push_back(to_json(g));
  return nlohmann::json{
      {"kharness_version", r.kharness_version},
      {"kharness_commit", r.kharness_commit},
      {"hostname", or_null(r.hostname)},
      {"os", or_null(r.os)},
      {"driver",
       {{"available", r.driver.available},
        {"reason", or_null(r.driver.reason)},
        {"cuda_version", or_null(cuda_version_string(r.driver.cuda_version))},
        {"cuda_version_number", or_null(r.driver.cuda_version)},
        {"nvidia_version", or_null(r.driver.nvidia_version)}}},
      {"runtime_version", or_null(cuda_version_string(r.runtime_version))},
      {"runtime_version_number", or_null(r.runtime_version)},
      {"nvrtc_version", or_null(r.nvrtc_version)},
      {"cupti_api_version", or_null(r.cupti_api_version)},
      {"nvml_available", r.nvml_available},
      {"profiling",
       {{"permission", std::string(profiling_permission_name(r.profiling.permission))},
        {"reason", or_null(r.profiling.reason)},
        {"fix", or_null(r.profiling.fix)}}},
      {"gpus", gpus},
      {"notes", r.notes},
      {"probe_seconds", r.probe_seconds},
  };
}

}  // namespace kharness
