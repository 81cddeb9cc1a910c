#include "kharness/verdict.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

using nlohmann::json;

json optional_failure(const std::optional<Failure>& f) { return f ? to_json(*f) : json(nullptr); }

Status status_from(const json& j, const char* field) {
  auto s = parse_status(j.at(field).get<std::string>());
  if (!s)
    throw std::runtime_error(fmt::format("unknown status '{}'", j.at(field).get<std::string>()));
  return *s;
}

// The member `key` of `j`, which must be of type `type` (or absent or null: `fallback`). A
// verdict read back from a file may have been edited: a "score" that is a string would otherwise
// throw far from here (in a report), as an internal error.
json member(const json& j, const char* key, json::value_t type, json fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->type() != type)
    throw std::runtime_error(fmt::format("'{}' is {} {}, expected {}", key,
                                         it->is_object() || it->is_array() ? "an" : "a",
                                         it->type_name(), json(type).type_name()));
  return *it;
}

json object_member(const json& j, const char* key) {
  return member(j, key, json::value_t::object, json::object());
}
json array_member(const json& j, const char* key) {
  return member(j, key, json::value_t::array, json::array());
}

std::optional<Failure> failure_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  Failure f;
  f.kind = j.at("kind").get<std::string>();
  f.message = j.value("message", "");
  f.evidence = j.value("evidence", json::object());
  return f;
}

// JSON has no NaN or infinity: write them as strings so the verdict stays valid JSON.
json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_string()) {
    std::string s = it->get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return it->get<double>();
}

Comparison comparison_from(const json& j) {
  Comparison c;
  c.tensor = j.at("tensor").get<std::string>();
  c.elements = json_util::whole_or(j, "elements", 0ull);
  c.mismatches = json_util::whole_or(j, "mismatches", 0ull);
  c.max_abs_error = number_from(j, "max_abs_error", 0.0);
  c.max_rel_error = number_from(j, "max_rel_error", 0.0);
  c.matched_ratio = j.value("matched_ratio", 1.0);
  c.first_bad_index = j.value("first_bad_index", -1ll);
  c.expected = number_from(j, "expected", 0.0);
  c.got = number_from(j, "got", 0.0);
  return c;
}

}  // namespace

const WorkloadVerdict* Verdict::first_suspect() const {
  for (const auto& w : workloads) {
    if (w.suspect) return &w;
  }
  return nullptr;
}

json to_json(const Failure& f) {
  return {{"kind", f.kind}, {"message", f.message}, {"evidence", f.evidence}};
}

json to_json(const Comparison& c) {
  return {{"tensor", c.tensor},
          {"elements", c.elements},
          {"mismatches", c.mismatches},
          {"max_abs_error", number(c.max_abs_error)},
          {"max_rel_error", number(c.max_rel_error)},
          {"matched_ratio", c.matched_ratio},
          {"first_bad_index", c.first_bad_index},
          {"expected", number(c.expected)},
          {"got", number(c.got)}};
}

json to_json(const WorkloadVerdict& w) {
  json trials = json::array();
  for (const auto& t : w.trials) {
    json comparisons = json::array();
    for (const auto& c : t.comparisons) comparisons.push_back(to_json(c));
    trials.push_back({{"seed", t.seed},
                      {"status", std::string(status_name(t.status))},
                      {"failure", optional_failure(t.failure)},
                      {"comparisons", comparisons},
                      {"bitwise_deterministic", t.bitwise_deterministic},
                      {"seconds", t.seconds}});
  }
  json out = {{"uuid", w.uuid},
              {"axes", w.axes},
              {"status", std::string(status_name(w.status))},
              {"failure", optional_failure(w.failure)},
              {"suspect", optional_failure(w.suspect)},
              {"trials", trials},
              {"timing", to_json(w.timing)}};
  // Only a dispatching plan's workloads name a variant: the record of a plain plan is unchanged.
  if (!w.variant.empty()) out["variant"] = w.variant;
  return out;
}

json to_json(const Verdict& v) {
  json workloads = json::array();
  for (const auto& w : v.workloads) workloads.push_back(to_json(w));
  return {{"schema", "kharness.verdict/1"},
          {"solution", v.solution},
          {"source", v.source},
          {"definition", v.definition},
          {"status", std::string(status_name(v.status))},
          {"failure", optional_failure(v.failure)},
          {"suspect", v.suspect.empty() ? json(nullptr) : json(v.suspect)},
          {"seed", v.seed},
          {"seconds", v.seconds},
          {"workloads", workloads},
          {"worker_stderr", v.worker_stderr},
          {"worker_stderr_truncated", v.worker_stderr_truncated},
          {"phases", v.phases},
          {"score", to_json(v.score)},
          {"compile", v.compile},
          {"environment", v.environment}};
}

WorkloadVerdict workload_verdict_from_json(const json& wj) {
  try {
    WorkloadVerdict w;
    if (!wj.is_object()) throw std::runtime_error("a workload is not an object");
    w.uuid = wj.at("uuid").get<std::string>();
    w.axes = object_member(wj, "axes");
    if (auto it = wj.find("variant"); it != wj.end() && it->is_string()) {
      w.variant = it->get<std::string>();
    }
    w.status = status_from(wj, "status");
    w.failure = failure_from(wj.value("failure", json(nullptr)));
    w.suspect = failure_from(wj.value("suspect", json(nullptr)));
    w.timing = timing_from_json(object_member(wj, "timing"));
    for (const auto& tj : array_member(wj, "trials")) {
      TrialResult t;
      t.seed = json_util::whole_or(tj, "seed", 0ull);
      t.status = status_from(tj, "status");
      t.failure = failure_from(tj.value("failure", json(nullptr)));
      t.bitwise_deterministic = tj.value("bitwise_deterministic", true);
      t.seconds = tj.value("seconds", 0.0);
      for (const auto& cj : array_member(tj, "comparisons"))
        t.comparisons.push_back(comparison_from(cj));
      w.trials.push_back(std::move(t));
    }
    return w;
  } catch (const nlohmann::json::exception&) {  // its words name no field: not quoted
    throw Error(ExitCode::kInternal, "worker verdict",
                "not a workload verdict: a field of a workload has the wrong type");
  } catch (const std::exception& e) {
    throw Error(ExitCode::kInternal, "worker verdict",
                fmt::format("not a workload verdict: {}", e.what()));
  }
}

Verdict verdict_from_json(const json& j) {
  try {
    Verdict v;
    if (!j.is_object()) throw std::runtime_error(fmt::format("{} is not an object", j.type_name()));
    v.solution = j.value("solution", "");
    v.source = j.value("source", "");
    v.definition = j.value("definition", "");
    v.status = status_from(j, "status");
    v.failure = failure_from(j.value("failure", json(nullptr)));
    if (auto s = j.find("suspect"); s != j.end() && !s->is_null())
      v.suspect = s->get<std::string>();
    v.seed = json_util::whole_or(j, "seed", 0ull);
    v.seconds = j.value("seconds", 0.0);
    v.worker_stderr = j.value("worker_stderr", "");
    v.worker_stderr_truncated = j.value("worker_stderr_truncated", false);
    v.compile = object_member(j, "compile");
    v.environment = object_member(j, "environment");
    const json phases = object_member(j, "phases");
    for (auto it = phases.begin(); it != phases.end(); ++it) {
      if (it->is_number()) v.phases[it.key()] = it->get<double>();
    }
    const json score = object_member(j, "score");
    for (auto it = score.begin(); it != score.end(); ++it) {
      const json& x = it.value();
      // One text field: what the speedups are over (a baseline other than the operator's).
      bool ok = x.is_number() || x.is_null() || x.is_boolean() || x.is_object() || x.is_array() ||
                x == "nan" || x == "inf" || x == "-inf" ||
                (it.key() == "speedups_over" && x.is_string());
      if (!ok) throw std::runtime_error(fmt::format("'score.{}' is not a number", it.key()));
    }
    v.score = score_from_json(score);
    for (const auto& wj : array_member(j, "workloads"))
      v.workloads.push_back(workload_verdict_from_json(wj));
    return v;
  } catch (const nlohmann::json::exception&) {  // its words name no field: not quoted
    throw Error(ExitCode::kInternal, "worker verdict", "not a verdict: a field has the wrong type");
  } catch (const std::exception& e) {
    throw Error(ExitCode::kInternal, "worker verdict", fmt::format("not a verdict: {}", e.what()));
  }
}

Verdict verdict_from_json(const json& j, const std::string& source) {
  // A top-level field of the wrong type is named, as the verdict's own writer types it.
  static const json kReference = to_json(Verdict{});
  json_util::expect_types_like(j, kReference, source);
  try {
    return verdict_from_json(j);
  } catch (const Error& e) {
    std::string what = e.what();  // "not a verdict: ..."
    throw input_error(source, printable_line(bounded(what, 300)));
  }
}

}  // namespace kharness
