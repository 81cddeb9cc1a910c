// Hardware counters through CUPTI's Range Profiler and Profiler Host APIs (CUDA 12.6+, the
// non-deprecated profiling path of CUDA 13): one auto range per kernel launch, metrics evaluated
// on the host. No ncu subprocess.
//
// Replay: with a `before_pass` hook, user replay: the caller's launch runs once per pass, and the
// hook runs before each (outside the profiled span) to restore state and leave L2 clean. Kernel
// replay (CUPTI saves and restores device memory around each pass) is the fallback; its restore
// leaves dirty lines in L2 whose write-back the next pass counts (an H200 copy kernel read
// dram__bytes_write 6-380% above ncu's).
//
// The call sequence (each failure names the CUPTI call and its result):
//   cuptiProfilerInitialize
//   cuptiProfilerDeviceSupported             -> why not, when the device or setup cannot profile
//   cuptiDeviceGetChipName                   -> "GH100"
//   cuptiProfilerGetCounterAvailability x2   (size, then image)
//   cuptiProfilerHostInitialize              (range profiler, chip, availability image)
//   cuptiProfilerHostGetMetricProperties     per metric: supported or not (missing, not zero)
//   collect():
//     cuptiProfilerHostConfigAddMetrics, ...GetConfigImageSize, ...GetConfigImage,
//     ...GetNumOfPasses
//     cuptiRangeProfilerEnable(ctx)
//     cuptiRangeProfilerGetCounterDataSize, cuptiRangeProfilerCounterDataImageInitialize
//     cuptiRangeProfilerSetConfig(AutoRange, UserReplay or KernelReplay, maxRangesPerPass)
//     per pass: before_pass(); cuptiRangeProfilerStart; launch the plan; cuptiRangeProfilerStop
//     until isAllPassSubmitted (one round under kernel replay)
//     cuptiRangeProfilerDecodeData
//     cuptiRangeProfilerGetCounterDataInfo, then per range
//     cuptiRangeProfilerCounterDataGetRangeInfo and cuptiProfilerHostEvaluateToGpuValues
//     cuptiRangeProfilerDisable
//   cuptiProfilerHostDeinitialize, cuptiProfilerDeInitialize (destructor)
//
// CUPTI_ERROR_INSUFFICIENT_PRIVILEGES anywhere becomes environment_error (exit 3) with the fix.
// libcupti loads libnvperf_host.so at run time; the session preloads it from the toolkit's library
// folder (and libcupti's own), so no LD_LIBRARY_PATH is needed; kharness does not link it, and
// starts without a driver.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kharness::profile {

// A failed CUPTI call: what() is "cuptiRangeProfilerSetConfig: CUPTI_ERROR_INVALID_PARAMETER
// (...)".
class CuptiError : public std::runtime_error {
 public:
  CuptiError(std::string call, int code, const std::string& message);
  int code() const { return code_; }
  const std::string& call() const { return call_; }

 private:
  std::string call_;
  int code_;
};

// The fix printed when counters are not permitted.
extern const char* const kCounterPermissionFix;

struct RangeValues {
  std::string name;                      // CUPTI's range name ("0", "1", ... in auto range mode)
  std::map<std::string, double> values;  // metric -> value (only those evaluated)
};

struct Collection {
  std::vector<RangeValues> ranges;  // in launch order
  std::size_t passes = 0;           // passes per kernel (from the config image)
  std::size_t dropped_ranges = 0;
  std::vector<std::string> not_evaluated;  // metrics CUPTI configured but could not evaluate
  std::string replay;                      // "user" or "kernel"
};

class CounterSession {
 public:
  // `ctx` is current on this thread; `device` its ordinal. Throws environment_error (exit 3) when
  // the device cannot profile or counters are not permitted, CuptiError otherwise.
  CounterSession(CUcontext ctx, int device);
  ~CounterSession();
  CounterSession(const CounterSession&) = delete;  // owns CUPTI's process-wide profiler state
  CounterSession& operator=(const CounterSession&) = delete;

  const std::string& chip() const { return chip_; }
  // Whether the device has this metric (full name: base, rollup and submetric). Cached.
  bool supported(const std::string& metric);
  // Base metric names (any type) starting with `prefix`, sorted.
  std::vector<std::string> base_metrics_with_prefix(const std::string& prefix);

  // Configures `metrics` (all supported), runs `launch` between start and stop with one range
  // per kernel it launches (at most `max_ranges`), and evaluates every range. `launch` must
  // launch only the kernels to profile and wait for them. With `before_pass`, user replay:
  // before_pass() then launch() once per pass (before_pass must make the launch repeatable and
  // wait for its own work); if the driver refuses user replay, kernel replay without the hook.
  Collection collect(const std::vector<std::string>& metrics, std::size_t max_ranges,
                     const std::function<void()>& launch,
                     const std::function<void()>& before_pass = {});

 private:
  struct Host;
  CUcontext ctx_;
  int device_;
  std::string chip_;
  std::vector<std::uint8_t> availability_;
  std::unique_ptr<Host> host_;
  std::map<std::string, bool> supported_;
  Collection collect_once(const std::vector<std::string>& metrics, std::size_t max_ranges,
                          const std::function<void()>& launch,
                          const std::function<void()>& before_pass);
  bool initialized_ = false;
};

}  // namespace kharness::profile
