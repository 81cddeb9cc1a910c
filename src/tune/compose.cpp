// Shape buckets and the composed (dispatching) candidate of the tune provider: one source holding
// one copy of the seed per configuration, each copy's kernels under their own extern "C" names,
// and a plan whose variants choose a copy by the workload's shape (see kharness/tune.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/tune.hpp"

namespace kharness::tune {
namespace {

namespace ju = json_util;
using nlohmann::ordered_json;

// Where the `/* kharness {...} */` comment of a single-file solution is: the offset of "/*", of
// its JSON text and one past "*/".
struct PlanComment {
  std::size_t start = 0, json = 0, end = 0;
};

PlanComment find_plan_comment(const std::string& text, const std::string& name) {
  extract_plan_comment(text, name);  // the first block comment is a valid plan, or this throws
  PlanComment c;
  for (std::size_t from = 0;; from = c.start + 2) {
    c.start = text.find("/*", from);
    if (c.start == std::string::npos) throw input_error(name, "no /* kharness */ plan comment");
    std::size_t body = text.find_first_not_of(" \t\r\n", c.start + 2);
    if (body != std::string::npos && text.compare(body, 8, "kharness") == 0) {
      c.json = body + 8;
      break;
    }
  }
  c.end = text.find("*/", c.json) + 2;
  return c;
}

ordered_json plan_of(const std::string& text, const std::string& name) {
  PlanComment c = find_plan_comment(text, name);
  return ju::parse_text<ordered_json>(text.substr(c.json, c.end - 2 - c.json), name);
}

// The size of a workload as the shape cascade orders them: the product of its var axes.
double workload_size(const Workload& w) {
  double size = 1;
  for (const auto& [name, value] : w.axes)
    size *= static_cast<double>(std::max<std::int64_t>(1, value));
  return size;
}

bool is_include_line(const std::string& line) {
  std::size_t at = line.find_first_not_of(" \t");
  if (at == std::string::npos || line[at] != '#') return false;
  at = line.find_first_not_of(" \t", at + 1);
  return at != std::string::npos && line.compare(at, 7, "include") == 0;
}

}  // namespace

std::vector<ShapeBucket> shape_buckets(const Definition& definition,
                                       const std::vector<Workload>& workloads) {
  std::vector<ShapeBucket> out;
  if (workloads.empty()) return out;
  // The var axes every workload gives, in the definition's order: the size is their product.
  std::vector<std::string> vars;
  for (const auto& a : definition.axes) {
    if (a.is_const) continue;
    bool everywhere = std::all_of(workloads.begin(), workloads.end(),
                                  [&](const Workload& w) { return w.axes.count(a.name) > 0; });
    if (everywhere) vars.push_back(a.name);
  }
  if (vars.empty()) return out;
  const std::string size_text = join(vars, " * ");

  std::vector<std::pair<std::int64_t, std::size_t>> sized;  // (size, workload index)
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    std::int64_t size = 1;
    for (const auto& v : vars) {
      std::int64_t value = std::max<std::int64_t>(1, workloads[i].axes.at(v));
      // Sizes past 2^62 cannot be written as a safe condition; one bucket then serves all.
      if (size > (std::int64_t{1} << 62) / value) return {};
      size *= value;
    }
    sized.emplace_back(size, i);
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  // The cascade's representatives: the middle workload of each third by size (every workload
  // when there are three or fewer). Ordered by workload_size, as the cascade orders them.
  std::vector<std::pair<double, std::size_t>> cascade;
  for (std::size_t i = 0; i < workloads.size(); ++i)
    cascade.emplace_back(workload_size(workloads[i]), i);
  std::stable_sort(cascade.begin(), cascade.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::size_t> reps;
  const std::size_t n = cascade.size();
  if (n <= 3) {
    for (const auto& c : cascade) reps.push_back(c.second);
  } else {
    for (std::size_t b = 0; b < 3; ++b)
      reps.push_back(cascade[(b * n / 3 + (b + 1) * n / 3) / 2].second);
  }

  // One bucket per third (per workload when there are three or fewer), bounded above by its
  // largest size; equal bounds are one bucket, and a bucket no representative falls in joins the
  // next one, so that every bucket is scored by at least one shape the cascade always measures.
  std::vector<std::int64_t> bounds;
  const std::size_t parts = std::min<std::size_t>(3, n);
  for (std::size_t b = 0; b + 1 < parts; ++b) {
    std::int64_t bound = sized[(b + 1) * n / parts - 1].first;
    if (bounds.empty() || bound > bounds.back()) bounds.push_back(bound);
  }
  if (!bounds.empty() && bounds.back() >= sized.back().first) bounds.pop_back();
  auto bucket_of = [&](std::int64_t size) {
    std::size_t b = 0;
    while (b < bounds.size() && size > bounds[b]) ++b;
    return b;
  };
  std::vector<std::int64_t> size_of(workloads.size());
  for (const auto& [size, i] : sized) size_of[i] = size;
  for (std::size_t b = 0; b < bounds.size();) {
    bool has_rep = std::any_of(reps.begin(), reps.end(),
                               [&](std::size_t r) { return bucket_of(size_of[r]) == b; });
    if (has_rep) {
      ++b;
    } else {
      bounds.erase(bounds.begin() + static_cast<std::ptrdiff_t>(b));
    }
  }
  out.resize(bounds.size() + 1);
  for (std::size_t b = 0; b < bounds.size(); ++b)
    out[b].when = fmt::format("{} <= {}", size_text, bounds[b]);
  for (const auto& [size, i] : sized) out[bucket_of(size)].workloads.push_back(workloads[i].uuid);
  for (std::size_t r : reps)
    out[bucket_of(size_of[r])].representatives.push_back(workloads[r].uuid);
  // The last bucket may still lack one (its shapes all tie with the bound below): join it.
  if (out.size() > 1 && out.back().representatives.empty()) {
    ShapeBucket last = std::move(out.back());
    out.pop_back();
    for (auto& u : last.workloads) out.back().workloads.push_back(u);
    out.back().when.clear();
  }
  return out;
}

std::string compose(const std::string& seed_text, const std::string& seed_name,
                    const TuneSpace& space, const std::vector<Config>& configs,
                    const std::vector<std::string>& conditions) {
  if (configs.empty() || configs.size() != conditions.size() || !conditions.back().empty()) {
    throw Error(ExitCode::kInternal, seed_name,
                "a composition needs one condition per configuration, the last one empty");
  }
  ordered_json seed_plan = plan_of(seed_text, seed_name);
  std::vector<std::string> kernels;  // the seed's kernel names, renamed in every copy
  for (const auto& launch : seed_plan.value("launches", ordered_json::array())) {
    if (launch.is_object() && launch.contains("kernel") && launch["kernel"].is_string()) {
      std::string k = launch["kernel"].get<std::string>();
      if (std::find(kernels.begin(), kernels.end(), k) == kernels.end()) kernels.push_back(k);
    }
  }

  ordered_json plan = seed_plan;
  plan.erase("launches");
  ordered_json variants = ordered_json::array();
  std::vector<std::string> workspace;  // each copy's workspace size, when a copy needs one
  for (std::size_t v = 0; v < configs.size(); ++v) {
    // Each copy's plan is the one `instantiate` writes for its configuration (sizes with the
    // knobs substituted), with the copy's kernel names.
    ordered_json one = plan_of(instantiate(seed_text, seed_name, space, configs[v]), seed_name);
    ordered_json launches = one.value("launches", ordered_json::array());
    for (auto& launch : launches) {
      if (launch.is_object() && launch.contains("kernel") && launch["kernel"].is_string())
        launch["kernel"] = fmt::format("{}_v{}", launch["kernel"].get<std::string>(), v);
    }
    ordered_json variant = ordered_json::object();
    if (!conditions[v].empty()) variant["when"] = conditions[v];
    variant["launches"] = launches;
    variants.push_back(variant);
    if (auto it = one.find("workspace_bytes"); it != one.end()) {
      std::string text = it->is_string() ? it->get<std::string>() : json_util::dump(*it);
      if (text != "0" && std::find(workspace.begin(), workspace.end(), text) == workspace.end())
        workspace.push_back(text);
    }
    if (v == 0) plan["compile_options"] = one.value("compile_options", ordered_json::array());
  }
  plan["variants"] = variants;
  // One workspace for the plan: the largest any copy asks for at this shape.
  if (workspace.size() == 1) plan["workspace_bytes"] = workspace[0];
  if (workspace.size() > 1) plan["workspace_bytes"] = fmt::format("max({})", join(workspace, ", "));
  // The knobs are set per copy in the source, not for the whole program on the command line.
  ordered_json options = ordered_json::array();
  for (const auto& o : plan.value("compile_options", ordered_json::array())) {
    bool knob = false;
    for (const auto& k : space.knobs) {
      if (o.is_string() && o.get<std::string>().rfind("-D" + k.name, 0) == 0) knob = true;
    }
    if (!knob) options.push_back(o);
  }
  plan["compile_options"] = options;
  std::vector<std::string> parts;
  for (std::size_t v = 0; v < configs.size(); ++v) {
    parts.push_back(fmt::format("{}: {}", conditions[v].empty() ? "otherwise" : conditions[v],
                                config_text(space, configs[v])));
  }
  plan["description"] =
      fmt::format("kharness tune: dispatch by shape ({}) (seed {})", join(parts, "; "),
                  std::filesystem::path(seed_name).filename().string());

  // The seed's text after its plan, its #include lines hoisted above the copies: a header is
  // read once, at global scope, and each copy lives in its own namespace so that its helpers
  // and constants (computed from its knobs) do not collide with the other copies'.
  PlanComment c = find_plan_comment(seed_text, seed_name);
  std::string before = seed_text.substr(0, c.start);
  std::istringstream lines(seed_text.substr(c.end));
  std::string includes, body, line;
  std::set<std::string> seen;
  while (std::getline(lines, line)) {
    if (is_include_line(line)) {
      if (seen.insert(line).second) includes += line + "\n";
    } else {
      body += line + "\n";
    }
  }
  std::string out = before + "/* kharness\n" + json_util::dump(plan, 2) + "\n*/\n";
  out += fmt::format(
      "// Composed by kharness tune from {}: one copy of the seed per shape bucket, each with its "
      "own knob values and kernel names (<kernel>_v<N>); the plan's variants choose the copy.\n",
      std::filesystem::path(seed_name).filename().string());
  out += includes;
  for (std::size_t v = 0; v < configs.size(); ++v) {
    Bindings values = knob_values(space, configs[v]);
    out += fmt::format("\n// ---- variant {} ({}): {}\n", v,
                       conditions[v].empty() ? "otherwise" : conditions[v],
                       config_text(space, configs[v]));
    for (const auto& k : space.knobs) out += fmt::format("#define {} {}\n", k.name, values[k.name]);
    for (const auto& k : kernels) out += fmt::format("#define {} {}_v{}\n", k, k, v);
    out += fmt::format("namespace kharness_variant_{} {{\n", v);
    out += body;
    out += fmt::format("}}  // namespace kharness_variant_{}\n", v);
    for (const auto& k : kernels) out += fmt::format("#undef {}\n", k);
    for (const auto& k : space.knobs) out += fmt::format("#undef {}\n", k.name);
  }
  return out;
}

}  // namespace kharness::tune
