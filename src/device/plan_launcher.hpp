// Launches a solution's launch plan on the GPU: resolves each launch's kernel in a loaded module,
// evaluates its geometry for a workload, packs its arguments by the compiled kernel's parameter
// sizes, opts into dynamic shared memory above 48 KiB and launches through cuLaunchKernelEx
// (clusters included). Used by the correctness stage now and by timing and profiling later.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/solution.hpp"

namespace kharness::device {

// Everything a plan's names can refer to, for one workload.
struct LaunchEnv {
  const Definition* definition = nullptr;
  Bindings axes;                                  // every axis of the definition
  std::map<std::string, CUdeviceptr> tensors;     // inputs and outputs by name
  std::map<std::string, nlohmann::json> scalars;  // scalar inputs by name (workload values)
  CUdeviceptr workspace = 0;
};

// The outcome of launching a plan: success, or which launch failed and how.
struct LaunchOutcome {
  bool ok = true;
  int launch_index = -1;  // the failing launch
  std::string kernel;
  CUresult code = CUDA_SUCCESS;
  std::string error_name;  // "CUDA_ERROR_ILLEGAL_ADDRESS"
  std::string message;     // one line
  bool sticky = false;     // the context is unusable: the process must stop after reporting
};

class PlanLauncher {
 public:
  // Throws CudaError when a kernel is missing from the module (the compile stage checked names,
  // so that is an internal inconsistency) and std::runtime_error for a plan/kernel mismatch.
  PlanLauncher(const LaunchPlan& plan, const std::vector<KernelInfo>& kernels,
               const Module& module);

  // Launches every launch of the variant that serves env.axes, in order, on `stream`. With
  // `sync_each`, synchronises after each launch so an asynchronous fault is attributed to the
  // launch that caused it, and each launch is its own wait for the launch watchdog
  // (device/watchdog.hpp): a plan of several launches of a few seconds each is never taken for a
  // hang. Each launch is noted (note_launch) before it starts.
  LaunchOutcome launch(const LaunchEnv& env, CUstream stream, bool sync_each) const;

  // The entry names (mangled, as PTX and CUPTI give them) of the plan's kernels (of every
  // variant), sorted, without duplicates, joined by ','.
  std::string kernel_names() const;

  // Bytes of workspace the plan asks for on this workload (0 when none). Throws ExprError.
  std::int64_t workspace_bytes(const Bindings& axes) const;

 private:
  struct Resolved {
    const Launch* launch;
    const KernelInfo* info;
    CUfunction function;
  };
  const LaunchPlan& plan_;
  std::vector<std::vector<Resolved>> variants_;  // one list per variant (one for a plain plan)
};

// A CUDA error as a failure kind: CUDA_ERROR_ILLEGAL_ADDRESS -> "illegal_address".
std::string failure_kind_of(const std::string& cuda_error_name);

}  // namespace kharness::device
