// The state a loaded module keeps between launches — its global variables (`__device__`,
// `__managed__`, function-local statics, `.global` declared by inline PTX inside a function) and
// its `__constant__` variables (which a kernel can write through their generic address) — and the
// bytes they held when it was loaded. Restoring them before a timed iteration gives a kernel the
// state of a freshly loaded module — what the correctness stage gives it by reloading the module
// every trial — so nothing a launch leaves in them reaches the next one
// (docs/correctness.md#state-reset: no state survives an iteration), at the cost of one small copy
// per variable instead of a module load. Where some variable cannot be named, the module is
// reloaded instead. The initial bytes are kept in pageable host memory, which no kernel can
// address.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device/driver.hpp"

namespace kharness::device {

// One variable to restore by name; `size` is what the cubin's symbol table says it holds (0:
// unknown), checked against what the driver resolves.
struct StateVar {
  std::string name;
  std::uint64_t size = 0;
};

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
  std::size_t count() const { return vars_.size(); }
  std::size_t bytes() const;

  // Enqueues the copy of every variable's initial bytes on `stream`.
  void restore(CUstream stream) const;

 private:
  struct Var {
    std::string name;
    CUdeviceptr ptr = 0;
    std::vector<std::uint8_t> initial;
  };
  std::vector<Var> vars_;
  std::vector<std::string> missing_;
};

}  // namespace kharness::device
