// Reports of a model-check verdict (include/kharness/report.hpp): the Markdown summary and the
// per-shape layer timings the HTML report draws. Both read the verdict's JSON, so a verdict
// written by `model-check --json` can be rendered again later.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "../core/json_util.hpp"
#include "kharness/report.hpp"

namespace kharness::report {
namespace {

using json_util::join_path;

// A deviation number: JSON has no infinity, so a NaN output's "as far off as can be" is null.
std::string deviation_number(const nlohmann::json& j, const char* key, const char* format) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "inf";
  return fmt::format(fmt::runtime(format), it->get<double>());
}

std::string ms(double seconds) { return fmt::format("{:.3f} ms", seconds * 1e3); }
std::string pct(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

// Markdown table cells hold no '|' or line break.
std::string cell(std::string s) {
  for (auto& c : s)
    if (c == '|' || c == '\n' || c == '\r') c = ' ';
  return s;
}

double number(const nlohmann::json& j, const char* key, const std::string& source,
              const std::string& path) {
  return json_util::as_number(json_util::require(j, key, source, path), source,
                              join_path(path, key));
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& source,
                         const std::string& path) {
  return json_util::as_string(json_util::require(j, key, source, path), source,
                              join_path(path, key));
}

const nlohmann::json& array_field(const nlohmann::json& j, const char* key,
                                  const std::string& source, const std::string& path) {
  const nlohmann::json& a = json_util::require(j, key, source, path);
  json_util::expect_type(a, a.is_array(), "an array", source, join_path(path, key));
  return a;
}

}  // namespace

std::vector<HtmlLayerTiming> layer_timings(const nlohmann::json& verdict,
                                           const std::string& source) {
  json_util::require_object(verdict, source, "");
  const std::string model = string_field(verdict, "model", source, "");
  std::vector<HtmlLayerTiming> out;
  const nlohmann::json& shapes = array_field(verdict, "shapes", source, "");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string path = json_util::index_path("shapes", i);
    json_util::require_object(shapes[i], source, path);
    auto t = shapes[i].find("timing");
    if (t == shapes[i].end()) continue;
    const std::string tpath = join_path(path, "timing");
    json_util::require_object(*t, source, tpath);
    HtmlLayerTiming layer;
    layer.title = model + " " + string_field(shapes[i], "shape", source, path);
    layer.baseline_span = number(*t, "baseline_seconds", source, tpath);
    layer.span = number(*t, "seconds", source, tpath);
    const nlohmann::json& nodes = array_field(*t, "nodes", source, tpath);
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const std::string npath = json_util::index_path(join_path(tpath, "nodes"), n);
      json_util::require_object(nodes[n], source, npath);
      HtmlLayerTiming::Node node;
      node.name = string_field(nodes[n], "node", source, npath);
      node.definition = string_field(nodes[n], "definition", source, npath);
      const nlohmann::json& sub = json_util::require(nodes[n], "substituted", source, npath);
      json_util::expect_type(sub, sub.is_boolean(), "true or false", source,
                             join_path(npath, "substituted"));
      node.substituted = sub.get<bool>();
      node.baseline_seconds = number(nodes[n], "baseline_seconds", source, npath);
      node.seconds = number(nodes[n], "seconds", source, npath);
      layer.nodes.push_back(node);
    }
    out.push_back(std::move(layer));
  }
  return out;
}

std::string model_markdown(const nlohmann::json& verdict, const std::string& source) {
  json_util::require_object(verdict, source, "");
  const std::string model = string_field(verdict, "model", source, "");
  const std::string phase = string_field(verdict, "phase", source, "");
  const bool passed = json_util::require(verdict, "passed", source, "").is_boolean() &&
                      verdict["passed"].get<bool>();
  // The status says how it failed (a drift, or a crash or hang inside the layer).
  std::string outcome = passed ? "PASSED" : "FAILED";
  if (auto status = verdict.find("status");
      !passed && status != verdict.end() && status->is_string())
    outcome += " (" + cell(status->get<std::string>()) + ")";
  std::string out = fmt::format("## model-check {} {}: {}\n\n", model, phase, outcome);
  if (auto layers = verdict.find("layers"); layers != verdict.end() && layers->is_number())
    out += fmt::format("{} layers. ", layers->get<int>());
  if (auto tol = verdict.find("tolerance"); tol != verdict.end() && tol->is_object()) {
    out += fmt::format(
        "Tolerance on the hidden state: max_rel_error {}, min cosine {}, "
        "max |bias| {}.\n\n",
        tol->value("max_rel_error", 0.0), tol->value("min_cosine", 0.0),
        tol->value("max_bias", 0.0));
  }
  if (auto err = verdict.find("error"); err != verdict.end() && err->is_string())
    out += "**Error:** " + cell(err->get<std::string>()) + "\n\n";
  if (auto sol = verdict.find("solutions"); sol != verdict.end() && sol->is_object()) {
    std::vector<std::string> substituted;
    for (auto it = sol->begin(); it != sol->end(); ++it)
      if (it->is_string() && it->get<std::string>() != "reference")
        substituted.push_back(fmt::format("`{}` = `{}`", it.key(), it->get<std::string>()));
    if (!substituted.empty()) {
      out += "Solutions run in the substituted pass (the rest: references):\n\n";
      for (const auto& s : substituted) out += "- " + cell(s) + "\n";
      out += "\n";
    }
  }

  const nlohmann::json& shapes = array_field(verdict, "shapes", source, "");
  out += "| shape | result | max_rel_error | cosine | bias | failure |\n";
  out += "|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string path = json_util::index_path("shapes", i);
    const nlohmann::json& s = json_util::require_object(shapes[i], source, path);
    const std::string label = string_field(s, "shape", source, path);
    const bool ok = s.value("passed", false);
    std::string rel = "-", cos = "-", bias = "-";
    if (auto l = s.find("layers"); l != s.end() && l->is_array() && !l->empty()) {
      const nlohmann::json& last = l->back();
      rel = deviation_number(last, "max_rel_error", "{:.3g}");
      cos = deviation_number(last, "cosine", "{:.6f}");
      bias = deviation_number(last, "bias", "{:+.3g}");
    }
    std::string failure;
    if (auto f = s.find("failure"); f != s.end() && f->is_object()) {
      failure = fmt::format("node `{}` ({}) in layer {}: {}", f->value("node", std::string()),
                            f->value("definition", std::string()), f->value("layer", -1),
                            f->value("reason", std::string()));
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", cell(label), ok ? "ok" : "FAILED", rel,
                       cos, bias, cell(failure));
  }

  for (const auto& layer : layer_timings(verdict, source)) {
    out += fmt::format("\n### Layer time: {}\n\n", layer.title);
    const nlohmann::json* t = nullptr;
    for (const auto& s : shapes)
      if (model + " " + s.value("shape", std::string()) == layer.title && s.contains("timing"))
        t = &s["timing"];
    const double speedup = layer.span > 0 ? layer.baseline_span / layer.span : 0.0;
    out += fmt::format("Baseline layer {}, substituted layer {}: **{:.3f}x**",
                       ms(layer.baseline_span), ms(layer.span), speedup);
    if (t) out += fmt::format(" (median of {} passes each)", t->value("passes", 0));
    out += ".\n\n";
    out +=
        "| node | definition | baseline | substituted | kernel speedup | share before | "
        "share after |\n";
    out += "|---|---|---|---|---|---|---|\n";
    double base_sum = 0, sum = 0;
    for (const auto& n : layer.nodes) {
      base_sum += n.baseline_seconds;
      sum += n.seconds;
      out +=
          fmt::format("| {}{} | {} | {} | {} | {} | {} | {} |\n", cell(n.name),
                      n.substituted ? " (substituted)" : "", cell(n.definition),
                      ms(n.baseline_seconds), ms(n.seconds),
                      n.seconds > 0 ? fmt::format("{:.2f}x", n.baseline_seconds / n.seconds) : "-",
                      pct(layer.baseline_span > 0 ? n.baseline_seconds / layer.baseline_span : 0),
                      pct(layer.span > 0 ? n.seconds / layer.span : 0));
    }
    const bool match = t && t->value("sums_match", false);
    out += fmt::format(
        "\nNode times sum to {} of the baseline span and {} of the substituted span: {}.\n",
        pct(layer.baseline_span > 0 ? base_sum / layer.baseline_span : 0),
        pct(layer.span > 0 ? sum / layer.span : 0),
        match ? "within 5%" : "**not within 5%** (gaps between kernels, or noisy passes)");
  }
  return out;
}

}  // namespace kharness::report
