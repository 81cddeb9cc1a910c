#include "profile/range_profiler.hpp"

#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "device/driver.hpp"
#include "kharness/error.hpp"

namespace kharness::profile {

const char* const kCounterPermissionFix =
    "GPU performance counters are restricted to admin users on this machine: run kharness as "
    "root, or let every user profile by loading the NVIDIA kernel module with "
    "NVreg_RestrictProfilingToAdminUsers=0 (e.g. `options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/nvidia-profiling.conf, then "
    "reboot); see https://developer.nvidia.com/ERR_NVGPUCTRPERM";

CuptiError::CuptiError(std::string call, int code, const std::string& message)
    : std::runtime_error(call + ": " + message), call_(std::move(call)), code_(code) {}

namespace {

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  std::string s = cuptiGetResultString(r, &text) == CUPTI_SUCCESS && text != nullptr
                      ? std::string(text)
                      : std::string("unknown CUPTI result");
  return fmt::format("{} (CUptiResult {})", s, static_cast<int>(r));
}

// Throws for a failed call: environment_error for missing privileges (exit 3, with the fix),
// CuptiError naming the call otherwise.
void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ||
      r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) {
    throw environment_error(fmt::format("{}: {}: {}", call, result_text(r), kCounterPermissionFix));
  }
  if (r == CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED) {
    throw environment_error(fmt::format(
        "{}: {}: profiling is not enabled for this virtual GPU (ask the host to enable vGPU "
        "profiling)",
        call, result_text(r)));
  }
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ||
      r == CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED) {
    throw environment_error(fmt::format(
        "{}: {}: another profiler (ncu, nsys, a CUPTI tool) is attached to this process", call,
        result_text(r)));
  }
  throw CuptiError(call, static_cast<int>(r), result_text(r));
}

// Logs the call (the sequence shows with -v) and checks its result.
#define KHARNESS_CUPTI(call, params) \
  (spdlog::debug("profile: " #call), check(call(&(params)), #call))

// libcupti dlopens libnvperf_host.so by name. Load it (and libnvperf_target.so) from the folder
// that holds libcupti, then the toolkit's library folder, with RTLD_GLOBAL, so the by-name open
// finds the loaded copy without LD_LIBRARY_PATH. Failures are only logged: CUPTI says what is
// missing when it needs it.
void preload_nvperf() {
  static bool done = false;
  if (done) return;
  done = true;
  std::vector<std::filesystem::path> dirs;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiProfilerInitialize), &info) != 0 &&
      info.dli_fname != nullptr) {
    dirs.push_back(std::filesystem::path(info.dli_fname).parent_path());
  }
#ifdef KHARNESS_CUDA_LIBRARY_DIR
  dirs.emplace_back(KHARNESS_CUDA_LIBRARY_DIR);
  dirs.push_back(std::filesystem::path(KHARNESS_CUDA_LIBRARY_DIR).parent_path() / "extras" /
                 "CUPTI" / "lib64");
#endif
  for (const char* lib : {"libnvperf_host.so", "libnvperf_target.so"}) {
    void* handle = nullptr;
    for (const auto& dir : dirs) {
      std::error_code ec;
      if (!std::filesystem::exists(dir / lib, ec)) continue;
      handle = dlopen((dir / lib).c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (handle != nullptr) {
        spdlog::debug("profile: loaded {}", (dir / lib).string());
        break;
      }
      const char* e = dlerror();
      spdlog::debug("profile: dlopen {}: {}", (dir / lib).string(), e ? e : "?");
    }
    if (handle == nullptr) handle = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) spdlog::debug("profile: {} not preloaded; CUPTI will look for it", lib);
  }
}

std::string support_level(CUpti_Profiler_Support_Level l) {
  switch (l) {
    case CUPTI_PROFILER_CONFIGURATION_SUPPORTED:
      return "supported";
    case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED:
      return "unsupported";
    case CUPTI_PROFILER_CONFIGURATION_DISABLED:
      return "disabled";
    default:
      return "unknown";
  }
}

// A profiler host object (metric database of one chip), deinitialised by the destructor.
class HostObject {
 public:
  HostObject(const std::string& chip, const std::vector<std::uint8_t>& availability) {
    CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    p.pChipName = chip.c_str();
    p.pCounterAvailabilityImage = availability.empty() ? nullptr : availability.data();
    KHARNESS_CUPTI(cuptiProfilerHostInitialize, p);
    object_ = p.pHostObject;
  }
  ~HostObject() {
    if (object_ == nullptr) return;
    CUpti_Profiler_Host_Deinitialize_Params p{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    const CUptiResult r = cuptiProfilerHostDeinitialize(&p);
    if (r != CUPTI_SUCCESS) spdlog::debug("cuptiProfilerHostDeinitialize: {}", result_text(r));
  }
  HostObject(const HostObject&) = delete;  // owns CUPTI's host object
  HostObject& operator=(const HostObject&) = delete;
  CUpti_Profiler_Host_Object* get() const { return object_; }

 private:
  CUpti_Profiler_Host_Object* object_ = nullptr;
};

// The range profiler enabled on a context; disabled by the destructor.
class RangeProfilerObject {
 public:
  explicit RangeProfilerObject(CUcontext ctx) {
    CUpti_RangeProfiler_Enable_Params p{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    p.ctx = ctx;
    KHARNESS_CUPTI(cuptiRangeProfilerEnable, p);
    object_ = p.pRangeProfilerObject;
  }
  ~RangeProfilerObject() {
    if (object_ == nullptr) return;
    CUpti_RangeProfiler_Disable_Params p{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    const CUptiResult r = cuptiRangeProfilerDisable(&p);
    if (r != CUPTI_SUCCESS) spdlog::debug("cuptiRangeProfilerDisable: {}", result_text(r));
  }
  RangeProfilerObject(const RangeProfilerObject&) = delete;  // owns CUPTI's profiler object
  RangeProfilerObject& operator=(const RangeProfilerObject&) = delete;
  CUpti_RangeProfiler_Object* get() const { return object_; }

 private:
  CUpti_RangeProfiler_Object* object_ = nullptr;
};

std::vector<const char*> c_names(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(n.c_str());
  return out;
}

// The config image for `metrics` in `host`. Metrics CUPTI refuses to schedule are moved to
// `refused` (the image is then built from the others, added one at a time).
std::vector<std::uint8_t> config_image(const std::string& chip,
                                       const std::vector<std::uint8_t>& availability,
                                       std::vector<std::string>& metrics,
                                       std::vector<std::string>& refused,
                                       std::unique_ptr<HostObject>& host, std::size_t& passes) {
  host = std::make_unique<HostObject>(chip, availability);
  auto names = c_names(metrics);
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = host->get();
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add);
  if (r != CUPTI_SUCCESS) {
    spdlog::debug("cuptiProfilerHostConfigAddMetrics ({} metrics): {}; adding one at a time",
                  names.size(), result_text(r));
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) check(r, "cuptiProfilerHostConfigAddMetrics");
    host = std::make_unique<HostObject>(chip, availability);
    std::vector<std::string> kept;
    for (const std::string& m : metrics) {
      const char* one[] = {m.c_str()};
      CUpti_Profiler_Host_ConfigAddMetrics_Params p{
          CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
      p.pHostObject = host->get();
      p.ppMetricNames = one;
      p.numMetrics = 1;
      const CUptiResult rr = cuptiProfilerHostConfigAddMetrics(&p);
      if (rr == CUPTI_SUCCESS) {
        kept.push_back(m);
      } else {
        spdlog::debug("cuptiProfilerHostConfigAddMetrics({}): {}", m, result_text(rr));
        refused.push_back(m);
      }
    }
    metrics = kept;
    if (metrics.empty()) check(r, "cuptiProfilerHostConfigAddMetrics");
  }
  CUpti_Profiler_Host_GetConfigImageSize_Params size{
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = host->get();
  KHARNESS_CUPTI(cuptiProfilerHostGetConfigImageSize, size);
  std::vector<std::uint8_t> image(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params get{
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  get.pHostObject = host->get();
  get.configImageSize = image.size();
  get.pConfigImage = image.data();
  KHARNESS_CUPTI(cuptiProfilerHostGetConfigImage, get);
  CUpti_Profiler_Host_GetNumOfPasses_Params np{
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  np.configImageSize = image.size();
  np.pConfigImage = image.data();
  KHARNESS_CUPTI(cuptiProfilerHostGetNumOfPasses, np);
  passes = np.numOfPasses;
  return image;
}

}  // namespace

struct CounterSession::Host {
  std::unique_ptr<HostObject> object;
  // Where a name GetMetricProperties refused is tried with ConfigAddMetrics (the call the
  // configuration will make), so a difference between the two calls cannot drop a metric.
  std::unique_ptr<HostObject> scratch;
};

CounterSession::CounterSession(CUcontext ctx, int device) : ctx_(ctx), device_(device) {
  preload_nvperf();
  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  KHARNESS_CUPTI(cuptiProfilerInitialize, init);
  initialized_ = true;

  CUpti_Profiler_DeviceSupported_Params sup{CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  sup.cuDevice = device;
  sup.api = CUPTI_PROFILER_RANGE_PROFILING;
  const CUptiResult sr = cuptiProfilerDeviceSupported(&sup);
  if (sr != CUPTI_SUCCESS) {
    spdlog::debug("cuptiProfilerDeviceSupported: {}", result_text(sr));
  } else if (sup.isSupported == CUPTI_PROFILER_CONFIGURATION_UNKNOWN) {
    spdlog::warn(
        "profile: cuptiProfilerDeviceSupported could not tell whether device {} can be "
        "profiled; trying",
        device);
  } else if (sup.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    throw environment_error(fmt::format(
        "cuptiProfilerDeviceSupported: device {} cannot be profiled (architecture {}, SLI {}, "
        "vGPU {}, confidential compute {}, CMP {}, WSL {})",
        device, support_level(sup.architecture), support_level(sup.sli), support_level(sup.vGpu),
        support_level(sup.confidentialCompute), support_level(sup.cmp), support_level(sup.wsl)));
  }

  CUpti_Device_GetChipName_Params chip{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = static_cast<std::size_t>(device);
  KHARNESS_CUPTI(cuptiDeviceGetChipName, chip);
  chip_ = chip.pChipName != nullptr ? chip.pChipName : "";

  CUpti_Profiler_GetCounterAvailability_Params avail{
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  avail.ctx = ctx_;
  avail.pCounterAvailabilityImage = nullptr;
  KHARNESS_CUPTI(cuptiProfilerGetCounterAvailability, avail);
  availability_.assign(avail.counterAvailabilityImageSize, 0);
  avail.pCounterAvailabilityImage = availability_.data();
  KHARNESS_CUPTI(cuptiProfilerGetCounterAvailability, avail);

  host_ = std::make_unique<Host>();
  host_->object = std::make_unique<HostObject>(chip_, availability_);
  spdlog::debug("profile: CUPTI profiler ready for chip {} ({} B availability image)", chip_,
                availability_.size());
}

CounterSession::~CounterSession() {
  host_.reset();
  if (initialized_) {
    CUpti_Profiler_DeInitialize_Params p{CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
    const CUptiResult r = cuptiProfilerDeInitialize(&p);
    if (r != CUPTI_SUCCESS) spdlog::debug("cuptiProfilerDeInitialize: {}", result_text(r));
  }
}

bool CounterSession::supported(const std::string& name) {
  auto it = supported_.find(name);
  if (it != supported_.end()) return it->second;
  CUpti_Profiler_Host_GetMetricProperties_Params p{
      CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
  p.pHostObject = host_->object->get();
  p.pMetricName = name.c_str();
  const CUptiResult r = cuptiProfilerHostGetMetricProperties(&p);
  bool ok = r == CUPTI_SUCCESS;
  if (!ok) {
    // Not known by that call: ask the configuration call itself, on a scratch host object.
    if (!host_->scratch) host_->scratch = std::make_unique<HostObject>(chip_, availability_);
    const char* one[] = {name.c_str()};
    CUpti_Profiler_Host_ConfigAddMetrics_Params add{
        CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = host_->scratch->get();
    add.ppMetricNames = one;
    add.numMetrics = 1;
    const CUptiResult ar = cuptiProfilerHostConfigAddMetrics(&add);
    ok = ar == CUPTI_SUCCESS;
    spdlog::debug(
        "profile: {}: cuptiProfilerHostGetMetricProperties {}, "
        "cuptiProfilerHostConfigAddMetrics {}",
        name, result_text(r), result_text(ar));
  }
  spdlog::debug("profile: metric {} {}", name, ok ? "supported" : "not supported");
  supported_[name] = ok;
  return ok;
}

std::vector<std::string> CounterSession::base_metrics_with_prefix(const std::string& prefix) {
  std::vector<std::string> out;
  for (CUpti_MetricType type :
       {CUPTI_METRIC_TYPE_COUNTER, CUPTI_METRIC_TYPE_RATIO, CUPTI_METRIC_TYPE_THROUGHPUT}) {
    CUpti_Profiler_Host_GetBaseMetrics_Params p{
        CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
    p.pHostObject = host_->object->get();
    p.metricType = type;
    KHARNESS_CUPTI(cuptiProfilerHostGetBaseMetrics, p);
    for (std::size_t i = 0; i < p.numMetrics; ++i) {
      if (p.ppMetricNames[i] == nullptr) continue;
      std::string name = p.ppMetricNames[i];
      if (name.rfind(prefix, 0) == 0) out.push_back(std::move(name));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Collection CounterSession::collect(const std::vector<std::string>& requested,
                                   std::size_t max_ranges, const std::function<void()>& launch,
                                   const std::function<void()>& before_pass) {
  if (!before_pass) return collect_once(requested, max_ranges, launch, {});
  try {
    return collect_once(requested, max_ranges, launch, before_pass);
  } catch (const CuptiError& e) {
    // Only the configuration call is worth a second try: a failure while passes ran is the
    // kernel's or the device's, and would fail the same way.
    if (e.call() != "cuptiRangeProfilerSetConfig") throw;
    spdlog::warn(
        "profile: user replay refused ({}); kernel replay instead, whose memory restore "
        "inflates dram__bytes_write",
        e.what());
    return collect_once(requested, max_ranges, launch, {});
  }
}

Collection CounterSession::collect_once(const std::vector<std::string>& requested,
                                        std::size_t max_ranges, const std::function<void()>& launch,
                                        const std::function<void()>& before_pass) {
  Collection result;
  result.replay = before_pass ? "user" : "kernel";
  if (max_ranges == 0) max_ranges = 1;
  std::vector<std::string> metrics = requested;
  std::vector<std::string> refused;
  std::unique_ptr<HostObject> config_host;
  std::vector<std::uint8_t> config =
      config_image(chip_, availability_, metrics, refused, config_host, result.passes);
  result.not_evaluated = refused;
  spdlog::debug("profile: {} metric(s) in {} pass(es); {} refused", metrics.size(), result.passes,
                refused.size());

  // Declared before the profiler object: CUPTI holds on to it until the profiler is disabled.
  std::vector<std::uint8_t> counter_data;
  RangeProfilerObject profiler(ctx_);
  auto names = c_names(metrics);

  CUpti_RangeProfiler_GetCounterDataSize_Params size{
      CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
  size.pRangeProfilerObject = profiler.get();
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = max_ranges;
  size.maxNumRangeTreeNodes = static_cast<std::uint32_t>(max_ranges);
  KHARNESS_CUPTI(cuptiRangeProfilerGetCounterDataSize, size);
  counter_data.assign(size.counterDataSize, 0);

  CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  init.pRangeProfilerObject = profiler.get();
  init.counterDataSize = counter_data.size();
  init.pCounterData = counter_data.data();
  KHARNESS_CUPTI(cuptiRangeProfilerCounterDataImageInitialize, init);

  CUpti_RangeProfiler_SetConfig_Params set{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
  set.pRangeProfilerObject = profiler.get();
  set.configSize = config.size();
  set.pConfig = config.data();
  set.counterDataImageSize = counter_data.size();
  set.pCounterDataImage = counter_data.data();
  set.range = CUPTI_AutoRange;
  set.replayMode = before_pass ? CUPTI_UserReplay : CUPTI_KernelReplay;
  set.maxRangesPerPass = max_ranges;
  set.numNestingLevels = 1;
  set.minNestingLevel = 1;
  set.passIndex = 0;
  set.targetNestingLevel = 1;
  KHARNESS_CUPTI(cuptiRangeProfilerSetConfig, set);

  // User replay: one round of the plan per pass. Kernel replay runs every pass inside each launch,
  // so one round submits them all; the loop then only guards against a CUPTI that asks again.
  bool all_submitted = false;
  for (std::size_t round = 0; !all_submitted; ++round) {
    if (round > result.passes + 1) {
      throw CuptiError("cuptiRangeProfilerStop", 0,
                       fmt::format("not every pass was submitted after {} rounds of the plan "
                                   "({} passes configured, {} replay)",
                                   round, result.passes, result.replay));
    }
    if (before_pass) before_pass();
    CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    start.pRangeProfilerObject = profiler.get();
    KHARNESS_CUPTI(cuptiRangeProfilerStart, start);
    try {
      launch();
    } catch (...) {
      CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
      stop.pRangeProfilerObject = profiler.get();
      cuptiRangeProfilerStop(&stop);
      throw;
    }
    CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = profiler.get();
    KHARNESS_CUPTI(cuptiRangeProfilerStop, stop);
    all_submitted = stop.isAllPassSubmitted != 0;
    if (!all_submitted)
      spdlog::debug("profile: pass {} submitted, more to come (round {})", stop.passIndex, round);
  }

  CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
  decode.pRangeProfilerObject = profiler.get();
  KHARNESS_CUPTI(cuptiRangeProfilerDecodeData, decode);
  result.dropped_ranges = decode.numOfRangeDropped;

  CUpti_RangeProfiler_GetCounterDataInfo_Params info{
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = counter_data.data();
  info.counterDataImageSize = counter_data.size();
  KHARNESS_CUPTI(cuptiRangeProfilerGetCounterDataInfo, info);

  for (std::size_t i = 0; i < info.numTotalRanges; ++i) {
    RangeValues range;
    CUpti_RangeProfiler_CounterData_GetRangeInfo_Params ri{
        CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
    ri.pCounterDataImage = counter_data.data();
    ri.counterDataImageSize = counter_data.size();
    ri.rangeIndex = i;
    ri.rangeDelimiter = "/";
    const CUptiResult rr = cuptiRangeProfilerCounterDataGetRangeInfo(&ri);
    if (rr == CUPTI_SUCCESS && ri.rangeName != nullptr) {
      range.name = ri.rangeName;
    } else {
      spdlog::debug("cuptiRangeProfilerCounterDataGetRangeInfo({}): {}", i, result_text(rr));
      range.name = std::to_string(i);
    }
    std::vector<double> values(names.size(), 0.0);
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev{
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    ev.pHostObject = config_host->get();
    ev.pCounterDataImage = counter_data.data();
    ev.counterDataImageSize = counter_data.size();
    ev.rangeIndex = i;
    ev.ppMetricNames = names.data();
    ev.numMetrics = names.size();
    ev.pMetricValues = values.data();
    const CUptiResult er = cuptiProfilerHostEvaluateToGpuValues(&ev);
    if (er == CUPTI_SUCCESS) {
      for (std::size_t m = 0; m < names.size(); ++m) range.values[metrics[m]] = values[m];
    } else {
      // One metric that cannot be evaluated must not cost the others: evaluate one at a time.
      spdlog::debug("cuptiProfilerHostEvaluateToGpuValues(range {}, {} metrics): {}; one at a time",
                    i, names.size(), result_text(er));
      if (i == 0 && names.size() == 1) check(er, "cuptiProfilerHostEvaluateToGpuValues");
      for (std::size_t m = 0; m < names.size(); ++m) {
        double v = 0.0;
        const char* one[] = {names[m]};
        ev.ppMetricNames = one;
        ev.numMetrics = 1;
        ev.pMetricValues = &v;
        const CUptiResult e1 = cuptiProfilerHostEvaluateToGpuValues(&ev);
        if (e1 == CUPTI_SUCCESS) {
          range.values[metrics[m]] = v;
        } else if (i == 0) {
          spdlog::debug("cuptiProfilerHostEvaluateToGpuValues({}): {}", metrics[m],
                        result_text(e1));
          result.not_evaluated.push_back(metrics[m]);
        }
      }
      if (range.values.empty()) check(er, "cuptiProfilerHostEvaluateToGpuValues");
    }
    result.ranges.push_back(std::move(range));
  }
  return result;
}

}  // namespace kharness::profile
