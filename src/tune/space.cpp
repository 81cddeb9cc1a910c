// Knob spaces (tune.json): parsing, validity, enumeration and instantiation of a seed.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <set>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/family_source.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/tune.hpp"

namespace kharness::tune {
namespace {

namespace ju = json_util;
namespace fs = std::filesystem;
using nlohmann::ordered_json;

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `text` with every whole-word occurrence of a knob name replaced by its value.
std::string substitute_names(const std::string& text, const Bindings& values) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (is_word_char(text[i])) {
      std::size_t j = i;
      while (j < text.size() && is_word_char(text[j])) ++j;
      std::string word = text.substr(i, j - i);
      auto it = values.find(word);
      if (it != values.end() && !std::isdigit(static_cast<unsigned char>(word[0]))) {
        out += it->second < 0 ? fmt::format("({})", it->second) : std::to_string(it->second);
      } else {
        out += word;
      }
      i = j;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// A plan size (integer or expression string) with knobs substituted; a constant result becomes
// an integer so the emitted plan reads "block": [256, 1, 1].
ordered_json substitute_size(const ordered_json& value, const Bindings& knobs) {
  if (!value.is_string()) return value;
  std::string text = substitute_names(value.get<std::string>(), knobs);
  try {
    Expr e = Expr::parse(text);
    if (e.is_constant()) return e.eval({});
  } catch (const ExprError&) {
    // Left as text: the plan parser reports it with the file and field.
  }
  return text;
}

ordered_json substitute_dim(const ordered_json& value, const Bindings& knobs) {
  if (!value.is_array()) return substitute_size(value, knobs);
  ordered_json out = ordered_json::array();
  for (const auto& v : value) out.push_back(substitute_size(v, knobs));
  return out;
}

// A launch size of tune.json (an integer or an expression; a dimension may be a list of 1 to 3):
// its syntax is checked here, so an error names tune.json and not the instantiated seed.
void check_size(const ordered_json& value, bool dim, const std::string& source,
                const std::string& path) {
  if (dim && value.is_array()) {
    if (value.empty() || value.size() > 3) {
      throw input_error(ju::field(source, path),
                        fmt::format("expected 1 to 3 values, got {}", value.size()));
    }
    for (std::size_t i = 0; i < value.size(); ++i)
      check_size(value[i], false, source, ju::index_path(path, i));
    return;
  }
  if (value.is_number_integer()) {
    ju::as_int(value, source, path);
    return;
  }
  ju::expect_type(value, value.is_string(), "an integer or an expression string", source, path);
  try {
    Expr::parse(value.get<std::string>());
  } catch (const ExprError& e) {
    throw input_error(ju::field(source, path), e.what());
  }
}

// The sizes of a tensor map a tune.json launch may set per knob configuration: {"a_map":
// {"box": ["BM", 64]}} is merged into the seed's map of that name (tensor_map.hpp).
constexpr const char* kTensorMapSizeFields[] = {"box", "shape", "strides", "element_strides"};

void check_tensor_map_fields(const ordered_json& maps, const std::string& source,
                             const std::string& path) {
  ju::expect_type(maps, maps.is_object(), "an object of tensor map names", source, path);
  for (auto m = maps.begin(); m != maps.end(); ++m) {
    std::string mpath = ju::join_path(path, m.key());
    ju::require_object(m.value(), source, mpath);
    ju::reject_unknown_keys(
        m.value(), {"box", "shape", "strides", "element_strides", "offset_bytes"}, source, mpath);
    for (auto f = m.value().begin(); f != m.value().end(); ++f) {
      std::string fpath = ju::join_path(mpath, f.key());
      if (f.key() == "offset_bytes") {
        check_size(f.value(), false, source, fpath);
        continue;
      }
      ju::expect_type(f.value(),
                      f.value().is_array() && !f.value().empty() && f.value().size() <= 5,
                      "an array of 1 to 5 sizes", source, fpath);
      for (std::size_t i = 0; i < f.value().size(); ++i) {
        check_size(f.value()[i], false, source, ju::index_path(fpath, i));
      }
    }
  }
}

std::vector<std::int64_t> parse_values(const ordered_json& k, const std::string& source,
                                       const std::string& path) {
  std::vector<std::int64_t> values;
  int forms = static_cast<int>(k.contains("values")) + static_cast<int>(k.contains("range")) +
              static_cast<int>(k.contains("pow2"));
  if (forms != 1) {
    throw input_error(ju::field(source, path),
                      "give exactly one of \"values\": [..], \"range\": [lo, hi] (with an "
                      "optional \"step\") or \"pow2\": [lo, hi]");
  }
  if (auto it = k.find("values"); it != k.end()) {
    ju::expect_type(*it, it->is_array() && !it->empty(), "a non-empty array of integers", source,
                    path + ".values");
    for (std::size_t i = 0; i < it->size(); ++i) {
      values.push_back(ju::as_int((*it)[i], source, ju::index_path(path + ".values", i)));
    }
  } else {
    const char* key = k.contains("range") ? "range" : "pow2";
    const auto& r = k.at(key);
    std::string rpath = path + "." + key;
    ju::expect_type(r, r.is_array() && r.size() == 2, "[lo, hi]", source, rpath);
    std::int64_t lo = ju::as_int(r[0], source, rpath + "[0]");
    std::int64_t hi = ju::as_int(r[1], source, rpath + "[1]");
    if (lo > hi) throw input_error(ju::field(source, rpath), "lo is greater than hi");
    if (std::string(key) == "range") {
      std::int64_t step = 1;
      if (auto s = k.find("step"); s != k.end()) step = ju::as_int(*s, source, path + ".step");
      if (step <= 0) throw input_error(ju::field(source, path + ".step"), "must be positive");
      // In unsigned arithmetic: hi - lo of int64 bounds can exceed INT64_MAX.
      std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
      if (span / static_cast<std::uint64_t>(step) >= 4096) {
        throw input_error(ju::field(source, rpath), "more than 4096 values");
      }
      // Stops before v + step would overflow (a range ending at INT64_MAX).
      for (std::int64_t v = lo;;) {
        values.push_back(v);
        if (__builtin_add_overflow(v, step, &v) || v > hi) break;
      }
    } else {
      if (lo <= 0 || (lo & (lo - 1)) != 0) {
        throw input_error(ju::field(source, rpath + "[0]"), "not a positive power of two");
      }
      for (std::int64_t v = lo;;) {
        values.push_back(v);
        if (__builtin_mul_overflow(v, 2, &v) || v > hi) break;
      }
    }
  }
  std::vector<std::int64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw input_error(ju::field(source, path), "a value is listed twice");
  }
  return values;
}

}  // namespace

TuneSpace parse_tune_space(const ordered_json& j, const std::string& source) {
  ju::require_object(j, source, "");
  ju::reject_unknown_keys(j, {"description", "knobs", "constraints", "launches", "workspace_bytes"},
                          source, "");
  TuneSpace space;
  space.source = source;
  space.description = ju::string_or(j, "description", "", source, "");
  const auto& knobs = ju::require(j, "knobs", source, "");
  ju::expect_type(knobs, knobs.is_object() && !knobs.empty(), "a non-empty object of knobs", source,
                  "knobs");
  for (auto it = knobs.begin(); it != knobs.end(); ++it) {
    std::string path = "knobs." + it.key();
    if (!is_identifier(it.key())) {
      throw input_error(ju::field(source, path), "a knob name is a C identifier (it is a macro)");
    }
    const auto& k = ju::require_object(it.value(), source, path);
    ju::reject_unknown_keys(k, {"values", "range", "step", "pow2", "default", "description"},
                            source, path);
    Knob knob;
    knob.name = it.key();
    knob.description = ju::string_or(k, "description", "", source, path);
    knob.values = parse_values(k, source, path);
    std::int64_t def =
        ju::as_int(ju::require(k, "default", source, path), source, path + ".default");
    auto pos = std::find(knob.values.begin(), knob.values.end(), def);
    if (pos == knob.values.end()) {
      throw input_error(ju::field(source, path + ".default"),
                        fmt::format("{} is not one of the knob's values", def));
    }
    knob.default_index = static_cast<std::size_t>(pos - knob.values.begin());
    space.knobs.push_back(std::move(knob));
  }
  if (auto it = j.find("constraints"); it != j.end()) {
    ju::expect_type(*it, it->is_array(), "an array of expressions", source, "constraints");
    for (std::size_t i = 0; i < it->size(); ++i) {
      std::string path = ju::index_path("constraints", i);
      std::string text = ju::as_string((*it)[i], source, path);
      try {
        space.constraints.push_back({Expr::parse(text), ju::field(source, path)});
      } catch (const ExprError& e) {
        throw input_error(ju::field(source, path), e.what());
      }
    }
  }
  if (auto it = j.find("launches"); it != j.end()) {
    ju::expect_type(*it, it->is_array(), "an array of launch fields, one object per launch", source,
                    "launches");
    for (std::size_t i = 0; i < it->size(); ++i) {
      std::string path = ju::index_path("launches", i);
      ju::require_object((*it)[i], source, path);
      ju::reject_unknown_keys((*it)[i], {"grid", "block", "cluster", "shared_bytes", "tensor_maps"},
                              source, path);
      for (auto field = (*it)[i].begin(); field != (*it)[i].end(); ++field) {
        if (field.key() == "tensor_maps") {
          check_tensor_map_fields(field.value(), source, ju::join_path(path, field.key()));
          continue;
        }
        check_size(field.value(), field.key() != "shared_bytes", source,
                   ju::join_path(path, field.key()));
      }
    }
    space.launches = nlohmann::json::parse(json_util::dump(*it));
  }
  if (auto it = j.find("workspace_bytes"); it != j.end()) {
    check_size(*it, false, source, "workspace_bytes");
    space.workspace_bytes = nlohmann::json::parse(json_util::dump(*it));
  }
  return space;
}

TuneSpace load_tune_space(const fs::path& file) {
  std::string source = file.string();
  return ju::reading(source, [&] {
    return parse_tune_space(ju::parse_text<ordered_json>(read_file(source), source), source);
  });
}

// tune.json beside the seed; for an arch's seed (seed.sm_90a.cu), tune.sm_90a.json.
fs::path tune_file_for(const fs::path& seed) {
  std::error_code ec;
  if (fs::is_directory(seed, ec)) return seed / "tune.json";
  const std::string stem = seed.stem().string();  // "seed" or "seed.sm_90a"
  if (stem.rfind("seed.", 0) == 0) return seed.parent_path() / ("tune." + stem.substr(5) + ".json");
  return seed.parent_path() / "tune.json";
}

Config default_config(const TuneSpace& space) {
  Config c;
  for (const auto& k : space.knobs) c.push_back(k.default_index);
  return c;
}

Bindings knob_values(const TuneSpace& space, const Config& config) {
  Bindings b;
  for (std::size_t i = 0; i < space.knobs.size(); ++i) {
    b[space.knobs[i].name] = space.knobs[i].values.at(config.at(i));
  }
  return b;
}

std::string config_text(const TuneSpace& space, const Config& config) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < space.knobs.size(); ++i) {
    parts.push_back(fmt::format("{}={}", space.knobs[i].name, space.knobs[i].values.at(config[i])));
  }
  return join(parts, " ");
}

nlohmann::json config_json(const TuneSpace& space, const Config& config) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < space.knobs.size(); ++i) {
    j[space.knobs[i].name] = space.knobs[i].values.at(config[i]);
  }
  return j;
}

bool is_valid(const TuneSpace& space, const Config& config, const std::vector<Bindings>& axes,
              std::string* why) {
  Bindings knobs = knob_values(space, config);
  static const std::vector<Bindings> kNoAxes = {Bindings{}};
  for (const Bindings& ax : axes.empty() ? kNoAxes : axes) {
    Bindings b = ax;
    for (const auto& [name, value] : knobs) b[name] = value;
    for (const auto& c : space.constraints) {
      bool holds = false;
      try {
        holds = c.expr.eval(b) != 0;
      } catch (const ExprError& e) {
        if (e.kind() == ExprError::Kind::kUnknownName) {
          throw input_error(
              c.where, fmt::format("{} (names: the knobs and the definition's axes)", e.what()));
        }
        holds = false;  // division by zero or overflow: this configuration is not valid
      }
      if (!holds) {
        if (why) *why = c.expr.text();
        return false;
      }
    }
  }
  return true;
}

std::size_t product_size(const TuneSpace& space) {
  std::size_t n = 1;
  for (const auto& k : space.knobs) {
    if (n > SIZE_MAX / k.values.size()) return SIZE_MAX;
    n *= k.values.size();
  }
  return n;
}

// What enumerating a space may cost, in characters of constraint text evaluated (a node of an
// expression is at least one character): 1 to 2 seconds of work (measured on a loaded 2-core
// machine: 2 to 3.5 ns a character). The largest real space (the gemm family: 5,184
// configurations, 4 constraints, 30 workloads) needs about 1/300 of it. A
// tune.json of 1.6 KB can describe millions of configurations checked against long constraints
// for every workload: refused at once, naming the file, rather than minutes before a proposal.
constexpr double kMaxEnumerationWork = 5e8;
// And a clock, for whatever the estimate misses.
constexpr double kMaxEnumerationSeconds = 3.0;

std::vector<Config> valid_configs(const TuneSpace& space, const std::vector<Bindings>& axes,
                                  std::size_t max_product) {
  std::size_t total = product_size(space);
  if (total > max_product) {
    throw input_error(ju::field(space.source, "knobs"),
                      fmt::format("{} configurations are too many to enumerate (at most {})", total,
                                  max_product));
  }
  // A constraint over knobs only holds or not whatever the axes: it is checked once per
  // configuration, and first; the others once per set of axes.
  std::set<std::string, std::less<>> knob_names;
  for (const auto& k : space.knobs) knob_names.insert(k.name);
  std::vector<const Constraint*> knob_only, with_axes;
  double knob_work = 0, axes_work = 0;
  for (const auto& c : space.constraints) {
    auto names = c.expr.names();
    bool only_knobs = std::all_of(names.begin(), names.end(),
                                  [&](const std::string& n) { return knob_names.count(n) > 0; });
    (only_knobs ? knob_only : with_axes).push_back(&c);
    (only_knobs ? knob_work : axes_work) += static_cast<double>(c.expr.text().size() + 1);
  }
  static const std::vector<Bindings> kNoAxes = {Bindings{}};
  const std::vector<Bindings>& sets = axes.empty() ? kNoAxes : axes;
  const double work =
      static_cast<double>(total) * (knob_work + static_cast<double>(sets.size()) * axes_work);
  if (work > kMaxEnumerationWork) {
    throw input_error(
        ju::field(space.source, "knobs"),
        fmt::format("{} configurations checked against {} constraint(s) for {} set(s) of axes are "
                    "too much work to enumerate ({:.1e} steps, at most {:.0e}): narrow the "
                    "knobs' values or shorten the constraints",
                    total, space.constraints.size(), sets.size(), work, kMaxEnumerationWork));
  }

  // One set of bindings per set of axes, the knobs' values written in place through pointers.
  Bindings knob_env;
  std::vector<std::int64_t*> knob_slots;
  for (const auto& k : space.knobs) knob_slots.push_back(&knob_env[k.name]);
  std::vector<Bindings> envs(sets.begin(), sets.end());
  std::vector<std::vector<std::int64_t*>> slots(envs.size());
  for (std::size_t a = 0; a < envs.size(); ++a) {
    for (const auto& k : space.knobs) slots[a].push_back(&(envs[a][k.name] = 0));
  }
  auto holds = [](const Constraint& c, const Bindings& b) {
    try {
      return c.expr.eval(b) != 0;
    } catch (const ExprError& e) {
      if (e.kind() == ExprError::Kind::kUnknownName) {
        throw input_error(c.where,
                          fmt::format("{} (names: the knobs and the definition's axes)", e.what()));
      }
      return false;  // division by zero or overflow: this configuration is not valid
    }
  };

  const auto started = std::chrono::steady_clock::now();
  std::vector<Config> out;
  Config c(space.knobs.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    if ((n & 0xfff) == 0xfff &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >
            kMaxEnumerationSeconds) {
      throw input_error(ju::field(space.source, "knobs"),
                        fmt::format("enumerating the configurations took more than {:.0f} s ({} of "
                                    "{} checked): narrow the knobs' values",
                                    kMaxEnumerationSeconds, n, total));
    }
    for (std::size_t k = 0; k < c.size(); ++k) *knob_slots[k] = space.knobs[k].values[c[k]];
    bool valid = std::all_of(knob_only.begin(), knob_only.end(),
                             [&](const Constraint* x) { return holds(*x, knob_env); });
    for (std::size_t a = 0; valid && a < envs.size(); ++a) {
      for (std::size_t k = 0; k < c.size(); ++k) *slots[a][k] = *knob_slots[k];
      valid = std::all_of(with_axes.begin(), with_axes.end(),
                          [&](const Constraint* x) { return holds(*x, envs[a]); });
    }
    if (valid) out.push_back(c);
    for (std::size_t k = space.knobs.size(); k-- > 0;) {  // odometer, last knob fastest
      if (++c[k] < space.knobs[k].values.size()) break;
      c[k] = 0;
    }
  }
  return out;
}

std::string instantiate(const std::string& seed_text, const std::string& seed_name,
                        const TuneSpace& space, const Config& config) {
  extract_plan_comment(seed_text, seed_name);  // the first block comment is a valid plan
  std::size_t start = 0, body = 0;
  for (;;) {
    start = seed_text.find("/*", start);
    if (start == std::string::npos) throw input_error(seed_name, "no /* kharness */ plan comment");
    body = seed_text.find_first_not_of(" \t\r\n", start + 2);
    if (body != std::string::npos && seed_text.compare(body, 8, "kharness") == 0) break;
    start += 2;
  }
  std::size_t end = seed_text.find("*/", start);
  // Read again in file order, so the emitted plan keeps the seed's key order.
  ordered_json plan =
      ju::parse_text<ordered_json>(seed_text.substr(body + 8, end - body - 8), seed_name);
  end += 2;

  Bindings knobs = knob_values(space, config);
  if (auto it = plan.find("launches"); it != plan.end() && it->is_array()) {
    if (space.launches.size() > it->size()) {
      throw input_error(
          ju::field(space.source, "launches"),
          fmt::format("{} launches, the seed's plan has {}", space.launches.size(), it->size()));
    }
    for (std::size_t i = 0; i < space.launches.size(); ++i) {
      for (const auto& [key, value] : space.launches[i].items()) {
        if (key == "tensor_maps") {  // merged field by field into the seed's maps of those names
          for (const auto& [name, fields] : value.items()) {
            for (const auto& [field, v] : fields.items()) {
              (*it)[i][key][name][field] = ordered_json::parse(json_util::dump(v));
            }
          }
          continue;
        }
        (*it)[i][key] = ordered_json::parse(json_util::dump(value));
      }
    }
    for (auto& launch : *it) {
      if (!launch.is_object()) continue;
      for (const char* key : {"grid", "block", "cluster"}) {
        if (launch.contains(key)) launch[key] = substitute_dim(launch[key], knobs);
      }
      if (auto maps = launch.find("tensor_maps"); maps != launch.end() && maps->is_object()) {
        for (auto& map : *maps) {
          if (!map.is_object()) continue;
          for (const char* key : kTensorMapSizeFields) {
            if (map.contains(key)) map[key] = substitute_dim(map[key], knobs);
          }
          if (map.contains("offset_bytes")) {
            map["offset_bytes"] = substitute_size(map["offset_bytes"], knobs);
          }
        }
      }
      if (launch.contains("shared_bytes")) {
        launch["shared_bytes"] = substitute_size(launch["shared_bytes"], knobs);
      }
    }
  }
  if (!space.workspace_bytes.is_null()) {
    plan["workspace_bytes"] = ordered_json::parse(json_util::dump(space.workspace_bytes));
  }
  if (plan.contains("workspace_bytes")) {
    plan["workspace_bytes"] = substitute_size(plan["workspace_bytes"], knobs);
  }
  ordered_json options = ordered_json::array();
  if (auto it = plan.find("compile_options"); it != plan.end() && it->is_array()) {
    for (const auto& o : *it) {
      bool ours = false;
      if (o.is_string()) {
        for (const auto& k : space.knobs) {
          std::string s = o.get<std::string>();
          ours = ours || s == "-D" + k.name || s.rfind("-D" + k.name + "=", 0) == 0;
        }
      }
      if (!ours) options.push_back(o);
    }
  }
  for (const auto& k : space.knobs)
    options.push_back(fmt::format("-D{}={}", k.name, knobs[k.name]));
  plan["compile_options"] = options;
  plan["description"] = fmt::format("kharness tune: {} (seed {})", config_text(space, config),
                                    fs::path(seed_name).filename().string());
  return seed_text.substr(0, start) + "/* kharness\n" + json_util::dump(plan, 2) + "\n*/" +
         seed_text.substr(end);
}

namespace {

// The seed's own plan and the plan of its default configuration must launch the same way on
// every workload, or the seed would not be the defaults' candidate.
void check_defaults_match_seed(const TuneProblem& p) {
  std::string name = p.seed_path.string();
  Solution seed = parse_single_file_solution(p.seed_text, name);
  Solution dflt = parse_single_file_solution(
      instantiate(p.seed_text, name, p.space, default_config(p.space)), name);
  auto mismatch = [&](const std::string& field, const Expr& a, const Expr& b, const Bindings& ax) {
    std::int64_t va = 0, vb = 0;
    try {
      va = a.eval(ax);
      vb = b.eval(ax);
    } catch (const ExprError& e) {
      throw input_error(ju::field(p.space.source, field), e.what());
    }
    if (va != vb) {
      std::vector<std::string> axes;
      for (const auto& [k, v] : ax) axes.push_back(fmt::format("{}={}", k, v));
      throw input_error(ju::field(p.space.source, field),
                        fmt::format("\"{}\" is {} for the defaults at {}, but the seed's plan "
                                    "gives {} (\"{}\")",
                                    b.text(), vb, join(axes, " "), va, a.text()));
    }
  };
  for (const Bindings& ax : p.axes) {
    for (std::size_t i = 0; i < seed.plan.launches.size(); ++i) {
      const Launch& a = seed.plan.launches[i];
      const Launch& b = dflt.plan.launches[i];
      std::string path = ju::index_path("launches", i);
      for (int d = 0; d < 3; ++d) {
        mismatch(fmt::format("{}.grid[{}]", path, d), a.grid[d], b.grid[d], ax);
        mismatch(fmt::format("{}.block[{}]", path, d), a.block[d], b.block[d], ax);
        mismatch(fmt::format("{}.cluster[{}]", path, d), a.cluster[d], b.cluster[d], ax);
      }
      mismatch(path + ".shared_bytes", a.shared_bytes, b.shared_bytes, ax);
    }
    mismatch("workspace_bytes", seed.plan.workspace_bytes, dflt.plan.workspace_bytes, ax);
  }
}

}  // namespace

TuneProblem load_tune_problem(const Operator& op, const fs::path& seed, const fs::path& tune_file) {
  TuneProblem p;
  p.operator_name = op.definition.name;
  if (!seed.empty()) {
    p.seed_path = seed;
  } else if (op.seed) {
    p.seed_path = *op.seed;
  } else {
    throw input_error(op.definition_file.string(),
                      "the operator has no seed.cu to tune (give one with --seed-file)");
  }
  if (p.seed_path.extension() != ".cu") {
    throw input_error(p.seed_path.string(),
                      "the tune provider instantiates single-file seeds (.cu)");
  }
  p.seed_text = read_single_file_source(p.seed_path);  // a family seed's _shared text inlined
  fs::path file = tune_file.empty() ? tune_file_for(p.seed_path) : tune_file;
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    throw input_error(
        file.string(),
        fmt::format("no knobs for seed {}: write a tune.json beside it", p.seed_path.string()));
  }
  p.space = load_tune_space(file);
  for (const auto& k : p.space.knobs) {
    std::string where = ju::field(p.space.source, "knobs." + k.name);
    if (op.definition.find_axis(k.name)) {
      throw input_error(where, "a knob cannot share its name with an axis of the definition");
    }
    bool mentioned = false;
    std::size_t pos = 0;
    while (!mentioned && (pos = p.seed_text.find(k.name, pos)) != std::string::npos) {
      bool left = pos == 0 || !is_word_char(p.seed_text[pos - 1]);
      std::size_t after = pos + k.name.size();
      bool right = after >= p.seed_text.size() || !is_word_char(p.seed_text[after]);
      mentioned = left && right;
      pos = after;
    }
    if (!mentioned) {
      throw input_error(where, fmt::format("the seed {} never uses this knob (expected #ifndef {})",
                                           p.seed_path.string(), k.name));
    }
  }
  for (const auto& w : op.workloads) p.axes.push_back(w.bindings(op.definition));
  if (p.axes.empty()) {
    Bindings consts;
    for (const auto& a : op.definition.axes) {
      if (a.is_const) consts[a.name] = a.value;
    }
    p.axes.push_back(consts);
  }
  std::string why;
  if (!is_valid(p.space, default_config(p.space), p.axes, &why)) {
    throw input_error(ju::field(p.space.source, "knobs"),
                      fmt::format("the defaults ({}) break the constraint \"{}\"",
                                  config_text(p.space, default_config(p.space)), why));
  }
  check_defaults_match_seed(p);
  p.valid = valid_configs(p.space, p.axes);
  return p;
}

}  // namespace kharness::tune
