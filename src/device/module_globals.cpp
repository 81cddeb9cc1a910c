#include "device/module_globals.hpp"

namespace kharness::device {

ModuleGlobals::ModuleGlobals(const Module& module, const std::vector<std::string>& names) {
  const Driver& d = Driver::instance();
  for (const auto& name : names) {
    Var v;
    v.name = name;
    std::size_t size = 0;
    if (d.cuModuleGetGlobal(&v.ptr, &size, module.get(), name.c_str()) != CUDA_SUCCESS) {
      missing_.push_back(name);
      continue;
    }
    v.initial.resize(size);
    if (size > 0) d.check(d.cuMemcpyDtoH(v.initial.data(), v.ptr, size), "cuMemcpyDtoH");
    vars_.push_back(std::move(v));
  }
}

std::size_t ModuleGlobals::bytes() const {
  std::size_t n = 0;
  for (const auto& v : vars_) n += v.initial.size();
  return n;
}

void ModuleGlobals::restore(CUstream stream) const {
  const Driver& d = Driver::instance();
  for (const auto& v : vars_) {
    if (v.initial.empty()) continue;
    d.check(d.cuMemcpyHtoDAsync(v.ptr, v.initial.data(), v.initial.size(), stream),
            "cuMemcpyHtoDAsync");
  }
}

}  // namespace kharness::device
