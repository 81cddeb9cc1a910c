// Pieces of probe_environment() that read text, exposed for tests.
#pragma once

#include <optional>
#include <string>

#include "kharness/device.hpp"

namespace kharness::device {

// /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  ..."
// -> "580.82.07"; empty when not found.
std::string parse_nvidia_version_file(const std::string& text);

// /proc/driver/nvidia/params: the value of "RmProfilingAdminOnly: N"; nullopt when absent.
std::optional<int> parse_profiling_admin_only(const std::string& params);

// The decision, from what was read: driver present?, running as root?, params file text
// (nullopt when it could not be read).
ProfilingInfo decide_profiling(bool driver_available, bool is_root,
                               const std::optional<std::string>& params);

}  // namespace kharness::device
