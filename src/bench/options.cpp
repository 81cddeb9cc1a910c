#include <fmt/format.h>

#include <stdexcept>

#include "kharness/bench.hpp"

namespace kharness::bench {
namespace {

template <class E>
E enum_value(const nlohmann::json& j, const char* key, E fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  const std::string name = it->get<std::string>();
  if (auto v = parse_enum<E>(name)) return *v;
  throw std::runtime_error(fmt::format("bench option {}: unknown value '{}'", key, name));
}

}  // namespace

nlohmann::json BenchOptions::to_json() const {
  return {{"protocol", std::string(name_of(protocol))},
          {"timer", std::string(name_of(timer))},
          {"warmup", warmup},
          {"warmup_seconds", warmup_seconds},
          {"iterations", iterations},
          {"trials", trials},
          {"max_noise", max_noise},
          {"max_seconds", max_seconds},
          {"min_samples", min_samples},
          {"input_sets", input_sets},
          {"state_reset", std::string(name_of(state_reset))},
          {"baseline", baseline},
          {"baseline_solution", baseline_solution},
          {"sol", std::string(name_of(sol))}};
}

BenchOptions BenchOptions::from_json(const nlohmann::json& j) {
  BenchOptions o;
  o.protocol = enum_value(j, "protocol", o.protocol);
  o.timer = enum_value(j, "timer", o.timer);
  o.warmup = j.value("warmup", o.warmup);
  o.warmup_seconds = j.value("warmup_seconds", o.warmup_seconds);
  o.iterations = j.value("iterations", o.iterations);
  o.trials = j.value("trials", o.trials);
  o.max_noise = j.value("max_noise", o.max_noise);
  o.max_seconds = j.value("max_seconds", o.max_seconds);
  o.min_samples = j.value("min_samples", o.min_samples);
  o.input_sets = j.value("input_sets", o.input_sets);
  o.state_reset = enum_value(j, "state_reset", o.state_reset);
  o.baseline = j.value("baseline", o.baseline);
  o.baseline_solution = j.value("baseline_solution", o.baseline_solution);
  o.sol = enum_value(j, "sol", o.sol);
  return o;
}

}  // namespace kharness::bench
