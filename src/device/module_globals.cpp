#include "device/module_globals.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>

#include "kharness/compile.hpp"

namespace kharness::device {

StatePlan plan_state_reset(const std::string& ptx, const std::string& cubin) {
  StatePlan plan;
  // The symbol table's names are unique (cubin_state_symbols); a PTX name is added only where the
  // table lacks it. A set keeps this linear: CuTe modules have thousands of names.
  std::unordered_set<std::string> names;
  const std::optional<std::vector<CubinSymbol>> symbols = cubin_state_symbols(cubin);
  if (symbols) {
    for (const auto& s : *symbols) {
      if (names.insert(s.name).second)
        plan.vars.push_back(StateVar{s.name, s.size, s.section, s.offset});
    }
  }
  const PtxState declared = parse_ptx_state(ptx);
  for (const auto* list : {&declared.globals, &declared.constants}) {
    for (const auto& name : *list) {
      if (names.insert(name).second) plan.vars.push_back(StateVar{name, 0, "", std::nullopt});
    }
  }
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

std::vector<CopySpan> restore_spans(const std::vector<PlacedVar>& vars) {
  std::vector<CopySpan> out;
  // Per section: the variables the cubin places, and whether every address keeps its layout.
  struct Section {
    std::vector<const PlacedVar*> vars;
    bool laid_out = true;
  };
  std::map<std::string, Section> sections;
  for (const auto& v : vars) {
    if (v.size == 0) continue;
    if (!v.offset || v.section.empty()) {
      out.push_back(CopySpan{v.ptr, v.size});
      continue;
    }
    Section& s = sections[v.section];
    if (v.ptr < *v.offset || v.allocation == 0 ||
        (!s.vars.empty() && (v.ptr - *v.offset != s.vars.front()->ptr - *s.vars.front()->offset ||
                             v.allocation != s.vars.front()->allocation))) {
      s.laid_out = false;
    }
    s.vars.push_back(&v);
  }
  for (const auto& [name, s] : sections) {
    if (!s.laid_out) {
      for (const PlacedVar* v : s.vars) out.push_back(CopySpan{v->ptr, v->size});
      continue;
    }
    CUdeviceptr lo = s.vars.front()->ptr, hi = lo;
    for (const PlacedVar* v : s.vars) {
      lo = std::min(lo, v->ptr);
      hi = std::max(hi, static_cast<CUdeviceptr>(v->ptr + v->size));
    }
    out.push_back(CopySpan{lo, hi - lo});
  }
  std::sort(out.begin(), out.end(),
            [](const CopySpan& a, const CopySpan& b) { return a.ptr < b.ptr; });
  return out;
}

ModuleGlobals::ModuleGlobals(const Module& module, const std::vector<StateVar>& vars) {
  const Driver& d = Driver::instance();
  std::vector<PlacedVar> placed;
  placed.reserve(vars.size());
  for (const auto& var : vars) {
    CUdeviceptr ptr = 0;
    std::size_t size = 0;
    if (d.cuModuleGetGlobal(&ptr, &size, module.get(), var.name.c_str()) != CUDA_SUCCESS) {
      missing_.push_back(var.name);
      continue;
    }
    if (var.size != 0 && size != var.size) {  // not the object the symbol table names
      missing_.push_back(fmt::format("{} ({} bytes, the cubin says {})", var.name, size, var.size));
      continue;
    }
    CUdeviceptr allocation = 0;
    std::size_t allocation_size = 0;
    if (d.cuMemGetAddressRange(&allocation, &allocation_size, ptr) != CUDA_SUCCESS) allocation = 0;
    placed.push_back(PlacedVar{ptr, size, var.section, var.offset, allocation});
  }
  resolved_ = placed.size();
  for (const CopySpan& span : restore_spans(placed)) {
    Span s{span.ptr, std::vector<std::uint8_t>(span.size)};
    d.check(d.cuMemcpyDtoH(s.initial.data(), s.ptr, span.size), "cuMemcpyDtoH");
    spans_.push_back(std::move(s));
  }
}

std::size_t ModuleGlobals::bytes() const {
  std::size_t n = 0;
  for (const auto& s : spans_) n += s.initial.size();
  return n;
}

void ModuleGlobals::restore(CUstream stream) const {
  const Driver& d = Driver::instance();
  for (const auto& s : spans_) {
    d.check(d.cuMemcpyHtoDAsync(s.ptr, s.initial.data(), s.initial.size(), stream),
            "cuMemcpyHtoDAsync");
  }
}

}  // namespace kharness::device
