#include "device/nvml.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

namespace kharness::device {

namespace {
// Stable NVML ABI values (nvml.h).
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;
}  // namespace

const Nvml& Nvml::instance() {
  static const Nvml nvml;
  return nvml;
}

Nvml::Nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    spdlog::debug("NVML: {}", e != nullptr ? e : "dlopen failed");
    reason_ = "NVML not available (libnvidia-ml.so.1 not loadable)";
    return;
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  init_ = reinterpret_cast<Ret (*)()>(sym("nvmlInit_v2"));
  driver_version_ = reinterpret_cast<Ret (*)(char*, unsigned)>(sym("nvmlSystemGetDriverVersion"));
  by_uuid_ = reinterpret_cast<Ret (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByUUID"));
  by_pci_ = reinterpret_cast<Ret (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  clock_ = reinterpret_cast<Ret (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
  max_clock_ = reinterpret_cast<Ret (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetMaxClockInfo"));
  error_string_ = reinterpret_cast<const char* (*)(Ret)>(sym("nvmlErrorString"));
  if (init_ == nullptr || driver_version_ == nullptr || clock_ == nullptr ||
      max_clock_ == nullptr || (by_uuid_ == nullptr && by_pci_ == nullptr)) {
    reason_ = "NVML library lacks expected functions";
    return;
  }
  const Ret r = init_();
  if (r != kNvmlSuccess) {
    reason_ = std::string("nvmlInit failed: ") +
              (error_string_ != nullptr ? error_string_(r) : std::to_string(r));
    return;
  }
  // nvmlShutdown is never called: the library stays initialised for the process's life.
  available_ = true;
}

std::string Nvml::driver_version() const {
  if (!available_) return {};
  char buf[96] = {};
  if (driver_version_(buf, sizeof buf) != kNvmlSuccess) return {};
  return buf;
}

void* Nvml::device(const std::string& uuid, const std::string& pci_bus_id) const {
  void* dev = nullptr;
  if (by_uuid_ != nullptr && !uuid.empty() && by_uuid_(uuid.c_str(), &dev) == kNvmlSuccess) {
    return dev;
  }
  if (by_pci_ != nullptr && !pci_bus_id.empty() &&
      by_pci_(pci_bus_id.c_str(), &dev) == kNvmlSuccess) {
    return dev;
  }
  return nullptr;
}

std::optional<NvmlClocks> Nvml::clocks(const std::string& uuid,
                                       const std::string& pci_bus_id) const {
  if (!available_) return std::nullopt;
  void* dev = device(uuid, pci_bus_id);
  if (dev == nullptr) {
    spdlog::debug("NVML: no device for {} / {}", uuid, pci_bus_id);
    return std::nullopt;
  }
  auto read = [&](Ret (*fn)(void*, int, unsigned*), int type) -> std::optional<int> {
    unsigned mhz = 0;
    if (fn(dev, type, &mhz) != kNvmlSuccess) return std::nullopt;
    return static_cast<int>(mhz);
  };
  NvmlClocks c;
  c.sm_mhz = read(clock_, kNvmlClockSm);
  c.memory_mhz = read(clock_, kNvmlClockMem);
  c.max_sm_mhz = read(max_clock_, kNvmlClockSm);
  c.max_memory_mhz = read(max_clock_, kNvmlClockMem);
  return c;
}

}  // namespace kharness::device
