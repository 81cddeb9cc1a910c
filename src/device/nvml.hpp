// NVML, loaded with dlopen("libnvidia-ml.so.1") when present. Optional everywhere: a machine
// without it reports clocks as unknown. Read-only queries; kharness never changes clocks.
#pragma once

#include <optional>
#include <string>

namespace kharness::device {

struct NvmlClocks {
  std::optional<int> sm_mhz;
  std::optional<int> memory_mhz;
  std::optional<int> max_sm_mhz;
  std::optional<int> max_memory_mhz;
};

class Nvml {
 public:
  // Loads and initialises on first use (thread-safe); never throws.
  static const Nvml& instance();

  bool available() const { return available_; }
  const std::string& unavailable_reason() const { return reason_; }
  std::string driver_version() const;  // "580.82.07"; empty when unknown
  // The GPU is found by UUID ("GPU-..."), else by PCI bus id ("0000:19:00.0").
  std::optional<NvmlClocks> clocks(const std::string& uuid, const std::string& pci_bus_id) const;

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

 private:
  Nvml();
  void* device(const std::string& uuid, const std::string& pci_bus_id) const;

  bool available_ = false;
  std::string reason_;
  // NVML entry points (declared here without nvml.h, which the toolkit does not always ship).
  using Ret = int;
  Ret (*init_)() = nullptr;
  Ret (*driver_version_)(char*, unsigned) = nullptr;
  Ret (*by_uuid_)(const char*, void**) = nullptr;
  Ret (*by_pci_)(const char*, void**) = nullptr;
  Ret (*clock_)(void*, int, unsigned*) = nullptr;
  Ret (*max_clock_)(void*, int, unsigned*) = nullptr;
  const char* (*error_string_)(Ret) = nullptr;
};

}  // namespace kharness::device
