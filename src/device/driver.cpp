#include "device/driver.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <utility>

#include "device/watchdog.hpp"
#include "kharness/error.hpp"

namespace kharness::device {

namespace {

constexpr const char* kNoDriver =
    "no NVIDIA driver found (libcuda.so.1 not loadable): GPU commands need a machine with an "
    "NVIDIA GPU and driver";

std::string version_text(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The CUDA version the installed libcuda supports, asked of libcuda directly (cuDriverGetVersion
// needs no cuInit). 0 when libcuda cannot be loaded. Used only to explain a failed load.
int libcuda_version(std::string* dl_error) {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    if (dl_error != nullptr) *dl_error = e != nullptr ? e : "dlopen failed";
    return 0;
  }
  int v = 0;
  using Fn = CUresult (*)(int*);
  if (auto fn = reinterpret_cast<Fn>(dlsym(lib, "cuDriverGetVersion"))) {
    if (fn(&v) != CUDA_SUCCESS) v = 0;
  }
  // Keep the library loaded: the runtime may hold it too, and unloading a driver is never useful.
  return v;
}

std::string explain_runtime_failure(cudaError_t err) {
  std::string dl_error;
  const int libcuda = libcuda_version(&dl_error);
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  switch (err) {
    case cudaErrorInsufficientDriver:
      if (libcuda == 0) {
        spdlog::debug("libcuda.so.1: {}", dl_error);
        return kNoDriver;
      }
      return "NVIDIA driver too old: it supports CUDA " + version_text(libcuda) +
             ", kharness was built with CUDA " + version_text(runtime) +
             "; update the NVIDIA driver";
    case cudaErrorNoDevice:
      return "NVIDIA driver found but no CUDA device is visible (check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES)";
    case cudaErrorDevicesUnavailable:
      return "the CUDA devices are busy or unavailable (exclusive-process mode held by another "
             "process?)";
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
      return std::string("CUDA driver and kernel module do not match (") + cudaGetErrorName(err) +
             "): reboot or reinstall the NVIDIA driver";
    default:
      return std::string("the CUDA driver could not be initialised: ") + cudaGetErrorName(err) +
             " (" + cudaGetErrorString(err) + ")";
  }
}

enum class Lookup { kFound, kMissing, kNoDriver };

// One entry point at one ABI version. kNoDriver: the runtime could not reach a driver at all.
Lookup lookup(const char* name, int version, void** fn, cudaError_t* err) {
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  *err = cudaGetDriverEntryPointByVersion(name, fn, static_cast<unsigned>(version),
                                          cudaEnableLegacyStream, &q);
  if (*err == cudaSuccess && q == cudaDriverEntryPointSuccess && *fn != nullptr) {
    return Lookup::kFound;
  }
  cudaGetLastError();  // clear the runtime's last error
  *fn = nullptr;
  switch (*err) {
    case cudaSuccess:
    case cudaErrorSymbolNotFound:
    case cudaErrorInvalidValue:
      spdlog::debug("driver entry point {} (v{}) not found: {} status {}", name, version,
                    cudaGetErrorName(*err), static_cast<int>(q));
      return Lookup::kMissing;
    default:
      return Lookup::kNoDriver;
  }
}

// The entry points where the host can wait on the GPU: the launch watchdog (device/watchdog.hpp)
// watches every call to them. Launches are here because they block when the launch queue is full;
// frees and unloads because they may wait for the device to go idle.
#define KHARNESS_CU_WAITS(X)   \
  X(cuCtxSynchronize)          \
  X(cuStreamSynchronize)       \
  X(cuEventSynchronize)        \
  X(cuMemcpyHtoD)              \
  X(cuMemcpyDtoH)              \
  X(cuMemcpyDtoD)              \
  X(cuMemcpyHtoDAsync)         \
  X(cuMemcpyDtoHAsync)         \
  X(cuMemsetD8)                \
  X(cuMemsetD32)               \
  X(cuLaunchKernel)            \
  X(cuLaunchKernelEx)          \
  X(cuMemFree)                 \
  X(cuMemFreeHost)             \
  X(cuModuleUnload)            \
  X(cuCtxDestroy)              \
  X(cuDevicePrimaryCtxRelease) \
  X(cuDevicePrimaryCtxReset)

#define KHARNESS_CU_WAIT_NAME(name) constexpr char k_wait_##name[] = #name;
KHARNESS_CU_WAITS(KHARNESS_CU_WAIT_NAME)
#undef KHARNESS_CU_WAIT_NAME

}  // namespace

CudaError::CudaError(std::string call, CUresult code, std::string name, std::string description)
    : std::runtime_error(call + ": " + name +
                         (description.empty() ? "" : " (" + description + ")")),
      call_(std::move(call)),
      code_(code),
      name_(std::move(name)),
      description_(std::move(description)) {}

bool is_sticky_error(CUresult code) {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return true;
    default:
      return false;
  }
}

Driver::Driver() { load(); }

const Driver& Driver::instance() {
  static const Driver driver;
  return driver;
}

void Driver::load() {
  // Resolve every entry point. The first query initialises the runtime, which loads libcuda;
  // without a driver it fails fast with cudaErrorInsufficientDriver.
  std::string missing;
#define KHARNESS_CU_LOAD(name, version, required)                                     \
  {                                                                                   \
    void* fn = nullptr;                                                               \
    cudaError_t err = cudaSuccess;                                                    \
    switch (lookup(#name, version, &fn, &err)) {                                      \
      case Lookup::kFound:                                                            \
        name = reinterpret_cast<PFN_##name##_v##version>(fn);                         \
        break;                                                                        \
      case Lookup::kMissing:                                                          \
        if (required) missing += (missing.empty() ? "" : ", ") + std::string(#name);  \
        break;                                                                        \
      case Lookup::kNoDriver:                                                         \
        reason_ = explain_runtime_failure(err);                                       \
        spdlog::debug("driver unavailable: {} ({})", reason_, cudaGetErrorName(err)); \
        return;                                                                       \
    }                                                                                 \
  }
  KHARNESS_CU_FUNCTIONS(KHARNESS_CU_LOAD)
#undef KHARNESS_CU_LOAD
#define KHARNESS_CU_WATCH(name) watch<k_wait_##name>(name);
  KHARNESS_CU_WAITS(KHARNESS_CU_WATCH)
#undef KHARNESS_CU_WATCH

  if (cuDriverGetVersion != nullptr) cuDriverGetVersion(&cuda_version_);
  if (!missing.empty()) {
    reason_ = "the NVIDIA driver (CUDA " + version_text(cuda_version_) +
              ") lacks functions kharness needs: " + missing + "; update the NVIDIA driver";
    return;
  }
  const CUresult init = cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    reason_ =
        "NVIDIA driver found but no CUDA device is visible (check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)";
    available_ = true;  // the driver works; there is just nothing to run on
    return;
  }
  if (init != CUDA_SUCCESS) {
    reason_ = "cuInit failed: " + error_name(init) + " (" + error_string(init) + ")";
    return;
  }
  int count = 0;
  const CUresult rc = cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) {
    reason_ = "cuDeviceGetCount failed: " + error_name(rc);
    return;
  }
  available_ = true;
  device_count_ = count;
  if (count == 0) reason_ = "NVIDIA driver found but no CUDA device is visible";
  spdlog::debug("CUDA driver {} loaded, {} device(s)", version_text(cuda_version_), count);
}

void Driver::require() const {
  if (!available_) throw environment_error(reason_);
  if (device_count_ == 0) throw environment_error(reason_.empty() ? "no CUDA device" : reason_);
}

std::string Driver::error_name(CUresult code) const {
  const char* s = nullptr;
  if (cuGetErrorName != nullptr && cuGetErrorName(code, &s) == CUDA_SUCCESS && s != nullptr) {
    return s;
  }
  return "CUresult " + std::to_string(static_cast<int>(code));
}

std::string Driver::error_string(CUresult code) const {
  const char* s = nullptr;
  if (cuGetErrorString != nullptr && cuGetErrorString(code, &s) == CUDA_SUCCESS && s != nullptr) {
    return s;
  }
  return {};
}

CudaError Driver::error(CUresult code, const std::string& call) const {
  return CudaError(call, code, error_name(code), error_string(code));
}

// ---- RAII owners ----

namespace {
const Driver& cu() { return Driver::instance(); }

void debug_on_failure(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) spdlog::debug("{} failed in a destructor: {}", call, cu().error_name(r));
}
}  // namespace

PrimaryContext::PrimaryContext(int ordinal) {
  const Driver& d = cu();
  d.require();
  KHARNESS_CU(d, cuDeviceGet, &dev_, ordinal);
  KHARNESS_CU(d, cuDevicePrimaryCtxRetain, &ctx_, dev_);
  const CUresult r = d.cuCtxSetCurrent(ctx_);
  if (r != CUDA_SUCCESS) {
    d.cuDevicePrimaryCtxRelease(dev_);
    ctx_ = nullptr;
    throw d.error(r, "cuCtxSetCurrent");
  }
}

PrimaryContext::~PrimaryContext() {
  if (ctx_ != nullptr)
    debug_on_failure(cu().cuDevicePrimaryCtxRelease(dev_), "cuDevicePrimaryCtxRelease");
}

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept
    : dev_(other.dev_), ctx_(std::exchange(other.ctx_, nullptr)) {}

void PrimaryContext::make_current() const { KHARNESS_CU(cu(), cuCtxSetCurrent, ctx_); }

Module::Module(const std::string& image) {
  const Driver& d = cu();
  std::string info(8192, '\0'), errors(8192, '\0');
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {info.data(), reinterpret_cast<void*>(info.size()), errors.data(),
                    reinterpret_cast<void*>(errors.size())};
  const CUresult r = d.cuModuleLoadDataEx(&mod_, image.data(), 4, opts, values);
  info.resize(info.find('\0') == std::string::npos ? info.size() : info.find('\0'));
  errors.resize(errors.find('\0') == std::string::npos ? errors.size() : errors.find('\0'));
  jit_log_ = errors.empty() ? info : (info.empty() ? errors : errors + "\n" + info);
  if (r != CUDA_SUCCESS) {
    mod_ = nullptr;
    CudaError e = d.error(r, "cuModuleLoadDataEx");
    if (errors.empty()) throw e;
    throw CudaError(e.call(), e.code(), e.name(), e.description() + ": " + errors);
  }
}

Module::~Module() {
  if (mod_ != nullptr) debug_on_failure(cu().cuModuleUnload(mod_), "cuModuleUnload");
}

Module::Module(Module&& other) noexcept
    : mod_(std::exchange(other.mod_, nullptr)), jit_log_(std::move(other.jit_log_)) {}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    if (mod_ != nullptr) debug_on_failure(cu().cuModuleUnload(mod_), "cuModuleUnload");
    mod_ = std::exchange(other.mod_, nullptr);
    jit_log_ = std::move(other.jit_log_);
  }
  return *this;
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  const CUresult r = cu().cuModuleGetFunction(&f, mod_, name.c_str());
  if (r != CUDA_SUCCESS) throw cu().error(r, "cuModuleGetFunction(" + name + ")");
  return f;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  KHARNESS_CU(cu(), cuMemAlloc, &ptr_, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) debug_on_failure(cu().cuMemFree(ptr_), "cuMemFree");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) debug_on_failure(cu().cuMemFree(ptr_), "cuMemFree");
    ptr_ = std::exchange(other.ptr_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > size_) throw std::out_of_range("DeviceBuffer::upload past the end");
  if (bytes == 0) return;
  KHARNESS_CU(cu(), cuMemcpyHtoD, ptr_ + offset, src, bytes);
  KHARNESS_CU(cu(), cuCtxSynchronize);
}

void DeviceBuffer::download(void* dst, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > size_) throw std::out_of_range("DeviceBuffer::download past the end");
  if (bytes == 0) return;
  KHARNESS_CU(cu(), cuCtxSynchronize);
  KHARNESS_CU(cu(), cuMemcpyDtoH, dst, ptr_ + offset, bytes);
}

void DeviceBuffer::fill(unsigned char byte) const {
  if (size_ == 0) return;
  KHARNESS_CU(cu(), cuMemsetD8, ptr_, byte, size_);
  KHARNESS_CU(cu(), cuCtxSynchronize);
}

Stream::Stream() { KHARNESS_CU(cu(), cuStreamCreate, &stream_, CU_STREAM_NON_BLOCKING); }

Stream::~Stream() {
  if (stream_ != nullptr) debug_on_failure(cu().cuStreamDestroy(stream_), "cuStreamDestroy");
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

void Stream::synchronize() const { KHARNESS_CU(cu(), cuStreamSynchronize, stream_); }

Event::Event(unsigned flags) { KHARNESS_CU(cu(), cuEventCreate, &event_, flags); }

Event::~Event() {
  if (event_ != nullptr) debug_on_failure(cu().cuEventDestroy(event_), "cuEventDestroy");
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

void Event::record(CUstream stream) const { KHARNESS_CU(cu(), cuEventRecord, event_, stream); }

void Event::synchronize() const { KHARNESS_CU(cu(), cuEventSynchronize, event_); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  KHARNESS_CU(cu(), cuEventElapsedTime, &ms, start.event_, event_);
  return ms;
}

CUresult opt_in_dynamic_shared(CUfunction f, unsigned bytes) {
  constexpr unsigned kDefaultLimit = 48 * 1024;
  if (bytes <= kDefaultLimit) return CUDA_SUCCESS;
  return cu().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(bytes));
}

CUresult launch_kernel(CUfunction f, const LaunchConfig& c, void** params) {
  CUlaunchConfig config{};
  config.gridDimX = c.grid[0];
  config.gridDimY = c.grid[1];
  config.gridDimZ = c.grid[2];
  config.blockDimX = c.block[0];
  config.blockDimY = c.block[1];
  config.blockDimZ = c.block[2];
  config.sharedMemBytes = c.shared_bytes;
  config.hStream = c.stream;
  CUlaunchAttribute attrs[3]{};
  unsigned n = 0;
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] > 1) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = c.cluster[0];
    attrs[n].value.clusterDim.y = c.cluster[1];
    attrs[n].value.clusterDim.z = c.cluster[2];
    ++n;
  }
  if (c.pdl) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (c.cooperative) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n].value.cooperative = 1;
    ++n;
  }
  if (n > 0) {
    config.attrs = attrs;
    config.numAttrs = n;
  }
  return cu().cuLaunchKernelEx(&config, f, params, nullptr);
}

std::string format_uuid(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[48];
  std::snprintf(out, sizeof out,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

}  // namespace kharness::device
