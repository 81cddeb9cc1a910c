// `kharness doctor --measure`: what this GPU really reaches, for speed-of-light estimates that
// rest on measured ceilings rather than datasheet peaks (`--sol measured`). Two measurements,
// each the median of timed iterations (CUPTI activity records, like the timing stage):
//   copy   a device-to-device cuMemcpy of 1 GiB: bytes read + written per second, the ceiling a
//          memory-bound kernel can approach (the H200's datasheet says 4.8 TB/s; copies reach ~4.0)
//   gemm   cuBLASLt float16 and bfloat16 GEMMs of 8192^3 (float32 accumulation): dense FLOP/s the
//          vendor library reaches, the practical tensor-core ceiling
// Results are stored per GPU model and driver under the compile cache folder, so that later runs
// (in other processes) can use them.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/speed_of_light.hpp"

namespace kharness::bench {

struct MeasuredPeaks {
  std::string gpu;                           // device name
  std::string driver;                        // NVIDIA driver version
  double copy_bandwidth = 0.0;               // bytes/s (read + write)
  std::map<std::string, double> gemm_flops;  // dtype -> FLOP/s (cuBLASLt)
  std::map<std::string, std::string> notes;  // measurement -> why it is missing, if it is
  std::string measured_at;                   // ISO 8601 UTC
};

nlohmann::json to_json(const MeasuredPeaks& m);
MeasuredPeaks measured_peaks_from_json(const nlohmann::json& j);

// Runs the measurements on device 0 (a context must not be needed by the caller meanwhile).
// Throws kharness::Error (exit 3) without a GPU. A measurement that cannot run (no cuBLASLt)
// leaves its value 0 with a note.
MeasuredPeaks measure_peaks();

// Where the measurements of `gpu` under `driver` are kept.
std::filesystem::path measured_peaks_file(const std::string& gpu, const std::string& driver);
void save_measured_peaks(const MeasuredPeaks& m);
std::optional<MeasuredPeaks> load_measured_peaks(const std::string& gpu, const std::string& driver);

// `spec` with the measured ceilings in place of the datasheet ones: the copy bandwidth as its
// measured_copy_bandwidth, and each measured GEMM rate as that dtype's peak.
GpuSpec with_measured(GpuSpec spec, const MeasuredPeaks& m);

}  // namespace kharness::bench
