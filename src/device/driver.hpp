// The CUDA driver API, loaded at run time. kharness does not link libcuda: every driver function
// comes from the static runtime's cudaGetDriverEntryPointByVersion, so the binary starts (and
// compiles) on machines without an NVIDIA driver, and a missing or old driver is a value
// (Driver::available() == false with a reason) rather than a loader error.
//
// Each function is requested at an explicit ABI version and stored with the PFN typedef of that
// version from <cudaTypedefs.h> (the X-macro below pairs them, so they cannot disagree): e.g.
// cuMemAlloc at 3020 is cuMemAlloc_v2 (64-bit sizes), cuCtxSynchronize at 2000 takes no argument.
// Streams are the legacy-default-stream variants (cudaEnableLegacyStream).
//
// Usage:
//   const auto& cu = device::Driver::instance();
//   cu.require();                                   // throws environment_error (exit 3) if no GPU
//   CUdeviceptr p; KHARNESS_CU(cu, cuMemAlloc, &p, 64);   // throws CudaError on failure
//   CUresult r = cu.cuCtxSynchronize();             // or keep the CUresult and classify it
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kharness::device {

// X(name, abi_version, required). Optional functions may be null on older drivers.
#define KHARNESS_CU_FUNCTIONS(X)                             \
  /* errors, init, versions */                               \
  X(cuGetErrorName, 6000, true)                              \
  X(cuGetErrorString, 6000, true)                            \
  X(cuInit, 2000, true)                                      \
  X(cuDriverGetVersion, 2020, true)                          \
  /* devices */                                              \
  X(cuDeviceGet, 2000, true)                                 \
  X(cuDeviceGetCount, 2000, true)                            \
  X(cuDeviceGetName, 2000, true)                             \
  X(cuDeviceGetAttribute, 2000, true)                        \
  X(cuDeviceTotalMem, 3020, true)                            \
  X(cuDeviceGetUuid, 11040, true)                            \
  X(cuDeviceGetPCIBusId, 4010, true)                         \
  /* contexts */                                             \
  X(cuDevicePrimaryCtxRetain, 7000, true)                    \
  X(cuDevicePrimaryCtxRelease, 11000, true)                  \
  X(cuDevicePrimaryCtxReset, 11000, true)                    \
  X(cuDevicePrimaryCtxGetState, 7000, true)                  \
  X(cuCtxCreate, 3020, true)                                 \
  X(cuCtxDestroy, 4000, true)                                \
  X(cuCtxSetCurrent, 4000, true)                             \
  X(cuCtxGetCurrent, 4000, true)                             \
  X(cuCtxPushCurrent, 4000, true)                            \
  X(cuCtxPopCurrent, 4000, true)                             \
  X(cuCtxGetDevice, 2000, true)                              \
  X(cuCtxSynchronize, 2000, true)                            \
  X(cuCtxSetLimit, 3010, true)                               \
  X(cuCtxGetLimit, 3010, true)                               \
  X(cuCtxResetPersistingL2Cache, 11000, true)                \
  /* modules and functions */                                \
  X(cuModuleLoadData, 2000, true)                            \
  X(cuModuleLoadDataEx, 2010, true)                          \
  X(cuModuleUnload, 2000, true)                              \
  X(cuModuleGetFunction, 2000, true)                         \
  X(cuModuleGetGlobal, 3020, true)                           \
  X(cuMemGetAddressRange, 3020, true)                        \
  X(cuFuncGetAttribute, 2020, true)                          \
  X(cuFuncSetAttribute, 9000, true)                          \
  X(cuFuncSetCacheConfig, 3000, true)                        \
  X(cuFuncGetParamInfo, 12040, false)                        \
  X(cuFuncGetName, 12030, false)                             \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, true) \
  X(cuOccupancyMaxActiveClusters, 11070, false)              \
  /* launches */                                             \
  X(cuLaunchKernel, 4000, true)                              \
  X(cuLaunchKernelEx, 11060, true)                           \
  /* memory */                                               \
  X(cuMemGetInfo, 3020, true)                                \
  X(cuMemAlloc, 3020, true)                                  \
  X(cuMemFree, 3020, true)                                   \
  X(cuMemAllocHost, 3020, true)                              \
  X(cuMemFreeHost, 2000, true)                               \
  X(cuMemcpyHtoD, 3020, true)                                \
  X(cuMemcpyDtoH, 3020, true)                                \
  X(cuMemcpyDtoD, 3020, true)                                \
  X(cuMemcpyHtoDAsync, 3020, true)                           \
  X(cuMemcpyDtoHAsync, 3020, true)                           \
  X(cuMemcpyDtoDAsync, 3020, true)                           \
  X(cuMemsetD8, 3020, true)                                  \
  X(cuMemsetD32, 3020, true)                                 \
  X(cuMemsetD8Async, 3020, true)                             \
  X(cuMemsetD32Async, 3020, true)                            \
  /* tensor maps (Hopper/Blackwell TMA) */                   \
  X(cuTensorMapEncodeTiled, 12000, false)                    \
  /* streams and events */                                   \
  X(cuStreamCreate, 2000, true)                              \
  X(cuStreamDestroy, 4000, true)                             \
  X(cuStreamSynchronize, 2000, true)                         \
  X(cuStreamQuery, 2000, true)                               \
  X(cuStreamWaitEvent, 3020, true)                           \
  X(cuEventCreate, 2000, true)                               \
  X(cuEventDestroy, 4000, true)                              \
  X(cuEventRecord, 2000, true)                               \
  X(cuEventSynchronize, 2000, true)                          \
  X(cuEventQuery, 2000, true)                                \
  X(cuEventElapsedTime, 2000, true)

// A failed driver call. what(): "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (a PTX JIT
// compilation failed)".
class CudaError : public std::runtime_error {
 public:
  CudaError(std::string call, CUresult code, std::string name, std::string description);
  CUresult code() const { return code_; }
  const std::string& call() const { return call_; }
  const std::string& name() const { return name_; }  // "CUDA_ERROR_ILLEGAL_ADDRESS"
  const std::string& description() const { return description_; }

 private:
  std::string call_;
  CUresult code_;
  std::string name_;
  std::string description_;
};

// Errors after which the context is unusable (every later call fails): the process that saw one
// should report it and exit.
bool is_sticky_error(CUresult code);

class Driver {
 public:
  // Loads on first use (thread-safe); never throws. cuInit has been called when available().
  static const Driver& instance();

  bool available() const { return available_; }
  // A sentence for the user when !available(), e.g. "no NVIDIA driver found (...)".
  const std::string& unavailable_reason() const { return reason_; }
  int cuda_version() const { return cuda_version_; }  // cuDriverGetVersion, 13000; 0 unknown
  int device_count() const { return device_count_; }  // 0 when unavailable
  // Throws kharness::environment_error (exit 3) when the driver is unavailable or no device is
  // visible.
  void require() const;

  // "CUDA_ERROR_ILLEGAL_ADDRESS"; "CUresult 123" when the driver cannot name it.
  std::string error_name(CUresult code) const;
  std::string error_string(CUresult code) const;
  CudaError error(CUresult code, const std::string& call) const;
  // Throws CudaError when code != CUDA_SUCCESS.
  void check(CUresult code, const char* call) const {
    if (code != CUDA_SUCCESS) throw error(code, call);
  }

#define KHARNESS_CU_MEMBER(name, version, required) PFN_##name##_v##version name = nullptr;
  KHARNESS_CU_FUNCTIONS(KHARNESS_CU_MEMBER)
#undef KHARNESS_CU_MEMBER

  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

 private:
  Driver();
  void load();
  bool available_ = false;
  std::string reason_;
  int cuda_version_ = 0;
  int device_count_ = 0;
};

// KHARNESS_CU(drv, cuMemAlloc, &ptr, bytes): calls drv.cuMemAlloc(&ptr, bytes), throws CudaError
// naming "cuMemAlloc" on failure.
#define KHARNESS_CU(drv, fn, ...) (drv).check((drv).fn(__VA_ARGS__), #fn)

// ---- small RAII owners over the table (move-only; destructors never throw) ----

// The device's primary context, retained and made current on this thread.
class PrimaryContext {
 public:
  explicit PrimaryContext(int ordinal = 0);  // throws CudaError / environment_error
  ~PrimaryContext();
  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&&) = delete;
  PrimaryContext(const PrimaryContext&) = delete;
  CUcontext get() const { return ctx_; }
  CUdevice device() const { return dev_; }
  void make_current() const;

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

// A loaded module (cubin, fatbin or PTX image). PTX JIT errors land in CudaError::what() and
// in jit_log().
class Module {
 public:
  explicit Module(const std::string& image);  // throws CudaError
  ~Module();
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  CUmodule get() const { return mod_; }
  CUfunction function(const std::string& name) const;  // throws CudaError (CUDA_ERROR_NOT_FOUND)
  const std::string& jit_log() const { return jit_log_; }

 private:
  CUmodule mod_ = nullptr;
  std::string jit_log_;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);  // throws CudaError (CUDA_ERROR_OUT_OF_MEMORY)
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  CUdeviceptr ptr() const { return ptr_; }
  std::size_t size() const { return size_; }
  // Host transfers complete with respect to every stream of the context: upload and fill have
  // finished on the device when they return (a kernel launched next on a non-blocking stream
  // sees their bytes), and download first waits for all work in the context (so it reads what a
  // kernel on any stream wrote). The plain cuMemcpy/cuMemset calls alone are ordered only on the
  // legacy default stream, which non-blocking streams do not wait for, and a pageable upload or a
  // memset may still be in flight when they return.
  void upload(const void* src, std::size_t bytes, std::size_t offset = 0) const;
  void download(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  void fill(unsigned char byte) const;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

class Stream {
 public:
  Stream();  // CU_STREAM_NON_BLOCKING
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  explicit Event(unsigned flags = CU_EVENT_DEFAULT);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream) const;
  void synchronize() const;
  // Milliseconds from `start` to this event.
  float elapsed_ms_since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

struct LaunchConfig {
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  std::array<unsigned, 3> cluster{1, 1, 1};  // {1,1,1}: no cluster attribute
  unsigned shared_bytes = 0;                 // dynamic shared memory
  CUstream stream = nullptr;
  bool pdl = false;          // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
  bool cooperative = false;  // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
};

// Sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES when `bytes` exceeds the 48 KiB default.
CUresult opt_in_dynamic_shared(CUfunction f, unsigned bytes);
// cuLaunchKernelEx with the cluster dimension attribute when cluster != {1,1,1} and the
// programmatic-serialisation and cooperative attributes when asked. Returns the launch's CUresult
// (launch errors are a verdict, not an exception).
CUresult launch_kernel(CUfunction f, const LaunchConfig& config, void** params);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from cuDeviceGetUuid bytes (nvidia-smi's form).
std::string format_uuid(const CUuuid& uuid);

}  // namespace kharness::device
