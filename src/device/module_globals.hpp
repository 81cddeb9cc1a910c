// The state a loaded module keeps between launches — its global variables (`__device__`,
// `__managed__`, function-local statics, `.global` declared by inline PTX inside a function) and
// its `__constant__` variables (which a kernel can write through their generic address) — and the
// bytes they held when it was loaded. Restoring them before a timed iteration gives a kernel the
// state of a freshly loaded module — what the correctness stage gives it by reloading the module
// every trial — so nothing a launch leaves in them reaches the next one
// (docs/correctness.md#state-reset: no state survives an iteration), at the cost of one small copy
// per contiguous span of variables instead of a module load. Where some variable cannot be named,
// the module is reloaded instead. The initial bytes are kept in pageable host memory, which no
// kernel can address.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device/driver.hpp"

namespace kharness::device {

// One variable to restore by name; `size` is what the cubin's symbol table says it holds (0:
// unknown), checked against what the driver resolves. `section` and `offset` place it in the
// cubin's layout (unset for a name only the PTX gives).
struct StateVar {
  std::string name;
  std::uint64_t size = 0;
  std::string section;
  std::optional<std::uint64_t> offset;
};

// A variable where the driver put it, with its place in the cubin (StateVar::section, offset).
struct PlacedVar {
  CUdeviceptr ptr = 0;
  std::uint64_t size = 0;
  std::string section;
  std::optional<std::uint64_t> offset;
  // The driver allocation that holds it (cuMemGetAddressRange; 0: unknown). One copy may cross
  // variables only inside one allocation: a copy across two is an invalid argument, and the
  // driver does allocate a section's variables separately (seen on driver 580: a small array and
  // a 512 KiB one whose addresses happened to keep the cubin's layout, in two allocations).
  CUdeviceptr allocation = 0;
};
// A range of device memory restored by one copy.
struct CopySpan {
  CUdeviceptr ptr = 0;
  std::uint64_t size = 0;
};
// The copies that restore `vars`, in address order. The variables of one section whose addresses
// all keep the cubin's layout (address - offset is one base for every one of them) and lie in one
// driver allocation (the driver loaded the section as one block) are restored by one copy from the
// lowest to the highest end,
// alignment padding and any unnamed object between them included (restored too: the reset only
// widens); every other variable gets a copy of its own. Variables of size 0 get none. A module of
// CuTe code compiled with -default-device has thousands of constants (cuda::std and cute traits)
// in two sections: two copies per iteration instead of thousands.
std::vector<CopySpan> restore_spans(const std::vector<PlacedVar>& vars);

// What resetting a module's state takes, from its PTX and cubin (no GPU needed): the variables to
// restore by name, and why restoring them cannot be the whole reset (empty: it can).
struct StatePlan {
  std::vector<StateVar> vars;
  // Variables known to exist that no name resolves (PTX declarations inside function bodies when
  // the cubin's symbol table cannot be read): counted, covered by the reload.
  std::vector<std::string> unnamed;
  std::string reload_reason;

  std::size_t count() const { return vars.size() + unnamed.size(); }
};

// The cubin's symbol table is the list of record (every object in .nv.global*, .nv.constant*), the
// PTX's module-scope .global and .const definitions are added to it; a `.global` declared inside a
// function body (inline PTX) sets reload_reason, as does a cubin whose symbol table cannot be read.
StatePlan plan_state_reset(const std::string& ptx, const std::string& cubin);

class ModuleGlobals {
 public:
  // Resolves `vars` and reads their bytes. Call it right after loading, before any launch. Throws
  // CudaError for a failing copy; a name the module does not resolve, or resolves to a size other
  // than the symbol table's, is listed in missing() instead.
  ModuleGlobals(const Module& module, const std::vector<StateVar>& vars);

  // Every name resolved: restore() resets every variable it was given.
  bool complete() const { return missing_.empty(); }
  const std::vector<std::string>& missing() const { return missing_; }
  std::size_t count() const { return resolved_; }       // variables resolved
  std::size_t copies() const { return spans_.size(); }  // copies per restore (restore_spans)
  std::size_t bytes() const;

  // Enqueues the copy of every resolved variable's initial bytes on `stream`.
  void restore(CUstream stream) const;

 private:
  struct Span {
    CUdeviceptr ptr = 0;
    std::vector<std::uint8_t> initial;
  };
  std::vector<Span> spans_;
  std::size_t resolved_ = 0;
  std::vector<std::string> missing_;
};

}  // namespace kharness::device
