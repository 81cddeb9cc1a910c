// The model-check verdict as JSON, both ways: the worker writes it (and each shape as it ends),
// the parent reads it back (kharness/model_check.hpp). Non-finite numbers (a NaN hidden state's
// deviation, the noise of too few passes) are written as null, as nlohmann writes them, and read
// back as the value they stood for.
#include <cmath>
#include <limits>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"

namespace kharness::model {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

// `key` of `j` as a number; null (a non-finite value as written) is `if_null`.
double number(const json& j, const char* key, double if_null) {
  const json& v = j.at(key);
  return v.is_null() ? if_null : v.get<double>();
}

json to_json(const Deviation& d) {
  return {{"max_rel_error", d.max_rel_error}, {"cosine", d.cosine}, {"bias", d.bias}};
}

Deviation deviation_from_json(const json& j) {
  return {number(j, "max_rel_error", kInf), number(j, "cosine", -1.0), number(j, "bias", kInf)};
}

LayerTiming timing_from_json(const json& j) {
  LayerTiming t;
  t.passes = j.at("passes").get<int>();
  t.baseline_seconds = j.at("baseline_seconds").get<double>();
  t.seconds = j.at("seconds").get<double>();
  t.speedup = j.at("speedup").get<double>();
  t.noise = j.contains("noise") ? number(j, "noise", kInf) : 0.0;
  t.baseline_node_sum = j.at("baseline_node_sum").get<double>();
  t.node_sum = j.at("node_sum").get<double>();
  t.sums_match = j.at("sums_match").get<bool>();
  for (const auto& n : j.at("nodes")) {
    NodeTiming nt;
    nt.node = n.at("node").get<std::string>();
    nt.definition = n.at("definition").get<std::string>();
    nt.substituted = n.at("substituted").get<bool>();
    nt.baseline_seconds = n.at("baseline_seconds").get<double>();
    nt.seconds = n.at("seconds").get<double>();
    nt.speedup = n.at("speedup").get<double>();
    nt.baseline_share = n.at("baseline_share").get<double>();
    nt.share = n.at("share").get<double>();
    t.nodes.push_back(std::move(nt));
  }
  return t;
}

ShapeResult shape_from(const json& js) {
  ShapeResult s;
  s.label = js.at("shape").get<std::string>();
  s.passed = js.at("passed").get<bool>();
  for (const auto& l : js.at("layers"))
    s.layers.push_back({l.at("layer").get<int>(), deviation_from_json(l)});
  for (const auto& n : js.at("nodes")) {
    NodeDeviation d;
    d.layer = n.at("layer").get<int>();
    d.node = n.at("node").get<std::string>();
    d.definition = n.at("definition").get<std::string>();
    d.worst = deviation_from_json(n);
    d.own_failure = n.value("own_check", "");
    s.nodes.push_back(std::move(d));
  }
  if (auto t = js.find("timing"); t != js.end()) s.timing = timing_from_json(*t);
  if (auto f = js.find("failure"); f != js.end()) {
    s.failing_layer = f->at("layer").get<int>();
    s.failing_node = f->at("node").get<std::string>();
    s.failing_definition = f->at("definition").get<std::string>();
    s.reason = f->at("reason").get<std::string>();
  }
  return s;
}

}  // namespace

json to_json(const LayerTiming& t) {
  json j;
  j["passes"] = t.passes;
  j["baseline_seconds"] = t.baseline_seconds;
  j["seconds"] = t.seconds;
  j["speedup"] = t.speedup;
  j["noise"] = t.noise;
  j["baseline_node_sum"] = t.baseline_node_sum;
  j["node_sum"] = t.node_sum;
  j["sums_match"] = t.sums_match;
  j["nodes"] = json::array();
  for (const auto& n : t.nodes) {
    j["nodes"].push_back({{"node", n.node},
                          {"definition", n.definition},
                          {"substituted", n.substituted},
                          {"baseline_seconds", n.baseline_seconds},
                          {"seconds", n.seconds},
                          {"speedup", n.speedup},
                          {"baseline_share", n.baseline_share},
                          {"share", n.share}});
  }
  return j;
}

json to_json(const ShapeResult& s) {
  json js;
  js["shape"] = s.label;
  js["passed"] = s.passed;
  js["layers"] = json::array();
  for (const auto& l : s.layers) {
    json jl = to_json(l.hidden);
    jl["layer"] = l.layer;
    js["layers"].push_back(jl);
  }
  js["nodes"] = json::array();
  for (const auto& n : s.nodes) {
    json jn = to_json(n.worst);
    jn["layer"] = n.layer;
    jn["node"] = n.node;
    jn["definition"] = n.definition;
    if (!n.own_failure.empty()) jn["own_check"] = n.own_failure;
    js["nodes"].push_back(jn);
  }
  if (s.timing) js["timing"] = to_json(*s.timing);
  if (!s.passed) {
    js["failure"] = {{"layer", s.failing_layer},
                     {"node", s.failing_node},
                     {"definition", s.failing_definition},
                     {"reason", s.reason}};
  }
  return js;
}

json to_json(const CheckResult& r) {
  json j;
  j["model"] = r.model;
  j["phase"] = r.phase;
  j["layers"] = r.layers;
  j["passed"] = r.passed;
  j["status"] = std::string(status_name(r.status));
  j["tolerance"] = {{"max_rel_error", r.tolerance.max_rel_error},
                    {"min_cosine", r.tolerance.min_cosine},
                    {"max_bias", r.tolerance.max_bias}};
  j["solutions"] = r.solutions;
  if (!r.error.empty()) j["error"] = r.error;
  j["shapes"] = json::array();
  for (const auto& s : r.shapes) j["shapes"].push_back(to_json(s));
  return j;
}

ShapeResult shape_result_from_json(const json& j) {
  json_util::require_object(j, "model-check shape", "");
  return json_util::reading("model-check shape", [&] { return shape_from(j); });
}

CheckResult check_result_from_json(const json& j) {
  const std::string source = "model-check verdict";
  json_util::require_object(j, source, "");
  return json_util::reading(source, [&] {
    CheckResult r;
    r.model = j.at("model").get<std::string>();
    r.phase = j.at("phase").get<std::string>();
    r.layers = j.at("layers").get<int>();
    r.passed = j.at("passed").get<bool>();
    const std::string status = j.value("status", r.passed ? "PASSED" : "INCORRECT_NUMERICAL");
    const std::optional<Status> parsed = parse_status(status);
    if (!parsed) throw input_error(json_util::field(source, "status"), "unknown status " + status);
    r.status = *parsed;
    const json& tol = j.at("tolerance");
    r.tolerance.max_rel_error = tol.at("max_rel_error").get<double>();
    r.tolerance.min_cosine = tol.at("min_cosine").get<double>();
    r.tolerance.max_bias = tol.at("max_bias").get<double>();
    r.solutions = j.at("solutions").get<std::map<std::string, std::string>>();
    r.error = j.value("error", "");
    for (const auto& s : j.at("shapes")) r.shapes.push_back(shape_from(s));
    return r;
  });
}

}  // namespace kharness::model
