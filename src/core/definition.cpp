#include "kharness/definition.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/hash.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

namespace ju = json_util;
using OJson = nlohmann::ordered_json;

const std::set<std::string> kDistributions = {
    "normal",        "uniform",          "range",
    "indptr",        "indices",          "constant",
    "scale",         "sparse_indices",   "fp8_cache_with_scales",
    "last_page_len", "probability_rows", "packed_topk_ids"};

std::vector<std::string> axis_names(const Definition& d) {
  std::vector<std::string> names;
  for (const auto& a : d.axes) names.push_back(a.name);
  return names;
}

std::string unknown_name_message(const std::string& kind, const std::string& name,
                                 const std::vector<std::string>& known) {
  auto close = close_matches(name, known, 1);
  std::string msg = fmt::format("unknown {} '{}'", kind, printable_line(bounded(name, 80)));
  if (!close.empty()) return msg + fmt::format(" (did you mean '{}'?)", close[0]);
  // "axis" -> "axes", "tensor" -> "tensors".
  std::string plural = kind == "axis" ? std::string("axes") : kind + "s";
  return msg + fmt::format(" ({}: {})", plural, known.empty() ? "none" : join(known, ", "));
}

void parse_axes(const OJson& j, const std::string& source, Definition& d) {
  const auto& axes = ju::require_object(ju::require(j, "axes", source, ""), source, "axes");
  for (auto it = axes.begin(); it != axes.end(); ++it) {
    std::string path = "axes." + it.key();
    const auto& a = ju::require_object(it.value(), source, path);
    Axis axis;
    axis.name = it.key();
    std::string type = ju::as_string(ju::require(a, "type", source, path), source, path + ".type");
    if (type == "const") {
      axis.is_const = true;
      axis.value = ju::as_int(ju::require(a, "value", source, path), source, path + ".value");
      if (axis.value < 0) throw input_error(ju::field(source, path + ".value"), "must be >= 0");
    } else if (type != "var") {
      throw input_error(
          ju::field(source, path + ".type"),
          fmt::format("unknown axis type '{}' (expected \"const\" or \"var\")", type));
    }
    axis.description = ju::string_or(a, "description", "", source, path);
    d.axes.push_back(std::move(axis));
  }
}

std::vector<TensorSpec> parse_tensors(const OJson& j, const char* key, const std::string& source,
                                      const Definition& d) {
  std::vector<TensorSpec> out;
  const auto& tensors = ju::require_object(ju::require(j, key, source, ""), source, key);
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    std::string path = std::string(key) + "." + it.key();
    const auto& t = ju::require_object(it.value(), source, path);
    TensorSpec spec;
    spec.name = it.key();
    const auto& shape = ju::require(t, "shape", source, path);
    if (!shape.is_null()) {
      ju::expect_type(shape, shape.is_array(), "an array of axis names or null", source,
                      path + ".shape");
      std::vector<std::string> dims;
      for (std::size_t i = 0; i < shape.size(); ++i) {
        std::string dim_path = ju::index_path(path + ".shape", i);
        std::string dim = ju::as_string(shape[i], source, dim_path);
        if (!d.find_axis(dim)) {
          throw input_error(ju::field(source, dim_path),
                            unknown_name_message("axis", dim, axis_names(d)));
        }
        dims.push_back(dim);
      }
      spec.shape = std::move(dims);
    }
    std::string dtype =
        ju::as_string(ju::require(t, "dtype", source, path), source, path + ".dtype");
    auto parsed = parse_dtype(dtype);
    if (!parsed) {
      throw input_error(
          ju::field(source, path + ".dtype"),
          fmt::format("unknown dtype '{}' (expected one of: {})", dtype, dtype_names()));
    }
    spec.dtype = *parsed;
    spec.description = ju::string_or(t, "description", "", source, path);
    out.push_back(std::move(spec));
  }
  return out;
}

Expr parse_formula(const OJson& j, const std::string& source, const std::string& path,
                   const Definition& d) {
  Expr e;
  if (j.is_number_integer()) return Expr::constant(ju::as_int(j, source, path));
  std::string text = ju::as_string(j, source, path);
  try {
    e = Expr::parse(text);
  } catch (const ExprError& err) {
    throw input_error(ju::field(source, path), err.what());
  }
  for (const auto& name : e.names()) {
    if (!d.find_axis(name)) {
      throw input_error(ju::field(source, path), unknown_name_message("axis", name, axis_names(d)));
    }
  }
  return e;
}

void parse_kharness(const OJson& j, const std::string& source, Definition& d) {
  auto it = j.find("kharness");
  if (it == j.end() || it->is_null()) return;
  const std::string root = "kharness";
  const auto& k = ju::require_object(*it, source, root);
  ju::reject_unknown_keys(
      k,
      {"family", "tolerance", "inputs", "flops", "bytes", "min_flops", "min_bytes", "baseline",
       "constants", "comparator", "timed_check", "notes"},
      source, root);
  KharnessSpec& spec = d.kharness;
  spec.present = true;
  spec.family = ju::string_or(k, "family", "", source, root);
  // A family names a folder under operators/_families/: one plain name, never a path.
  if (!spec.family.empty() &&
      (spec.family.find_first_not_of(
           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
           std::string::npos ||
       spec.family.find_first_not_of('.') == std::string::npos)) {
    throw input_error(ju::field(source, root + ".family"),
                      fmt::format("'{}' is not a family name (letters, digits, '_', '-', '.'; "
                                  "a folder under operators/_families/)",
                                  spec.family));
  }
  spec.baseline = ju::string_or(k, "baseline", "", source, root);
  spec.comparator = ju::string_or(k, "comparator", "elementwise", source, root);
  if (auto t = k.find("tolerance"); t != k.end()) {
    std::string path = root + ".tolerance";
    ju::require_object(*t, source, path);
    ju::reject_unknown_keys(*t, {"atol", "rtol", "required_matched_ratio"}, source, path);
    if (auto v = t->find("atol"); v != t->end())
      spec.tolerance.atol = ju::as_number(*v, source, path + ".atol");
    if (auto v = t->find("rtol"); v != t->end())
      spec.tolerance.rtol = ju::as_number(*v, source, path + ".rtol");
    if (auto v = t->find("required_matched_ratio"); v != t->end()) {
      spec.tolerance.required_matched_ratio =
          ju::as_number(*v, source, path + ".required_matched_ratio");
    }
    if (spec.tolerance.atol < 0 || spec.tolerance.rtol < 0) {
      throw input_error(ju::field(source, path), "atol and rtol must be >= 0");
    }
    if (spec.tolerance.required_matched_ratio <= 0 || spec.tolerance.required_matched_ratio > 1) {
      throw input_error(ju::field(source, path + ".required_matched_ratio"), "must be in (0, 1]");
    }
  }
  if (auto in = k.find("inputs"); in != k.end()) {
    std::string path = root + ".inputs";
    ju::require_object(*in, source, path);
    for (auto g = in->begin(); g != in->end(); ++g) {
      std::string gpath = path + "." + g.key();
      if (!d.find_input(g.key())) {
        std::vector<std::string> names;
        for (const auto& t : d.inputs) names.push_back(t.name);
        throw input_error(ju::field(source, gpath), unknown_name_message("input", g.key(), names));
      }
      const auto& gen = ju::require_object(g.value(), source, gpath);
      InputGenerator out;
      for (auto f = gen.begin(); f != gen.end(); ++f) {
        const std::string& key = f.key();
        std::string fpath = gpath + "." + key;
        if (key == "distribution") {
          out.distribution = ju::as_string(f.value(), source, fpath);
          if (!kDistributions.count(out.distribution)) {
            throw input_error(
                ju::field(source, fpath),
                fmt::format("unknown distribution '{}' (expected one of: {})", out.distribution,
                            join({kDistributions.begin(), kDistributions.end()}, ", ")));
          }
        } else if (key == "mean") {
          out.mean = ju::as_number(f.value(), source, fpath);
        } else if (key == "std") {
          out.std = ju::as_number(f.value(), source, fpath);
        } else if ((key == "low" || key == "high") && f.value().is_string()) {
          // An expression over the axes (e.g. "max_seq_len - 1"), evaluated per workload.
          parse_formula(f.value(), source, fpath, d);
          out.extra[key + "_expr"] = f.value().get<std::string>();
        } else if (key == "low") {
          out.low = ju::as_number(f.value(), source, fpath);
        } else if (key == "high") {
          out.high = ju::as_number(f.value(), source, fpath);
        } else {
          out.extra[key] = nlohmann::json(f.value());
        }
      }
      if (out.low > out.high) throw input_error(ju::field(source, gpath), "low > high");
      // Index roles: their size parameters are expressions over the axes.
      const char* role_key = out.distribution == "indptr"                  ? "total"
                             : out.distribution == "last_page_len"         ? "indptr"
                             : out.distribution == "indices"               ? "max"
                             : out.distribution == "sparse_indices"        ? "max"
                             : out.distribution == "fp8_cache_with_scales" ? "head_dim"
                             : out.distribution == "packed_topk_ids"       ? "experts"
                                                                           : nullptr;
      if (role_key) {
        auto it = out.extra.find(role_key);
        if (it == out.extra.end()) {
          throw input_error(ju::field(source, gpath),
                            fmt::format("the {} role needs \"{}\"", out.distribution, role_key));
        }
        const bool names_input = out.distribution == "last_page_len";
        if (!names_input && !it->is_number_integer())
          parse_formula(OJson(*it), source, gpath + "." + role_key, d);
      }
      if (out.std < 0) throw input_error(ju::field(source, gpath + ".std"), "must be >= 0");
      spec.inputs[g.key()] = std::move(out);
    }
  }
  if (auto f = k.find("flops"); f != k.end())
    spec.flops = parse_formula(*f, source, root + ".flops", d);
  if (auto b = k.find("bytes"); b != k.end())
    spec.bytes = parse_formula(*b, source, root + ".bytes", d);
  if (auto f = k.find("min_flops"); f != k.end())
    spec.min_flops = parse_formula(*f, source, root + ".min_flops", d);
  if (auto b = k.find("min_bytes"); b != k.end())
    spec.min_bytes = parse_formula(*b, source, root + ".min_bytes", d);
  if (auto c = k.find("timed_check"); c != k.end()) {
    const std::string path = root + ".timed_check";
    ju::require_object(*c, source, path);
    ju::reject_unknown_keys(*c, {"rows_of", "rows"}, source, path);
    spec.timed_rows_of = ju::string_or(*c, "rows_of", "", source, path);
    if (!d.find_axis(spec.timed_rows_of)) {
      throw input_error(ju::field(source, path + ".rows_of"),
                        fmt::format("'{}' is not an axis of the definition", spec.timed_rows_of));
    }
    for (const auto& t : d.outputs) {
      if (!t.shape || t.shape->empty() || t.shape->front() != spec.timed_rows_of) {
        throw input_error(ju::field(source, path + ".rows_of"),
                          fmt::format("output '{}' does not have '{}' as its first dimension",
                                      t.name, spec.timed_rows_of));
      }
    }
    const double rows =
        c->contains("rows") ? ju::as_number((*c)["rows"], source, path + ".rows") : 128.0;
    if (!(rows >= 1 && rows <= 256) || rows != static_cast<double>(static_cast<int>(rows))) {
      throw input_error(ju::field(source, path + ".rows"), "must be an integer in [1, 256]");
    }
    spec.timed_rows = static_cast<int>(rows);
  }
  if (auto c = k.find("constants"); c != k.end()) {
    std::string path = root + ".constants";
    ju::require_object(*c, source, path);
    for (auto v = c->begin(); v != c->end(); ++v) {
      spec.constants[v.key()] = ju::as_number(v.value(), source, path + "." + v.key());
    }
  }
}

}  // namespace

const Axis* Definition::find_axis(std::string_view n) const {
  for (const auto& a : axes) {
    if (a.name == n) return &a;
  }
  return nullptr;
}

const TensorSpec* Definition::find_input(std::string_view n) const {
  for (const auto& t : inputs) {
    if (t.name == n) return &t;
  }
  return nullptr;
}

const TensorSpec* Definition::find_output(std::string_view n) const {
  for (const auto& t : outputs) {
    if (t.name == n) return &t;
  }
  return nullptr;
}

const TensorSpec* Definition::find_tensor(std::string_view n) const {
  if (const auto* t = find_input(n)) return t;
  return find_output(n);
}

Definition parse_definition(const OJson& j, const std::string& source) {
  ju::require_object(j, source, "");
  Definition d;
  d.name = ju::as_string(ju::require(j, "name", source, ""), source, "name");
  if (d.name.empty()) throw input_error(ju::field(source, "name"), "must not be empty");
  for (char c : d.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      throw input_error(
          ju::field(source, "name"),
          fmt::format("'{}' has a character other than letters, digits, _ - .", d.name));
    }
  }
  d.op_type = ju::string_or(j, "op_type", "", source, "");
  d.description = ju::string_or(j, "description", "", source, "");
  if (auto tags = j.find("tags"); tags != j.end() && !tags->is_null()) {
    ju::expect_type(*tags, tags->is_array(), "an array of strings", source, "tags");
    for (std::size_t i = 0; i < tags->size(); ++i) {
      d.tags.push_back(ju::as_string((*tags)[i], source, ju::index_path("tags", i)));
    }
  }
  parse_axes(j, source, d);
  if (auto c = j.find("constraints"); c != j.end() && !c->is_null()) {
    ju::expect_type(*c, c->is_array(), "an array of strings", source, "constraints");
    for (std::size_t i = 0; i < c->size(); ++i) {
      d.constraints.push_back(ju::as_string((*c)[i], source, ju::index_path("constraints", i)));
    }
  }
  d.inputs = parse_tensors(j, "inputs", source, d);
  d.outputs = parse_tensors(j, "outputs", source, d);
  if (d.outputs.empty()) throw input_error(ju::field(source, "outputs"), "no outputs");
  for (const auto& out : d.outputs) {
    if (d.find_input(out.name)) {
      throw input_error(ju::field(source, "outputs." + out.name), "also named as an input");
    }
    if (out.is_scalar()) {
      throw input_error(ju::field(source, "outputs." + out.name + ".shape"),
                        "outputs must be tensors (shape null is for scalar inputs)");
    }
  }
  d.reference_python = ju::string_or(j, "reference", "", source, "");
  parse_kharness(j, source, d);
  return d;
}

void apply_family_defaults(Definition& definition, const nlohmann::ordered_json& family_json,
                           const std::string& source) {
  ju::require_object(family_json, source, "");
  ju::reject_unknown_keys(family_json, {"kharness", "description", "workloads"}, source, "");
  auto it = family_json.find("kharness");
  if (it == family_json.end()) return;
  // Parse the family's section against this definition (names must exist in it), then fill only
  // what the definition leaves unset.
  Definition scratch = definition;
  scratch.kharness = KharnessSpec{};
  parse_kharness(OJson{{"kharness", *it}}, source, scratch);
  const KharnessSpec& family = scratch.kharness;
  KharnessSpec& own = definition.kharness;
  if (!own.present) own.tolerance = family.tolerance;
  for (const auto& [name, gen] : family.inputs)
    own.inputs.emplace(name, gen);  // keeps the definition's
  if (!own.flops) own.flops = family.flops;
  if (!own.bytes) own.bytes = family.bytes;
  if (!own.min_flops) own.min_flops = family.min_flops;
  if (!own.min_bytes) own.min_bytes = family.min_bytes;
  if (own.comparator == "elementwise") own.comparator = family.comparator;
  if (own.timed_rows_of.empty()) {
    own.timed_rows_of = family.timed_rows_of;
    own.timed_rows = family.timed_rows;
  }
  for (const auto& [name, value] : family.constants) own.constants.emplace(name, value);
  own.present = true;  // the definition now has a kharness section: its family's
}

Definition parse_definition_text(const std::string& text, const std::string& source) {
  // ju::reading: a field of a wrong type that no check above caught is the file's error too.
  return ju::reading(source,
                     [&] { return parse_definition(ju::parse_text<OJson>(text, source), source); });
}

Definition load_definition(const std::filesystem::path& file) {
  return parse_definition_text(read_file(file.string()), file.string());
}

Bindings Workload::bindings(const Definition& definition) const {
  Bindings b;
  for (const auto& axis : definition.axes) {
    if (axis.is_const) {
      b[axis.name] = axis.value;
    } else if (auto it = axes.find(axis.name); it != axes.end()) {
      b[axis.name] = it->second;
    }
  }
  return b;
}

Workload parse_workload(const nlohmann::json& line, const Definition& d,
                        const std::string& source) {
  ju::require_object(line, source, "");
  const nlohmann::json* w = &line;
  std::string root;
  if (auto it = line.find("workload"); it != line.end()) {  // a FlashInfer-Bench trace line
    w = &*it;
    root = "workload";
    ju::require_object(*w, source, root);
    if (auto def = line.find("definition");
        def != line.end() && def->is_string() && def->get<std::string>() != d.name) {
      throw input_error(
          ju::field(source, "definition"),
          fmt::format("'{}' does not match the definition '{}'", def->get<std::string>(), d.name));
    }
  }
  Workload out;
  out.uuid =
      ju::as_string(ju::require(*w, "uuid", source, root), source, ju::join_path(root, "uuid"));
  // Workloads are selected, cached and reported by uuid (prefix): an empty one matches anything.
  if (out.uuid.find_first_not_of(" \t") == std::string::npos)
    throw input_error(ju::field(source, ju::join_path(root, "uuid")), "empty");
  std::string axes_path = ju::join_path(root, "axes");
  const auto& axes = ju::require_object(ju::require(*w, "axes", source, root), source, axes_path);
  for (auto it = axes.begin(); it != axes.end(); ++it) {
    std::string path = axes_path + "." + it.key();
    const Axis* axis = d.find_axis(it.key());
    if (!axis)
      throw input_error(ju::field(source, path),
                        unknown_name_message("axis", it.key(), axis_names(d)));
    std::int64_t value = ju::as_int(it.value(), source, path);
    if (value < 0) throw input_error(ju::field(source, path), "must be >= 0");
    if (axis->is_const && value != axis->value) {
      throw input_error(
          ju::field(source, path),
          fmt::format("{} is const {} in the definition, got {}", axis->name, axis->value, value));
    }
    if (!axis->is_const) out.axes[it.key()] = value;
  }
  for (const auto& axis : d.axes) {
    if (!axis.is_const && !out.axes.count(axis.name)) {
      throw input_error(ju::field(source, axes_path),
                        fmt::format("missing var axis '{}'", axis.name));
    }
  }
  std::string inputs_path = ju::join_path(root, "inputs");
  if (auto in = w->find("inputs"); in != w->end() && !in->is_null()) {
    ju::require_object(*in, source, inputs_path);
    for (auto it = in->begin(); it != in->end(); ++it) {
      std::string path = inputs_path + "." + it.key();
      const TensorSpec* spec = d.find_input(it.key());
      if (!spec) {
        std::vector<std::string> names;
        for (const auto& t : d.inputs) names.push_back(t.name);
        throw input_error(ju::field(source, path), unknown_name_message("input", it.key(), names));
      }
      const auto& obj = ju::require_object(it.value(), source, path);
      std::string type =
          ju::as_string(ju::require(obj, "type", source, path), source, path + ".type");
      WorkloadInput wi;
      if (type == "random") {
        wi.kind = WorkloadInput::Kind::kRandom;
      } else if (type == "scalar") {
        wi.kind = WorkloadInput::Kind::kScalar;
        wi.value = ju::require(obj, "value", source, path);
        ju::expect_type(wi.value, wi.value.is_number() || wi.value.is_boolean(), "a number", source,
                        path + ".value");
      } else if (type == "safetensors") {
        wi.kind = WorkloadInput::Kind::kSafetensors;
        wi.path = ju::as_string(ju::require(obj, "path", source, path), source, path + ".path");
        wi.tensor_key = ju::as_string(ju::require(obj, "tensor_key", source, path), source,
                                      path + ".tensor_key");
      } else {
        throw input_error(
            ju::field(source, path + ".type"),
            fmt::format("unknown input type '{}' (expected random, scalar or safetensors)", type));
      }
      if (spec->is_scalar() && wi.kind == WorkloadInput::Kind::kSafetensors) {
        throw input_error(ju::field(source, path), "a scalar input cannot come from safetensors");
      }
      out.inputs[it.key()] = std::move(wi);
    }
  }
  if (auto k = w->find("kharness"); k != w->end() && k->is_object()) {
    if (auto p = k->find("provenance"); p != k->end()) {
      out.provenance = ju::as_string(*p, source, ju::join_path(root, "kharness.provenance"));
    }
  }
  for (const auto& spec : d.inputs) {
    if (out.inputs.count(spec.name)) continue;
    if (spec.is_scalar()) {
      throw input_error(
          ju::field(source, inputs_path),
          fmt::format("missing scalar input '{}' (give {{\"type\": \"scalar\", \"value\": ...}})",
                      spec.name));
    }
    out.inputs[spec.name] = WorkloadInput{};  // tensors default to random
  }
  return out;
}

std::vector<Workload> load_workloads(const std::filesystem::path& file, const Definition& d) {
  std::string text = read_file(file.string());
  std::vector<Workload> out;
  std::set<std::string> uuids;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string source = fmt::format("{}:{}", file.string(), number);
    auto json = ju::parse_text<nlohmann::json>(line, file.string(), number);
    Workload w = ju::reading(source, [&] { return parse_workload(json, d, source); });
    if (!uuids.insert(w.uuid).second) {
      throw input_error(source, fmt::format("duplicate workload uuid '{}'", w.uuid));
    }
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<std::int64_t> tensor_shape(const TensorSpec& tensor, const Bindings& bindings) {
  std::vector<std::int64_t> shape;
  if (!tensor.shape) return shape;
  for (const auto& dim : *tensor.shape) {
    auto it = bindings.find(dim);
    if (it == bindings.end()) {
      throw input_error(tensor.name, fmt::format("axis '{}' has no value", dim));
    }
    shape.push_back(it->second);
  }
  return shape;
}

}  // namespace kharness

namespace kharness {

nlohmann::ordered_json to_json(const Definition& d) {
  using OJson = nlohmann::ordered_json;
  OJson j;
  j["name"] = d.name;
  j["op_type"] = d.op_type;
  j["description"] = d.description;
  j["tags"] = d.tags;
  OJson axes = OJson::object();
  for (const auto& a : d.axes) {
    OJson axis;
    axis["type"] = a.is_const ? "const" : "var";
    if (a.is_const) axis["value"] = a.value;
    if (!a.description.empty()) axis["description"] = a.description;
    axes[a.name] = axis;
  }
  j["axes"] = axes;
  if (!d.constraints.empty()) j["constraints"] = d.constraints;
  auto tensors = [](const std::vector<TensorSpec>& list) {
    OJson out = OJson::object();
    for (const auto& t : list) {
      OJson tj;
      tj["shape"] = t.shape ? OJson(*t.shape) : OJson(nullptr);
      tj["dtype"] = std::string(dtype_name(t.dtype));
      if (!t.description.empty()) tj["description"] = t.description;
      out[t.name] = tj;
    }
    return out;
  };
  j["inputs"] = tensors(d.inputs);
  j["outputs"] = tensors(d.outputs);
  if (!d.reference_python.empty()) j["reference"] = d.reference_python;
  if (d.kharness.present) {
    const auto& k = d.kharness;
    OJson kj;
    if (!k.family.empty()) kj["family"] = k.family;
    kj["tolerance"] = {{"atol", k.tolerance.atol},
                       {"rtol", k.tolerance.rtol},
                       {"required_matched_ratio", k.tolerance.required_matched_ratio}};
    if (!k.inputs.empty()) {
      OJson inputs = OJson::object();
      for (const auto& [name, g] : k.inputs) {
        OJson gj;
        gj["distribution"] = g.distribution;
        if (g.distribution == "normal") {
          gj["mean"] = g.mean;
          gj["std"] = g.std;
        } else {
          if (g.distribution == "fp8_cache_with_scales") gj["std"] = g.std;
          gj["low"] = g.low;
          gj["high"] = g.high;
        }
        for (auto it = g.extra.begin(); it != g.extra.end(); ++it) {
          std::string key = it.key();
          if (key == "low_expr" || key == "high_expr")
            key = key.substr(0, key.size() - 5);  // written back as low/high
          gj[key] = OJson(it.value());
        }
        inputs[name] = gj;
      }
      kj["inputs"] = inputs;
    }
    if (k.flops) kj["flops"] = k.flops->text();
    if (k.bytes) kj["bytes"] = k.bytes->text();
    if (k.min_flops) kj["min_flops"] = k.min_flops->text();
    if (k.min_bytes) kj["min_bytes"] = k.min_bytes->text();
    if (!k.baseline.empty()) kj["baseline"] = k.baseline;
    if (!k.constants.empty()) kj["constants"] = k.constants;
    if (k.comparator != "elementwise") kj["comparator"] = k.comparator;
    if (!k.timed_rows_of.empty())
      kj["timed_check"] = {{"rows_of", k.timed_rows_of}, {"rows", k.timed_rows}};
    j["kharness"] = kj;
  }
  return j;
}

nlohmann::json to_json(const Workload& w) {
  nlohmann::json j;
  j["uuid"] = w.uuid;
  j["axes"] = w.axes;
  nlohmann::json inputs = nlohmann::json::object();
  for (const auto& [name, in] : w.inputs) {
    switch (in.kind) {
      case WorkloadInput::Kind::kRandom:
        inputs[name] = {{"type", "random"}};
        break;
      case WorkloadInput::Kind::kScalar:
        inputs[name] = {{"type", "scalar"}, {"value", in.value}};
        break;
      case WorkloadInput::Kind::kSafetensors:
        inputs[name] = {{"type", "safetensors"}, {"path", in.path}, {"tensor_key", in.tensor_key}};
        break;
    }
  }
  j["inputs"] = inputs;
  if (!w.provenance.empty()) j["kharness"] = {{"provenance", w.provenance}};
  return j;
}

namespace {

// A synthesized scalar: a number, or "rsqrt(expression)" (a softmax scale 1/sqrt(head_dim)).
nlohmann::json template_scalar(const OJson& v, const Bindings& axes, const std::string& source,
                               const std::string& path) {
  if (v.is_number()) return nlohmann::json(v);
  std::string text = ju::as_string(v, source, path);
  std::int64_t arg = 0;
  bool rsqrt = text.rfind("rsqrt(", 0) == 0 && text.size() > 7 && text.back() == ')';
  try {
    arg = Expr::parse(rsqrt ? text.substr(6, text.size() - 7) : text).eval(axes);
  } catch (const ExprError& e) {
    throw input_error(ju::field(source, path), e.what());
  }
  if (!rsqrt) return arg;
  if (arg <= 0) throw input_error(ju::field(source, path), "rsqrt of a value <= 0");
  return 1.0 / std::sqrt(static_cast<double>(arg));
}

// A constraint that reads only axes and holds, or one that cannot be judged from the axes
// (it reads a tensor's values or shape): true. False only when it reads axes and fails.
bool constraint_allows(const std::string& constraint, const Bindings& axes) {
  try {
    return Expr::parse(constraint).eval(axes) != 0;
  } catch (const ExprError&) {
    return true;
  }
}

}  // namespace

std::vector<Workload> synthesize_workloads(const Definition& d, const OJson& templates,
                                           const std::string& source) {
  ju::expect_type(templates, templates.is_array(), "an array of workload templates", source,
                  "workloads");
  std::vector<Workload> out;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < templates.size(); ++i) {
    const std::string path = ju::index_path("workloads", i);
    const auto& t = ju::require_object(templates[i], source, path);
    ju::reject_unknown_keys(t, {"axes", "inputs"}, source, path);
    Bindings axes;
    for (const auto& a : d.axes) {
      if (a.is_const) axes[a.name] = a.value;
    }
    const auto& ta =
        ju::require_object(ju::require(t, "axes", source, path), source, path + ".axes");
    for (auto it = ta.begin(); it != ta.end(); ++it) {
      const std::string apath = path + ".axes." + it.key();
      const Axis* axis = d.find_axis(it.key());
      if (axis && axis->is_const) continue;  // the definition fixes it
      std::int64_t value = 0;
      if (it.value().is_number_integer()) {
        value = ju::as_int(it.value(), source, apath);
      } else {
        try {
          value = Expr::parse(ju::as_string(it.value(), source, apath)).eval(axes);
        } catch (const ExprError& e) {
          throw input_error(ju::field(source, apath), e.what());
        }
      }
      if (value < 0) throw input_error(ju::field(source, apath), "must be >= 0");
      axes[it.key()] = value;
    }
    bool allowed = true;
    for (const auto& c : d.constraints) allowed = allowed && constraint_allows(c, axes);
    if (!allowed) continue;
    Workload w;
    std::string key = d.name;
    for (const auto& a : d.axes) {
      if (a.is_const) continue;
      auto v = axes.find(a.name);
      if (v == axes.end()) {
        throw input_error(ju::field(source, path + ".axes"),
                          fmt::format("gives no value for {}'s var axis '{}'", d.name, a.name));
      }
      w.axes[a.name] = v->second;
      key += fmt::format(" {}={}", a.name, v->second);
    }
    if (!seen.insert(key).second) continue;  // two templates that agree on this definition
    const OJson no_inputs = OJson::object();
    const auto it_inputs = t.find("inputs");
    const OJson& ti = it_inputs == t.end() ? no_inputs : *it_inputs;
    ju::require_object(ti, source, path + ".inputs");
    for (const auto& spec : d.inputs) {
      WorkloadInput in;
      if (spec.is_scalar()) {
        auto v = ti.find(spec.name);
        if (v == ti.end()) {
          throw input_error(
              ju::field(source, path + ".inputs"),
              fmt::format("gives no value for {}'s scalar input '{}'", d.name, spec.name));
        }
        in.kind = WorkloadInput::Kind::kScalar;
        in.value = template_scalar(*v, axes, source, path + ".inputs." + spec.name);
      }
      w.inputs[spec.name] = std::move(in);
    }
    // A stable id: the same definition and axes give the same uuid on every machine.
    std::string h = sha256_hex(key);
    w.uuid = fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4),
                         h.substr(16, 4), h.substr(20, 12));
    w.provenance =
        fmt::format("synthesized from {} {} (the definition ships no workloads)", source, path);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace kharness
