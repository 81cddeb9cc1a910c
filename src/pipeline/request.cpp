#include "pipeline/request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kharness::pipeline {

using nlohmann::json;

namespace {

constexpr const char* kSchema = "kharness.request/1";

constexpr std::pair<Baseline::Kind, std::string_view> kBaselineKinds[] = {
    {Baseline::Kind::kNone, "none"},
    {Baseline::Kind::kSolution, "solution"},
    {Baseline::Kind::kCublasLt, "cublaslt"}};

json baseline_json(const Baseline& b) {
  std::string_view kind = "none";
  for (const auto& [k, name] : kBaselineKinds) {
    if (k == b.kind) kind = name;
  }
  return {{"kind", std::string(kind)},
          {"solution", b.solution.string()},
          {"from_operator", b.from_operator}};
}

Baseline baseline_from_json(const json& j) {
  Baseline b;
  const std::string kind = j.value("kind", "none");
  bool known = false;
  for (const auto& [k, name] : kBaselineKinds) {
    if (name == kind) {
      b.kind = k;
      known = true;
    }
  }
  if (!known) throw std::runtime_error("unknown baseline kind '" + kind + "'");
  b.solution = j.value("solution", "");
  b.from_operator = j.value("from_operator", false);
  return b;
}

template <class E>
E enum_at(const json& j, const char* key, E fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  const std::string name = it->get<std::string>();
  const std::optional<E> parsed = parse_enum<E>(name);
  if (!parsed) throw std::runtime_error(fmt::format("unknown {} '{}'", key, name));
  return *parsed;
}

}  // namespace

Request with_candidate(Request shared, Candidate candidate) {
  Request r = std::move(shared);
  if (candidate.mode) r.mode = *candidate.mode;
  if (candidate.seed) r.check.seed = *candidate.seed;
  if (!candidate.workloads.empty()) r.check.workloads = candidate.workloads;
  if (!candidate.baseline.empty())
    r.bench.baseline_solution = std::filesystem::absolute(candidate.baseline).string();
  r.candidate = std::move(candidate);
  return r;
}

Baseline resolve_baseline(const Request& request, const Operator& op) {
  if (!request.bench.baseline) return {};
  const std::string& asked = request.bench.baseline_solution;
  if (asked == "cublaslt") return {Baseline::Kind::kCublasLt, {}, false};
  if (!asked.empty()) return {Baseline::Kind::kSolution, std::filesystem::absolute(asked), false};
  if (op.definition.kharness.baseline == "cublaslt") return {Baseline::Kind::kCublasLt, {}, true};
  if (op.baseline)
    return {Baseline::Kind::kSolution, std::filesystem::absolute(*op.baseline), true};
  return {};
}

double worker_timeout_seconds(const Request& request) {
  return request.timeouts.seconds * std::max(1, request.sharing);
}

json request_json(const Request& r) {
  return {{"schema", kSchema},
          {"task", "evaluate"},
          {"mode", std::string(name_of(r.mode))},
          {"target", r.target.to_json()},
          {"compile_cache_dir", r.compile_cache_dir.string()},
          {"timeouts",
           {{"seconds", r.timeouts.seconds}, {"launch_seconds", r.timeouts.launch_seconds}}},
          {"sharing", r.sharing},
          {"check", r.check.to_json()},
          {"seed_given", r.seed_given},
          {"bench", r.bench.to_json()},
          {"holdout", r.holdout},
          {"candidate", {{"solution", std::filesystem::absolute(r.candidate.solution).string()}}},
          {"baseline", baseline_json(r.baseline)},
          {"holdout_workloads", r.holdout_workloads}};
}

Request request_from_json(const json& j) {
  const std::string schema = j.value("schema", "");
  if (schema != kSchema)
    throw std::runtime_error(fmt::format("expected a {} request, got '{}'", kSchema, schema));
  Request r;
  r.mode = enum_at(j, "mode", r.mode);
  r.target = Target::from_json(j.at("target"));
  r.compile_cache_dir = j.value("compile_cache_dir", "");
  const json timeouts = j.value("timeouts", json::object());
  r.timeouts.seconds = timeouts.value("seconds", r.timeouts.seconds);
  r.timeouts.launch_seconds = timeouts.value("launch_seconds", r.timeouts.launch_seconds);
  r.sharing = j.value("sharing", r.sharing);
  r.check = verify::CheckOptions::from_json(j.value("check", json::object()));
  r.seed_given = j.value("seed_given", r.seed_given);
  r.bench = bench::BenchOptions::from_json(j.value("bench", json::object()));
  r.holdout = j.value("holdout", r.holdout);
  r.candidate.solution = j.at("candidate").at("solution").get<std::string>();
  r.baseline = baseline_from_json(j.value("baseline", json::object()));
  r.holdout_workloads = j.value("holdout_workloads", std::vector<json>{});
  return r;
}

// The compile limit is part of the solution's --timeout: never above it.
CompileOptions compile_options(const Request& request) {
  CompileOptions options = make_compile_options(request.target.arch, request.target.use_cache);
  if (!request.compile_cache_dir.empty()) {
    options.cache_dir = request.compile_cache_dir;
    options.use_cache = true;
  }
  const double limit = worker_timeout_seconds(request);
  if (limit > 0) options.limits.timeout_seconds = std::min(options.limits.timeout_seconds, limit);
  return options;
}

verify::Loaded load_request(const Request& request) {
  return verify::load_and_compile(request.candidate.solution, request.target.operator_name,
                                  request.target.operators_dirs, compile_options(request),
                                  request.holdout_workloads);
}

}  // namespace kharness::pipeline
