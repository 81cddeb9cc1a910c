#include <string>

#include "kharness/compile.hpp"

namespace kharness {
namespace {

nlohmann::json count_or_null(long long v) {
  return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v);
}

template <class T>
T count_from(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  return v.is_null() ? T(-1) : v.get<T>();
}

}  // namespace

std::string_view severity_name(Diagnostic::Severity s) {
  switch (s) {
    case Diagnostic::Severity::kError:
      return "error";
    case Diagnostic::Severity::kWarning:
      return "warning";
    case Diagnostic::Severity::kNote:
      return "note";
  }
  return "error";
}

nlohmann::json to_json(const Diagnostic& d) {
  return {{"severity", std::string(severity_name(d.severity))},
          {"file", d.file},
          {"line", d.line},
          {"message", d.message}};
}

nlohmann::json to_json(const KernelInfo& k) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : k.params)
    params.push_back({{"type", p.type}, {"size", p.size}, {"align", p.align}});
  return {{"name", k.name},
          {"mangled", k.mangled},
          {"registers", count_or_null(k.registers)},
          {"barriers", count_or_null(k.barriers)},
          {"shared_bytes", count_or_null(k.shared_bytes)},
          {"const_bytes", count_or_null(k.const_bytes)},
          {"stack_bytes", count_or_null(k.stack_bytes)},
          {"spill_store_bytes", count_or_null(k.spill_store_bytes)},
          {"spill_load_bytes", count_or_null(k.spill_load_bytes)},
          {"params", params}};
}

KernelInfo kernel_from_json(const nlohmann::json& j) {
  KernelInfo k;
  k.name = j.at("name").get<std::string>();
  k.mangled = j.at("mangled").get<std::string>();
  for (const auto& p : j.at("params")) {
    k.params.push_back({p.at("type").get<std::string>(), p.at("size").get<std::size_t>(),
                        p.at("align").get<std::size_t>()});
  }
  k.registers = count_from<int>(j, "registers");
  k.barriers = count_from<int>(j, "barriers");
  k.shared_bytes = count_from<std::int64_t>(j, "shared_bytes");
  k.const_bytes = count_from<std::int64_t>(j, "const_bytes");
  k.stack_bytes = count_from<std::int64_t>(j, "stack_bytes");
  k.spill_store_bytes = count_from<std::int64_t>(j, "spill_store_bytes");
  k.spill_load_bytes = count_from<std::int64_t>(j, "spill_load_bytes");
  return k;
}

nlohmann::json to_json(const CompileResult& r) {
  nlohmann::json j;
  j["status"] = std::string(status_name(r.status));
  j["arch"] = r.arch;
  j["nvrtc_version"] = r.nvrtc_version;
  if (!r.cutlass_version.empty()) {
    j["cutlass"] = {{"version", r.cutlass_version}, {"include_dir", r.cutlass_include_dir}};
  }
  j["cache_key"] = r.cache_key;
  j["cache_hit"] = r.cache_hit;
  j["seconds"] = r.seconds;
  if (!r.limit.empty()) j["limit"] = r.limit;
  j["violations"] = nlohmann::json::array();
  for (const auto& v : r.violations) {
    j["violations"].push_back(
        {{"rule", v.rule}, {"message", v.message}, {"file", v.file}, {"line", v.line}});
  }
  j["diagnostics"] = nlohmann::json::array();
  for (const auto& d : r.diagnostics) j["diagnostics"].push_back(to_json(d));
  j["kernels"] = nlohmann::json::array();
  for (const auto& k : r.kernels) j["kernels"].push_back(to_json(k));
  j["log"] = r.log;
  return j;
}

}  // namespace kharness
