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
  json j = r.target.to_json();
  j.update({{"solution", std::filesystem::absolute(r.solution).string()},
            {"compile_cache_dir", r.compile_cache_dir.string()},
            {"options", r.options.to_json()},
            {"launch_timeout_seconds", r.launch_timeout_seconds},
            {"mode", std::string(name_of(r.mode))},
            {"bench", r.bench.to_json()},
            {"extra_workloads", r.extra_workloads}});
  return j;
}

// The compile limit is part of the solution's --timeout: never above it.
CompileOptions compile_options(const CheckRequest& request) {
  CompileOptions options = make_compile_options(request.target.arch, request.target.use_cache);
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
  return verify::load_and_compile(request.solution, request.target.operator_name,
                                  request.target.operators_dirs, compile_options(request),
                                  request.extra_workloads);
}

CheckRequest request_from_json(const json& j) {
  CheckRequest r;
  r.solution = j.at("solution").get<std::string>();
  r.target = Target::from_json(j);
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
