#include "pipeline/request.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kharness/text.hpp"

namespace kharness::pipeline {

using nlohmann::json;

json request_json(const CheckRequest& r) {
  std::vector<std::string> dirs;
  for (const auto& d : r.operators_dirs) dirs.push_back(std::filesystem::absolute(d).string());
  return {{"solution", std::filesystem::absolute(r.solution).string()},
          {"operator", r.operator_name},
          {"operators_dirs", dirs},
          {"arch", r.arch},
          {"use_cache", r.use_cache},
          {"compile_cache_dir", r.compile_cache_dir.string()},
          {"options", r.options.to_json()},
          {"launch_timeout_seconds", r.launch_timeout_seconds},
          {"mode", std::string(name_of(r.mode))},
          {"bench", r.bench.to_json()},
          {"extra_workloads", r.extra_workloads}};
}

// The compile limit is part of the solution's --timeout: never above it.
CompileOptions compile_options(const CheckRequest& request) {
  CompileOptions options = make_compile_options(request.arch, request.use_cache);
  if (!request.compile_cache_dir.empty()) {
    options.cache_dir = request.compile_cache_dir;
    options.use_cache = true;
  }
  if (request.timeout_seconds > 0)
    options.limits.timeout_seconds =
        std::min(options.limits.timeout_seconds, request.timeout_seconds);
  return options;
}

verify::Loaded load_request(const CheckRequest& request) {
  return verify::load_and_compile(request.solution, request.operator_name, request.operators_dirs,
                                  compile_options(request), request.extra_workloads);
}

CheckRequest request_from_json(const json& j) {
  CheckRequest r;
  r.solution = j.at("solution").get<std::string>();
  r.operator_name = j.value("operator", "");
  for (const auto& d : j.value("operators_dirs", std::vector<std::string>{}))
    r.operators_dirs.emplace_back(d);
  r.arch = j.at("arch").get<std::string>();
  r.use_cache = j.value("use_cache", true);
  r.compile_cache_dir = j.value("compile_cache_dir", "");
  r.options = verify::CheckOptions::from_json(j.value("options", json::object()));
  r.launch_timeout_seconds = j.value("launch_timeout_seconds", r.launch_timeout_seconds);
  const std::string mode = j.value("mode", "check");
  const std::optional<Mode> parsed = parse_enum<Mode>(mode);
  if (!parsed) throw std::runtime_error("unknown mode '" + mode + "'");
  r.mode = *parsed;
  r.bench = bench::BenchOptions::from_json(j.value("bench", json::object()));
  r.extra_workloads = j.value("extra_workloads", std::vector<json>{});
  return r;
}

}  // namespace kharness::pipeline
