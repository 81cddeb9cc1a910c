#include "controller/model_gate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "kharness/text.hpp"

namespace kharness::controller {

using nlohmann::json;

std::string_view objective_name(Objective objective) {
  return objective == Objective::kLayer ? "layer" : "kernel";
}

std::optional<Objective> parse_objective(std::string_view name) {
  if (name == "kernel") return Objective::kKernel;
  if (name == "layer") return Objective::kLayer;
  return std::nullopt;
}

json to_json(const ModelVerdict& v) {
  json j = {{"model", v.model},
            {"phase", v.phase},
            {"layers", v.layers},
            {"passed", v.passed},
            {"status", v.status},
            {"reason", v.reason},
            {"layer_noise", v.layer_noise},
            {"nodes", v.nodes}};
  j["layer_speedup"] = v.layer_speedup ? json(*v.layer_speedup) : json(nullptr);
  j["share"] = v.share ? json(*v.share) : json(nullptr);
  j["share_min"] = v.share_min;
  j["share_max"] = v.share_max;
  return j;
}

ModelVerdict model_verdict_from_json(const json& j, const std::string& source) {
  json_util::require_object(j, source, "");
  return json_util::reading(source, [&] {
    ModelVerdict v;
    v.model = j.value("model", "");
    v.phase = j.value("phase", "");
    v.layers = j.value("layers", 0);
    v.passed = j.at("passed").get<bool>();
    v.status = j.value("status", "");
    v.reason = j.value("reason", "");
    if (auto s = j.find("layer_speedup"); s != j.end() && s->is_number())
      v.layer_speedup = s->get<double>();
    // null: a noise that was not finite (too few timed passes).
    const json noise = j.value("layer_noise", json(0.0));
    v.layer_noise = noise.is_number() ? noise.get<double>() : INFINITY;
    if (auto s = j.find("share"); s != j.end() && s->is_number()) v.share = s->get<double>();
    v.share_min = j.value("share_min", 0.0);
    v.share_max = j.value("share_max", 0.0);
    v.nodes = j.value("nodes", std::vector<std::string>{});
    return v;
  });
}

ModelVerdict model_verdict(const model::CheckResult& r, const std::string& definition) {
  ModelVerdict v;
  v.model = r.model;
  v.phase = r.phase;
  v.layers = r.layers;
  v.passed = r.passed;
  v.status = std::string(status_name(r.status));
  v.verdict = model::to_json(r);
  if (!r.passed) {
    v.reason = r.error;
    for (const auto& s : r.shapes) {
      if (v.reason.empty() && !s.passed && !s.reason.empty())
        v.reason = fmt::format("{}: {}", s.label, s.reason);
    }
    if (v.reason.empty()) v.reason = "the model-check failed";
  }
  double speedups = 0, noise = 0, shares = 0;
  int timed = 0;
  for (const auto& s : r.shapes) {
    if (!s.timing) continue;
    double share = 0;
    for (const auto& n : s.timing->nodes) {
      if (n.definition != definition) continue;
      share += n.baseline_share;
      if (timed == 0 && std::find(v.nodes.begin(), v.nodes.end(), n.node) == v.nodes.end())
        v.nodes.push_back(n.node);
    }
    v.share_min = timed == 0 ? share : std::min(v.share_min, share);
    v.share_max = timed == 0 ? share : std::max(v.share_max, share);
    speedups += s.timing->speedup;
    noise += s.timing->noise;
    shares += share;
    ++timed;
  }
  if (timed > 0) {
    v.layer_speedup = speedups / timed;
    v.layer_noise = noise / timed;
    v.share = shares / timed;
  }
  return v;
}

std::vector<std::string> model_nodes_of(const model::Model& m, const std::string& phase,
                                        const std::string& definition) {
  if (!m.find_phase(phase)) {
    std::vector<std::string> names;
    for (const auto& p : m.phases) names.push_back(p.name);
    throw input_error("--phase", fmt::format("{} has no phase '{}' (phases: {})", m.name, phase,
                                             join(names, ", ")));
  }
  std::vector<std::string> nodes, operators;
  for (const auto& n : m.nodes) {
    if (!n.phase.empty() && n.phase != phase) continue;
    if (n.definition == definition) nodes.push_back(n.name);
    if (std::find(operators.begin(), operators.end(), n.definition) == operators.end())
      operators.push_back(n.definition);
  }
  if (nodes.empty()) {
    throw input_error("--operator",
                      fmt::format("{} is no node of {}'s {} layer (its operators: {})", definition,
                                  m.name, phase, join(operators, ", ")));
  }
  return nodes;
}

std::string model_label(const ModelGate& gate) {
  return fmt::format("{} {}, {} layer{}", gate.name, gate.phase, gate.layers,
                     gate.layers == 1 ? "" : "s");
}

}  // namespace kharness::controller
