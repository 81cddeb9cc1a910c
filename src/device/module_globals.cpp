#include "device/module_globals.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "kharness/compile.hpp"

namespace kharness::device {

StatePlan plan_state_reset(const std::string& ptx, const std::string& cubin) {
  StatePlan plan;
  auto add = [&](const std::string& name, std::uint64_t size) {
    auto it = std::find_if(plan.vars.begin(), plan.vars.end(),
                           [&](const StateVar& v) { return v.name == name; });
    if (it == plan.vars.end()) {
      plan.vars.push_back(StateVar{name, size});
    } else if (it->size == 0) {
      it->size = size;
    }
  };
  const std::optional<std::vector<CubinSymbol>> symbols = cubin_state_symbols(cubin);
  if (symbols) {
    for (const auto& s : *symbols) add(s.name, s.size);
  }
  const PtxState declared = parse_ptx_state(ptx);
  for (const auto& name : declared.globals) add(name, 0);
  for (const auto& name : declared.constants) add(name, 0);
  if (!declared.function_scope.empty()) {
    // ptxas renames these ("$__cache__31"); the symbol table lists them under that name, which the
    // driver may or may not resolve: a reload covers them whatever it does.
    plan.reload_reason = fmt::format("declared inside a function body: {}",
                                     fmt::join(declared.function_scope, ", "));
    if (!symbols) plan.unnamed = declared.function_scope;
  } else if (!symbols) {
    plan.reload_reason = "the cubin's symbol table could not be read";
  }
  return plan;
}

ModuleGlobals::ModuleGlobals(const Module& module, const std::vector<StateVar>& vars) {
  const Driver& d = Driver::instance();
  for (const auto& var : vars) {
    Var v;
    v.name = var.name;
    std::size_t size = 0;
    if (d.cuModuleGetGlobal(&v.ptr, &size, module.get(), var.name.c_str()) != CUDA_SUCCESS) {
      missing_.push_back(var.name);
      continue;
    }
    if (var.size != 0 && size != var.size) {  // not the object the symbol table names
      missing_.push_back(fmt::format("{} ({} bytes, the cubin says {})", var.name, size, var.size));
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
