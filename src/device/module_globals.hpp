// The global variables of a loaded module (`__device__`, `__managed__`, function-local statics)
// and the bytes they held when it was loaded. Restoring them before a timed iteration gives a
// kernel the state of a freshly loaded module — what the correctness stage gives it by reloading
// the module every trial — so nothing a launch leaves in them reaches the next one (DESIGN §5: no
// state survives an iteration), at the cost of one small copy per variable instead of a module
// load. The initial bytes are kept in pageable host memory, which no kernel can address.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device/driver.hpp"

namespace kharness::device {

class ModuleGlobals {
 public:
  // Resolves `names` (parse_ptx_globals of the module's PTX) and reads their bytes. Call it right
  // after loading, before any launch. Throws CudaError for a failing copy; a name the module does
  // not resolve is listed in missing() instead.
  ModuleGlobals(const Module& module, const std::vector<std::string>& names);

  // Every name resolved: restore() resets the whole state.
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
