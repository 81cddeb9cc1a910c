#include "kharness/timing.hpp"

#include <cmath>
#include <limits>
#include <utility>

#include "core/enum_names.hpp"
#include "core/json_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// ---- enum names (core/enum_names.hpp) ----

template <class E>
std::string_view lookup_name(E value) {
  for (const auto& [e, name] : enum_names<E>()) {
    if (e == value) return name;
  }
  return enum_names<E>()[0].second;
}

// ---- numbers ----

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A number as a verdict writes it: null (a non-finite statistic) and "nan"/"inf"/"-inf" are read
// back as the values they stand for.
double number_from(const json& j) {
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    return std::numeric_limits<double>::quiet_NaN();
  }
  return j.get<double>();
}

double number_at(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it == j.end() ? fallback : number_from(*it);
}

std::optional<double> optional_number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  return number_from(*it);
}

template <class T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

void put(json& j, const char* key, const std::string& v) {
  if (!v.empty()) j[key] = v;
}

template <class E>
std::optional<E> optional_enum(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return parse_enum<E>(it->get<std::string>());
}

// ---- parts ----

json to_json(const TimingIntegrity& i) {
  json j = {{"checked_iterations", i.checked_iterations},
            {"check", i.check},
            {"module_globals", i.module_globals},
            {"state_reset", i.state_reset}};
  if (i.fresh_inputs > 0) j["fresh_inputs"] = i.fresh_inputs;
  if (!i.truth.empty()) j["truth"] = i.truth;
  if (!i.point.empty()) {
    j["point"] = i.point;
    j["rows_checked"] = i.rows_checked;
  }
  put(j, "miss_probability_1pct", i.miss_probability_1pct);
  if (!i.fixed_inputs.empty()) j["fixed_inputs"] = i.fixed_inputs;
  return j;
}

TimingIntegrity timing_integrity_from_json(const json& j) {
  TimingIntegrity i;
  i.checked_iterations = json_util::whole_or(j, "checked_iterations", std::uint64_t{0});
  i.check = j.value("check", "");
  i.module_globals = json_util::whole_or(j, "module_globals", std::size_t{0});
  i.state_reset = j.value("state_reset", "");
  i.fresh_inputs = json_util::whole_or(j, "fresh_inputs", std::uint64_t{0});
  i.truth = j.value("truth", "");
  i.point = j.value("point", "");
  i.rows_checked = json_util::whole_or(j, "rows_checked", std::uint64_t{0});
  if (auto it = j.find("miss_probability_1pct"); it != j.end() && it->is_number())
    i.miss_probability_1pct = it->get<double>();
  if (auto it = j.find("fixed_inputs"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_string()) i.fixed_inputs.push_back(v.get<std::string>());
    }
  }
  return i;
}

json to_json(const ContenderTiming& c) {
  json j = to_json(c.stats);
  put(j, "official_latency", c.official_latency);
  j["latency"] = c.latency;
  if (c.stop_reason) j["stop_reason"] = std::string(name_of(*c.stop_reason));
  j["clock_flagged_samples"] = c.clock_flagged_samples;
  put(j, "clock_note", c.clock_note);
  j["kernels"] = c.kernels;
  put(j, "solution", c.solution);
  if (c.integrity) j["integrity"] = to_json(*c.integrity);
  return j;
}

ContenderTiming contender_from_json(const json& j) {
  ContenderTiming c;
  c.stats = latency_stats_from_json(j);
  c.latency = number_at(j, "latency", 0.0);
  c.official_latency = optional_number(j, "official_latency");
  c.stop_reason = optional_enum<StopReason>(j, "stop_reason");
  c.clock_flagged_samples = json_util::whole_or(j, "clock_flagged_samples", 0);
  c.clock_note = j.value("clock_note", "");
  c.kernels = j.value("kernels", "");
  c.solution = j.value("solution", "");
  if (auto it = j.find("integrity"); it != j.end() && it->is_object())
    c.integrity = timing_integrity_from_json(*it);
  return c;
}

json to_json(const TimingPhases& p) {
  json j = json::object();
  for (const auto& [phase, seconds] : p.seconds) j[phase] = seconds;
  j["harvests"] = p.harvests;
  j["rounds"] = p.rounds;
  return j;
}

TimingPhases timing_phases_from_json(const json& j) {
  TimingPhases p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "harvests") {
      p.harvests = it->get<std::uint64_t>();
    } else if (it.key() == "rounds") {
      p.rounds = it->get<std::uint64_t>();
    } else {
      p.seconds[it.key()] = number_from(*it);
    }
  }
  return p;
}

json to_json(const SolResult& s) {
  std::string ceilings(name_of(s.ceilings));
  if (s.ceilings == SolSource::kMeasured && !s.measured_at.empty()) ceilings += " " + s.measured_at;
  return {{"seconds", s.seconds},
          {"bound", s.bound},
          {"fraction", s.fraction},
          {"gpu", s.gpu},
          {"ceilings", ceilings}};
}

SolResult sol_from_json(const json& j) {
  SolResult s;
  s.seconds = number_at(j, "seconds", 0.0);
  s.bound = j.value("bound", "");
  s.fraction = number_at(j, "fraction", 0.0);
  s.gpu = j.value("gpu", "");
  const std::string ceilings = j.value("ceilings", "datasheet");
  const std::string measured(name_of(SolSource::kMeasured));
  if (ceilings.rfind(measured, 0) == 0) {
    s.ceilings = SolSource::kMeasured;
    s.measured_at = ceilings.size() > measured.size() ? ceilings.substr(measured.size() + 1) : "";
  }
  return s;
}

json to_json(const ScoreIntegrity& i) {
  return {{"checked_iterations", i.checked_iterations},
          {"every_iteration_checked", i.every_iteration_checked},
          {"fewest_input_sets", i.fewest_input_sets},
          {"guarantees", i.guarantees}};
}

ScoreIntegrity score_integrity_from_json(const json& j) {
  ScoreIntegrity i;
  i.checked_iterations = json_util::whole_or(j, "checked_iterations", std::uint64_t{0});
  i.every_iteration_checked = j.value("every_iteration_checked", true);
  i.fewest_input_sets = json_util::whole_or(j, "fewest_input_sets", 0);
  i.guarantees = j.value("guarantees", "");
  return i;
}

}  // namespace

std::string_view name_of(Protocol value) { return lookup_name(value); }
std::string_view name_of(Timer value) { return lookup_name(value); }
std::string_view name_of(SolSource value) { return lookup_name(value); }
std::string_view name_of(StateReset value) { return lookup_name(value); }
std::string_view name_of(Mode value) { return lookup_name(value); }
std::string_view name_of(StopReason value) { return lookup_name(value); }

template <class E>
std::optional<E> parse_enum(std::string_view name) {
  for (const auto& [e, n] : enum_names<E>()) {
    if (n == name) return e;
  }
  return std::nullopt;
}

template std::optional<Protocol> parse_enum<Protocol>(std::string_view);
template std::optional<Timer> parse_enum<Timer>(std::string_view);
template std::optional<SolSource> parse_enum<SolSource>(std::string_view);
template std::optional<StateReset> parse_enum<StateReset>(std::string_view);
template std::optional<Mode> parse_enum<Mode>(std::string_view);
template std::optional<StopReason> parse_enum<StopReason>(std::string_view);

json to_json(const LatencyStats& s) {
  return {{"count", s.count},
          {"median", finite_or_null(s.median)},
          {"mean", finite_or_null(s.mean)},
          {"min", finite_or_null(s.min)},
          {"max", finite_or_null(s.max)},
          {"p10", finite_or_null(s.p10)},
          {"p90", finite_or_null(s.p90)},
          {"stdev", finite_or_null(s.stdev)},
          {"cv", finite_or_null(s.cv)},
          {"noise", finite_or_null(s.noise)},
          {"noise_met", s.noise_met}};
}

LatencyStats latency_stats_from_json(const json& j) {
  LatencyStats s;
  s.count = json_util::whole_or(j, "count", std::size_t{0});
  s.median = number_at(j, "median", s.median);
  s.mean = number_at(j, "mean", s.mean);
  s.min = number_at(j, "min", s.min);
  s.max = number_at(j, "max", s.max);
  s.p10 = number_at(j, "p10", s.p10);
  s.p90 = number_at(j, "p90", s.p90);
  s.stdev = number_at(j, "stdev", s.stdev);
  s.cv = number_at(j, "cv", s.cv);
  s.noise = number_at(j, "noise", s.noise);
  s.noise_met = j.value("noise_met", false);
  return s;
}

json to_json(const TimingResult& t) {
  json j = json::object();
  if (t.protocol) j["protocol"] = std::string(name_of(*t.protocol));
  if (t.timer) j["timer"] = std::string(name_of(*t.timer));
  put(j, "input_sets", t.input_sets);
  put(j, "input_sets_note", t.input_sets_note);
  if (t.candidate) j["candidate"] = to_json(*t.candidate);
  if (t.baseline) j["baseline"] = to_json(*t.baseline);
  put(j, "baseline_unavailable", t.baseline_unavailable);
  put(j, "speedup", t.speedup);
  put(j, "speedup_vs_incumbent", t.speedup_vs_incumbent);
  if (t.phases) j["phases"] = to_json(*t.phases);
  put(j, "seconds", t.seconds);
  if (t.sol) j["sol"] = to_json(*t.sol);
  if (!t.lower_bound.is_null()) j["lower_bound"] = t.lower_bound;
  return j;
}

TimingResult timing_from_json(const json& j) {
  TimingResult t;
  if (!j.is_object()) return t;
  t.protocol = optional_enum<Protocol>(j, "protocol");
  t.timer = optional_enum<Timer>(j, "timer");
  if (auto it = j.find("input_sets"); it != j.end()) t.input_sets = it->get<int>();
  t.input_sets_note = j.value("input_sets_note", "");
  auto contender = [&](const char* key) -> std::optional<ContenderTiming> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_object()) return std::nullopt;
    return contender_from_json(*it);
  };
  t.candidate = contender("candidate");
  t.baseline = contender("baseline");
  t.baseline_unavailable = j.value("baseline_unavailable", "");
  t.speedup = optional_number(j, "speedup");
  t.speedup_vs_incumbent = optional_number(j, "speedup_vs_incumbent");
  if (auto it = j.find("phases"); it != j.end() && it->is_object())
    t.phases = timing_phases_from_json(*it);
  t.seconds = optional_number(j, "seconds");
  if (auto it = j.find("sol"); it != j.end() && it->is_object()) t.sol = sol_from_json(*it);
  t.lower_bound = j.value("lower_bound", json(nullptr));
  return t;
}

json to_json(const Score& s) {
  json j = json::object();
  put(j, "mean_speedup", s.mean_speedup);
  put(j, "geomean_speedup", s.geomean_speedup);
  if (s.fast_p) j["fast_p"] = *s.fast_p;
  put(j, "mean_sol_fraction", s.mean_sol_fraction);
  put(j, "workloads_timed", s.workloads_timed);
  if (s.integrity) j["integrity"] = to_json(*s.integrity);
  put(j, "speedups_over", s.speedups_over);
  if (!s.holdout.is_null()) j["holdout"] = s.holdout;
  return j;
}

Score score_from_json(const json& j) {
  Score s;
  if (!j.is_object()) return s;
  s.mean_speedup = optional_number(j, "mean_speedup");
  s.geomean_speedup = optional_number(j, "geomean_speedup");
  if (auto it = j.find("fast_p"); it != j.end() && it->is_object()) {
    s.fast_p.emplace();
    for (auto f = it->begin(); f != it->end(); ++f) (*s.fast_p)[f.key()] = number_from(*f);
  }
  s.mean_sol_fraction = optional_number(j, "mean_sol_fraction");
  if (auto it = j.find("workloads_timed"); it != j.end() && !it->is_null())
    s.workloads_timed = it->get<std::size_t>();
  if (auto it = j.find("integrity"); it != j.end() && it->is_object())
    s.integrity = score_integrity_from_json(*it);
  s.speedups_over = j.value("speedups_over", "");
  s.holdout = j.value("holdout", json(nullptr));
  return s;
}

}  // namespace kharness
