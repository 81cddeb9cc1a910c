#include "kharness/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "../core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/file.hpp"
#include "kharness/text.hpp"

namespace kharness::model {
namespace {

namespace fs = std::filesystem;
using json_util::field;
using json_util::join_path;
using Json = nlohmann::ordered_json;

// What a node's axes and a layer input's shape may be written in; PhaseShape::symbols binds them.
const std::vector<std::string>& symbol_names() {
  static const std::vector<std::string> names = {"batch",    "tokens",    "kv_tokens",
                                                 "kv_pages", "page_size", "max_seq_len"};
  return names;
}

Expr parse_symbol_expr(const Json& j, const std::string& source, const std::string& path) {
  Expr e;
  try {
    e = j.is_number_integer() ? Expr::constant(json_util::as_int(j, source, path))
                              : Expr::parse(json_util::as_string(j, source, path));
  } catch (const ExprError& err) {
    throw input_error(field(source, path), fmt::format("not an expression: {}", err.what()));
  }
  for (const auto& name : e.names()) {
    const auto& known = symbol_names();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw input_error(field(source, path), fmt::format("'{}' is no phase symbol (known: {})",
                                                         name, join(known, ", ")));
    }
  }
  return e;
}

DType parse_dtype_field(const Json& j, const std::string& source, const std::string& path) {
  std::string name = json_util::as_string(j, source, path);
  auto dtype = parse_dtype(name);
  if (!dtype)
    throw input_error(field(source, path),
                      fmt::format("unknown dtype '{}' (known: {})", name, dtype_names()));
  return *dtype;
}

InputGenerator parse_generator(const Json& j, const std::string& source, const std::string& path) {
  json_util::require_object(j, source, path);
  json_util::reject_unknown_keys(j, {"distribution", "mean", "std", "low", "high"}, source, path);
  InputGenerator g;
  g.distribution = json_util::string_or(j, "distribution", "normal", source, path);
  if (g.distribution != "normal" && g.distribution != "uniform")
    throw input_error(field(source, join_path(path, "distribution")),
                      fmt::format("'{}' is neither normal nor uniform", g.distribution));
  auto number = [&](const char* key, double fallback) {
    auto it = j.find(key);
    return it == j.end() ? fallback : json_util::as_number(*it, source, join_path(path, key));
  };
  g.mean = number("mean", 0.0);
  g.std = number("std", 1.0);
  g.low = number("low", -1.0);
  g.high = number("high", 1.0);
  return g;
}

TensorRef parse_ref(const Json& j, const std::string& source, const std::string& path) {
  std::string text = json_util::as_string(j, source, path);
  auto dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == text.size()) {
    throw input_error(field(source, path),
                      fmt::format("'{}' is no tensor: expected input.NAME, weight.NAME, "
                                  "phase.NAME or NODE.OUTPUT",
                                  printable_line(bounded(text))));
  }
  TensorRef ref;
  std::string head = text.substr(0, dot);
  ref.name = text.substr(dot + 1);
  if (head == "input") {
    ref.kind = TensorRef::Kind::kInput;
  } else if (head == "weight") {
    ref.kind = TensorRef::Kind::kWeight;
  } else if (head == "phase") {
    ref.kind = TensorRef::Kind::kPhase;
  } else {
    ref.kind = TensorRef::Kind::kNode;
    ref.output = ref.name;
    ref.name = head;
  }
  return ref;
}

Edge parse_edge(const Json& j, const std::string& source, const std::string& path) {
  Edge edge;
  if (j.is_string()) {
    edge.sources.push_back(parse_ref(j, source, path));
    return edge;
  }
  json_util::require_object(j, source, path);
  if (j.size() == 1 && j.begin().value().is_number()) {
    auto dtype = parse_dtype(j.begin().key());
    if (!dtype)
      throw input_error(field(source, join_path(path, j.begin().key())),
                        fmt::format("unknown dtype of a literal (known: {})", dtype_names()));
    edge.scalar = j.begin().value().get<double>();
    edge.scalar_dtype = *dtype;
    return edge;
  }
  json_util::reject_unknown_keys(j, {"from", "sum", "columns", "cast", "append"}, source, path);
  bool has_from = j.contains("from"), has_sum = j.contains("sum");
  if (has_from == has_sum)
    throw input_error(field(source, path), "expected exactly one of \"from\" and \"sum\"");
  if (auto it = j.find("append"); it != j.end()) {
    // The cache is written in place, as an engine does: a view of it would be a copy.
    if (!has_from || j.contains("columns") || j.contains("cast"))
      throw input_error(field(source, join_path(path, "append")),
                        "appends to a cache given as \"from\" alone (no \"sum\", "
                        "\"columns\" or \"cast\")");
    Edge rows = parse_edge(*it, source, join_path(path, "append"));
    if (rows.scalar || rows.append)
      throw input_error(field(source, join_path(path, "append")),
                        "expected the tensor whose rows are the new tokens (no literal, no "
                        "append of its own)");
    edge.append = std::make_shared<const Edge>(std::move(rows));
  }
  if (has_from) {
    edge.sources.push_back(parse_ref(j["from"], source, join_path(path, "from")));
  } else {
    const Json& terms = j["sum"];
    std::string terms_path = join_path(path, "sum");
    json_util::expect_type(terms, terms.is_array() && terms.size() >= 2,
                           "an array of at least two tensors", source, terms_path);
    for (std::size_t i = 0; i < terms.size(); ++i)
      edge.sources.push_back(parse_ref(terms[i], source, json_util::index_path(terms_path, i)));
    edge.sum = true;
  }
  if (auto it = j.find("columns"); it != j.end()) {
    std::string cpath = join_path(path, "columns");
    json_util::expect_type(*it, it->is_array() && it->size() == 2, "[BEGIN, END]", source, cpath);
    std::int64_t begin = json_util::as_int((*it)[0], source, cpath + "[0]");
    std::int64_t end = json_util::as_int((*it)[1], source, cpath + "[1]");
    if (begin < 0 || end <= begin)
      throw input_error(field(source, cpath),
                        fmt::format("[{}, {}] is no column range (0 <= BEGIN < END)", begin, end));
    edge.columns = std::make_pair(begin, end);
  }
  if (auto it = j.find("cast"); it != j.end())
    edge.cast = parse_dtype_field(*it, source, join_path(path, "cast"));
  return edge;
}

std::vector<std::int64_t> positive_ints(const Json& j, const std::string& source,
                                        const std::string& path) {
  json_util::expect_type(j, j.is_array() && !j.empty(), "a non-empty array of integers", source,
                         path);
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    std::string p = json_util::index_path(path, i);
    std::int64_t v = json_util::as_int(j[i], source, p);
    if (v < 1) throw input_error(field(source, p), fmt::format("{} is not a positive count", v));
    out.push_back(v);
  }
  return out;
}

Phase parse_phase(const std::string& name, const Json& j, const std::string& source,
                  const std::string& path) {
  json_util::require_object(j, source, path);
  Phase phase;
  phase.name = name;
  std::int64_t page_size = 1;
  if (auto it = j.find("page_size"); it != j.end()) {
    page_size = json_util::as_int(*it, source, join_path(path, "page_size"));
    if (page_size < 1)
      throw input_error(field(source, join_path(path, "page_size")), "must be at least 1");
  }
  if (name == "decode") {
    json_util::reject_unknown_keys(j, {"batch_sizes", "kv_lens", "page_size"}, source, path);
    auto batches = positive_ints(json_util::require(j, "batch_sizes", source, path), source,
                                 join_path(path, "batch_sizes"));
    auto kv_lens = positive_ints(json_util::require(j, "kv_lens", source, path), source,
                                 join_path(path, "kv_lens"));
    for (auto b : batches) {
      for (auto kv : kv_lens) {
        PhaseShape s;
        s.phase = name;
        s.query_lens.assign(b, 1);
        s.kv_lens.assign(b, kv);
        s.page_size = page_size;
        phase.shapes.push_back(s);
      }
    }
  } else if (name == "prefill") {
    json_util::reject_unknown_keys(j, {"seq_lens", "page_size"}, source, path);
    const Json& batches = json_util::require(j, "seq_lens", source, path);
    std::string bpath = join_path(path, "seq_lens");
    json_util::expect_type(batches, batches.is_array() && !batches.empty(),
                           "a non-empty array of batches (arrays of sequence lengths)", source,
                           bpath);
    for (std::size_t i = 0; i < batches.size(); ++i) {
      PhaseShape s;
      s.phase = name;
      s.query_lens = positive_ints(batches[i], source, json_util::index_path(bpath, i));
      s.kv_lens = s.query_lens;  // a prefill from an empty cache: each prompt sees itself
      s.page_size = page_size;
      phase.shapes.push_back(s);
    }
  } else {
    throw input_error(field(source, path), "unknown phase (known: decode, prefill)");
  }
  return phase;
}

// What resolve_shapes reports an edge as, for messages.
std::string edge_text(const Edge& edge) {
  if (edge.scalar) return "a literal";
  std::vector<std::string> parts;
  for (const auto& s : edge.sources) parts.push_back(s.text());
  return edge.sum ? "sum(" + join(parts, ", ") + ")" : parts.front();
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

class Resolver {
 public:
  Resolver(const Model& model, const PhaseShape& shape)
      : model_(model), shape_(shape), symbols_(shape.symbols()) {}

  LayerShapes run() {
    const std::string source = model_.file.string();
    for (const auto& in : model_.inputs) {
      TensorType t{in.dtype, {}};
      for (std::size_t i = 0; i < in.shape.size(); ++i)
        t.shape.push_back(eval(in.shape[i], fmt::format("inputs.{}.shape[{}]", in.name, i)));
      out_.tensors["input." + in.name] = t;
    }
    for (const auto& pt : phase_tensors()) {
      TensorType t{pt.dtype, {}};
      for (const auto& d : pt.shape) t.shape.push_back(Expr::parse(d).eval(symbols_));
      out_.tensors["phase." + pt.name] = t;
    }
    for (const auto& node : model_.nodes)
      if (node.phase.empty() || node.phase == shape_.phase) resolve_node(node);
    for (const auto& [name, edge] : model_.outputs) {
      std::string path = join_path("outputs", name);
      TensorType got = edge_type(edge, path);
      const TensorType& want = out_.tensors.at("input." + name);
      if (got.dtype != want.dtype || got.shape != want.shape) {
        throw input_error(
            field(source, path),
            fmt::format("{} is {} {}, but input.{} of the next layer is {} {} ({})",
                        edge_text(edge), dtype_name(got.dtype), shape_text(got.shape), name,
                        dtype_name(want.dtype), shape_text(want.shape), shape_.label()));
      }
    }
    return out_;
  }

 private:
  std::int64_t eval(const Expr& e, const std::string& path) const {
    try {
      return e.eval(symbols_);
    } catch (const ExprError& err) {
      throw input_error(field(model_.file.string(), path), err.what());
    }
  }

  void resolve_node(const Node& node) {
    const std::string source = model_.file.string();
    const std::string npath = node.phase.empty()
                                  ? join_path("nodes", node.name)
                                  : join_path(join_path("nodes", node.name), node.phase);
    const Definition& def = model_.operators.at(node.definition).definition;
    Bindings axes;
    for (const auto& axis : def.axes) {
      if (axis.is_const) {
        axes[axis.name] = axis.value;
      } else {
        std::string apath = join_path(join_path(npath, "axes"), axis.name);
        std::int64_t v = eval(node.axes.at(axis.name), apath);
        if (v < 1)
          throw input_error(field(source, apath),
                            fmt::format("is {} at {}, not a positive size", v, shape_.label()));
        axes[axis.name] = v;
      }
    }
    // Constraints that read only axes ("len_indptr == batch_size + 1"); the others read tensors.
    for (const auto& c : def.constraints) {
      std::optional<std::int64_t> holds;
      try {
        holds = Expr::parse(c).eval(axes);
      } catch (const ExprError&) {
      }
      if (holds && *holds == 0)
        throw input_error(field(source, join_path(npath, "axes")),
                          fmt::format("these bindings break {}'s constraint '{}' at {}", def.name,
                                      c, shape_.label()));
    }
    out_.node_axes[node.name] = axes;
    for (const auto& spec : def.inputs) {
      const Edge& edge = node.inputs.at(spec.name);
      std::string ipath = join_path(join_path(npath, "inputs"), spec.name);
      if (spec.is_scalar()) {
        if (!edge.scalar)
          throw input_error(field(source, ipath),
                            fmt::format("{} is a scalar input: give a literal such as "
                                        "{{\"{}\": 1.0}}",
                                        spec.name, dtype_name(spec.dtype)));
        if (edge.scalar_dtype != spec.dtype)
          throw input_error(field(source, ipath),
                            fmt::format("a {} literal, but {} is {}", dtype_name(edge.scalar_dtype),
                                        spec.name, dtype_name(spec.dtype)));
        continue;
      }
      if (edge.scalar)
        throw input_error(field(source, ipath),
                          fmt::format("a literal, but {} is a tensor", spec.name));
      TensorType want{spec.dtype, tensor_shape(spec, axes)};
      if (edge.append && edge.sources[0].kind != TensorRef::Kind::kWeight)
        throw input_error(field(source, ipath),
                          fmt::format("appends to {}, but the cache appended to is a weight (the "
                                      "history drawn from the seed)",
                                      edge.sources[0].text()));
      // A weight takes its type from the definitions it feeds: the first fixes it.
      if (edge.sources.size() == 1 && edge.sources[0].kind == TensorRef::Kind::kWeight &&
          !edge.columns && !edge.cast) {
        std::string key = edge.sources[0].text();
        if (!model_.find_weight(edge.sources[0].name))
          throw input_error(field(source, ipath),
                            fmt::format("unknown tensor '{}' (no such weight)", key));
        auto [it, fresh] = out_.tensors.emplace(key, want);
        if (!fresh && (it->second.dtype != want.dtype || it->second.shape != want.shape)) {
          throw input_error(field(source, ipath),
                            fmt::format("{} is {} {} where an earlier node uses it, but {}.{} "
                                        "is {} {}",
                                        key, dtype_name(it->second.dtype),
                                        shape_text(it->second.shape), node.definition, spec.name,
                                        dtype_name(want.dtype), shape_text(want.shape)));
        }
        if (edge.append) check_append(edge, want, ipath);
        continue;
      }
      TensorType got = edge_type(edge, ipath);
      if (got.dtype != want.dtype) {
        throw input_error(
            field(source, ipath),
            fmt::format("dtype mismatch: {} is {}, {}.{} is {}{}", edge_text(edge),
                        dtype_name(got.dtype), node.definition, spec.name, dtype_name(want.dtype),
                        edge.cast ? "" : " (an edge may \"cast\")"));
      }
      // A view reshapes whole rows: the leading dimension and the element count must agree.
      bool fits = elements(got.shape) == elements(want.shape) &&
                  (got.shape.empty() || want.shape.empty() || got.shape[0] == want.shape[0]);
      if (!fits) {
        throw input_error(field(source, ipath),
                          fmt::format("shape mismatch at {}: {} is {}, {}.{} is {}", shape_.label(),
                                      edge_text(edge), shape_text(got.shape), node.definition,
                                      spec.name, shape_text(want.shape)));
      }
    }
    for (const auto& spec : def.outputs)
      out_.tensors[node.name + "." + spec.name] = TensorType{spec.dtype, tensor_shape(spec, axes)};
  }

  // An append edge: the cache is [pages, page_size, ...] at the phase's page size, not shared by
  // the layers (it is written in place), and the appended tensor has one row of the cache's row
  // width per new token, in the cache's dtype.
  void check_append(const Edge& edge, const TensorType& cache, const std::string& path) const {
    const std::string source = model_.file.string();
    const std::string key = edge.sources[0].text();
    if (model_.find_weight(edge.sources[0].name)->shared)
      throw input_error(field(source, path),
                        fmt::format("appends to {}, which is shared by every layer: each layer "
                                    "writes its own tokens into its own cache",
                                    key));
    const std::int64_t page_size = symbols_.at("page_size");
    if (cache.shape.size() < 2 || cache.shape[1] != page_size)
      throw input_error(field(source, path),
                        fmt::format("appends to {} {}, which is no paged cache [pages, "
                                    "page_size={}, ...] at {}",
                                    key, shape_text(cache.shape), page_size, shape_.label()));
    const std::string rows_path = join_path(path, "append");
    TensorType rows = edge_type(*edge.append, rows_path);
    if (rows.dtype != cache.dtype)
      throw input_error(field(source, rows_path),
                        fmt::format("{} is {}, the cache {} is {} (an edge may \"cast\")",
                                    edge_text(*edge.append), dtype_name(rows.dtype), key,
                                    dtype_name(cache.dtype)));
    const std::int64_t tokens = symbols_.at("tokens");
    const std::int64_t width = elements(cache.shape) / (cache.shape[0] * cache.shape[1]);
    if (rows.shape.empty() || rows.shape[0] != tokens || elements(rows.shape) != tokens * width)
      throw input_error(field(source, rows_path),
                        fmt::format("{} is {}, but the cache takes one row of {} elements for "
                                    "each of the {} new tokens at {}",
                                    edge_text(*edge.append), shape_text(rows.shape), width, tokens,
                                    shape_.label()));
  }

  TensorType edge_type(const Edge& edge, const std::string& path) const {
    const std::string source = model_.file.string();
    if (edge.scalar) throw input_error(field(source, path), "a literal where a tensor is needed");
    std::optional<TensorType> type;
    for (std::size_t i = 0; i < edge.sources.size(); ++i) {
      const TensorRef& ref = edge.sources[i];
      std::string rpath = edge.sum ? json_util::index_path(join_path(path, "sum"), i) : path;
      auto it = out_.tensors.find(ref.text());
      if (it == out_.tensors.end()) {
        std::string why;
        switch (ref.kind) {
          case TensorRef::Kind::kInput:
            why = "no such layer input";
            break;
          case TensorRef::Kind::kPhase:
            why = "no such phase tensor";
            break;
          case TensorRef::Kind::kWeight:
            why = model_.find_weight(ref.name)
                      ? "a weight takes its shape from a definition input it feeds directly, "
                        "and none has come before"
                      : "no such weight";
            break;
          case TensorRef::Kind::kNode:
            if (out_.node_axes.count(ref.name)) {
              why = fmt::format("{} has no output '{}'", definition_of(ref.name), ref.output);
            } else if (!model_.find_node(ref.name)) {
              why = "no node of that name";
            } else if (runs_in_phase(ref.name)) {
              why = "that node runs later";
            } else {
              why = "that node does not run in " + shape_.phase;
            }
            break;
        }
        throw input_error(field(source, rpath),
                          fmt::format("unknown tensor '{}' ({})", ref.text(), why));
      }
      if (type && type->shape != it->second.shape) {
        throw input_error(
            field(source, rpath),
            fmt::format("the terms of a sum differ in shape: {} is {}, the first "
                        "is {}",
                        ref.text(), shape_text(it->second.shape), shape_text(type->shape)));
      }
      if (type && type->dtype != it->second.dtype && !edge.cast) {
        throw input_error(
            field(source, rpath),
            fmt::format("{} is {}, the first term {}: a sum of different dtypes "
                        "needs \"cast\"",
                        ref.text(), dtype_name(it->second.dtype), dtype_name(type->dtype)));
      }
      if (!type) type = it->second;
    }
    if (edge.columns) {
      auto [begin, end] = *edge.columns;
      if (type->shape.size() != 2 || end > type->shape[1]) {
        throw input_error(field(source, join_path(path, "columns")),
                          fmt::format("[{}, {}] is not a column range of {} {}", begin, end,
                                      edge_text(edge), shape_text(type->shape)));
      }
      type->shape[1] = end - begin;
    }
    if (edge.cast) type->dtype = *edge.cast;
    return *type;
  }

  std::string definition_of(const std::string& node) const {
    for (const auto& n : model_.nodes)
      if (n.name == node && (n.phase.empty() || n.phase == shape_.phase)) return n.definition;
    return {};
  }
  bool runs_in_phase(const std::string& node) const { return !definition_of(node).empty(); }

  const Model& model_;
  const PhaseShape& shape_;
  Bindings symbols_;
  LayerShapes out_;
};

void check_node_static(const Model& model, const Node& node, const std::string& source,
                       const std::string& npath) {
  const Definition& def = model.operators.at(node.definition).definition;
  for (const auto& [axis, e] : node.axes) {
    const Axis* a = def.find_axis(axis);
    std::string apath = join_path(join_path(npath, "axes"), axis);
    if (!a) {
      std::vector<std::string> names;
      for (const auto& x : def.axes) names.push_back(x.name);
      throw input_error(field(source, apath), fmt::format("{} has no axis '{}' (axes: {})",
                                                          def.name, axis, join(names, ", ")));
    }
    if (a->is_const)
      throw input_error(field(source, apath),
                        fmt::format("bound twice: {} already fixes it to {}", def.name, a->value));
  }
  for (const auto& axis : def.axes) {
    if (!axis.is_const && !node.axes.count(axis.name))
      throw input_error(field(source, join_path(npath, "axes")),
                        fmt::format("{}'s var axis '{}' is never bound", def.name, axis.name));
  }
  for (const auto& [name, edge] : node.inputs) {
    if (!def.find_input(name)) {
      std::vector<std::string> names;
      for (const auto& x : def.inputs) names.push_back(x.name);
      throw input_error(
          field(source, join_path(join_path(npath, "inputs"), name)),
          fmt::format("{} has no input '{}' (inputs: {})", def.name, name, join(names, ", ")));
    }
  }
  for (const auto& spec : def.inputs) {
    if (!node.inputs.count(spec.name))
      throw input_error(field(source, join_path(npath, "inputs")),
                        fmt::format("{}'s input '{}' is fed by no edge", def.name, spec.name));
  }
}

Node parse_node(Model& m, const std::string& name, const std::string& phase, const Json& j,
                const OperatorRegistry& registry, const std::string& path) {
  const std::string source = m.file.string();
  json_util::require_object(j, source, path);
  json_util::reject_unknown_keys(j, {"definition", "axes", "inputs"}, source, path);
  Node node;
  node.name = name;
  node.phase = phase;
  node.definition = json_util::as_string(json_util::require(j, "definition", source, path), source,
                                         join_path(path, "definition"));
  if (!m.operators.count(node.definition)) {
    try {
      m.operators.emplace(node.definition, registry.load(node.definition));
    } catch (const Error& e) {
      throw input_error(field(source, join_path(path, "definition")),
                        fmt::format("unknown definition: {}", e.message()));
    }
  }
  if (auto a = j.find("axes"); a != j.end()) {
    std::string apath = join_path(path, "axes");
    json_util::require_object(*a, source, apath);
    for (auto ax = a->begin(); ax != a->end(); ++ax)
      node.axes.emplace(ax.key(),
                        parse_symbol_expr(ax.value(), source, join_path(apath, ax.key())));
  }
  std::string ipath = join_path(path, "inputs");
  const Json& edges =
      json_util::require_object(json_util::require(j, "inputs", source, path), source, ipath);
  for (auto e = edges.begin(); e != edges.end(); ++e)
    node.inputs.emplace(e.key(), parse_edge(e.value(), source, join_path(ipath, e.key())));
  check_node_static(m, node, source, path);
  return node;
}

Model parse_model(const Json& j, const fs::path& file, const OperatorRegistry& registry) {
  const std::string source = file.string();
  json_util::require_object(j, source, "");
  json_util::reject_unknown_keys(j,
                                 {"name", "description", "layers", "seed", "tolerance", "inputs",
                                  "weights", "nodes", "outputs", "phases"},
                                 source, "");
  Model m;
  m.file = file;
  m.name = json_util::as_string(json_util::require(j, "name", source, ""), source, "name");
  m.description = json_util::string_or(j, "description", "", source, "");
  m.layers = static_cast<int>(
      json_util::as_int(json_util::require(j, "layers", source, ""), source, "layers"));
  if (m.layers < 1 || m.layers > 1024)
    throw input_error(field(source, "layers"), "expected 1 to 1024 layers");
  std::int64_t seed = json_util::as_int(json_util::require(j, "seed", source, ""), source, "seed");
  if (seed < 0) throw input_error(field(source, "seed"), "expected a non-negative integer");
  m.seed = static_cast<std::uint64_t>(seed);

  const Json& tol = json_util::require_object(json_util::require(j, "tolerance", source, ""),
                                              source, "tolerance");
  json_util::reject_unknown_keys(tol, {"max_rel_error", "min_cosine", "max_bias"}, source,
                                 "tolerance");
  m.tolerance.max_rel_error =
      json_util::as_number(json_util::require(tol, "max_rel_error", source, "tolerance"), source,
                           "tolerance.max_rel_error");
  m.tolerance.min_cosine = json_util::as_number(
      json_util::require(tol, "min_cosine", source, "tolerance"), source, "tolerance.min_cosine");
  m.tolerance.max_bias = json_util::as_number(
      json_util::require(tol, "max_bias", source, "tolerance"), source, "tolerance.max_bias");
  if (!(m.tolerance.max_bias > 0))
    throw input_error(field(source, "tolerance.max_bias"), "expected a positive number");
  if (!(m.tolerance.max_rel_error > 0))
    throw input_error(field(source, "tolerance.max_rel_error"), "expected a positive number");
  if (!(m.tolerance.min_cosine > -1 && m.tolerance.min_cosine <= 1))
    throw input_error(field(source, "tolerance.min_cosine"), "expected a number in (-1, 1]");

  const Json& inputs =
      json_util::require_object(json_util::require(j, "inputs", source, ""), source, "inputs");
  if (inputs.empty()) throw input_error(field(source, "inputs"), "expected at least one input");
  for (auto it = inputs.begin(); it != inputs.end(); ++it) {
    std::string path = join_path("inputs", it.key());
    json_util::require_object(it.value(), source, path);
    json_util::reject_unknown_keys(it.value(), {"shape", "dtype", "init"}, source, path);
    LayerInput in;
    in.name = it.key();
    const Json& shape = json_util::require(it.value(), "shape", source, path);
    json_util::expect_type(shape, shape.is_array() && !shape.empty(), "a non-empty array", source,
                           join_path(path, "shape"));
    for (std::size_t i = 0; i < shape.size(); ++i)
      in.shape.push_back(
          parse_symbol_expr(shape[i], source, json_util::index_path(join_path(path, "shape"), i)));
    in.dtype = parse_dtype_field(json_util::require(it.value(), "dtype", source, path), source,
                                 join_path(path, "dtype"));
    if (auto g = it.value().find("init"); g != it.value().end())
      in.generator = parse_generator(*g, source, join_path(path, "init"));
    m.inputs.push_back(in);
  }

  const Json& weights =
      json_util::require_object(json_util::require(j, "weights", source, ""), source, "weights");
  for (auto it = weights.begin(); it != weights.end(); ++it) {
    std::string path = join_path("weights", it.key());
    json_util::require_object(it.value(), source, path);
    Weight w;
    w.name = it.key();
    Json init = it.value();
    if (auto s = init.find("shared"); s != init.end()) {
      json_util::expect_type(*s, s->is_boolean(), "true or false", source,
                             join_path(path, "shared"));
      w.shared = s->get<bool>();
      init.erase("shared");
    }
    w.generator = parse_generator(init, source, path);
    m.weights.push_back(w);
  }

  const Json& phases =
      json_util::require_object(json_util::require(j, "phases", source, ""), source, "phases");
  if (phases.empty()) throw input_error(field(source, "phases"), "expected decode or prefill");
  for (auto it = phases.begin(); it != phases.end(); ++it)
    m.phases.push_back(parse_phase(it.key(), it.value(), source, join_path("phases", it.key())));

  const Json& nodes =
      json_util::require_object(json_util::require(j, "nodes", source, ""), source, "nodes");
  if (nodes.empty()) throw input_error(field(source, "nodes"), "expected at least one node");
  for (auto it = nodes.begin(); it != nodes.end(); ++it) {
    std::string path = join_path("nodes", it.key());
    if (it.key().empty() || it.key().find('.') != std::string::npos || it.key() == "input" ||
        it.key() == "weight" || it.key() == "phase")
      throw input_error(field(source, path),
                        "a node's name has no '.' and is none of input, weight, phase");
    json_util::require_object(it.value(), source, path);
    if (it.value().contains("definition")) {
      m.nodes.push_back(parse_node(m, it.key(), "", it.value(), registry, path));
      continue;
    }
    if (it.value().empty())
      throw input_error(field(source, path), "expected \"definition\", or one form per phase");
    for (auto form = it.value().begin(); form != it.value().end(); ++form) {
      std::string fpath = join_path(path, form.key());
      if (!m.find_phase(form.key()))
        throw input_error(field(source, fpath),
                          "neither \"definition\" nor a phase the model declares");
      m.nodes.push_back(parse_node(m, it.key(), form.key(), form.value(), registry, fpath));
    }
  }

  const Json& outputs =
      json_util::require_object(json_util::require(j, "outputs", source, ""), source, "outputs");
  if (outputs.empty())
    throw input_error(field(source, "outputs"), "expected the hidden state the layer passes on");
  for (auto it = outputs.begin(); it != outputs.end(); ++it) {
    std::string path = join_path("outputs", it.key());
    bool known = std::any_of(m.inputs.begin(), m.inputs.end(),
                             [&](const LayerInput& in) { return in.name == it.key(); });
    if (!known)
      throw input_error(field(source, path),
                        "names no layer input (an output becomes the next layer's input)");
    m.outputs.emplace(it.key(), parse_edge(it.value(), source, path));
  }
  if (!m.outputs.count(m.inputs.front().name))
    throw input_error(
        field(source, "outputs"),
        fmt::format("gives no '{}' (the first input, the hidden state)", m.inputs.front().name));

  return m;
}

// Every weight must feed something: one that feeds nothing is a typo of one that should.
void check_weights_used(const Model& m) {
  std::set<std::string> used;
  std::function<void(const Edge&)> note = [&](const Edge& e) {
    for (const auto& s : e.sources)
      if (s.kind == TensorRef::Kind::kWeight) used.insert(s.name);
    if (e.append) note(*e.append);
  };
  for (const auto& node : m.nodes)
    for (const auto& [name, edge] : node.inputs) note(edge);
  for (const auto& [name, edge] : m.outputs) note(edge);
  for (const auto& w : m.weights) {
    if (!used.count(w.name))
      throw input_error(field(m.file.string(), join_path("weights", w.name)),
                        "feeds no node input");
  }
}

}  // namespace

std::string TensorRef::text() const {
  switch (kind) {
    case Kind::kInput:
      return "input." + name;
    case Kind::kWeight:
      return "weight." + name;
    case Kind::kPhase:
      return "phase." + name;
    case Kind::kNode:
      return name + "." + output;
  }
  return name;
}

Bindings PhaseShape::symbols() const {
  Bindings b;
  std::int64_t tokens = 0, kv_tokens = 0, kv_pages = 0, max_seq = 0;
  for (auto q : query_lens) tokens += q;
  for (auto kv : kv_lens) {
    kv_tokens += kv;
    kv_pages += (kv + page_size - 1) / page_size;
    max_seq = std::max(max_seq, kv);
  }
  b["batch"] = static_cast<std::int64_t>(query_lens.size());
  b["tokens"] = tokens;
  b["kv_tokens"] = kv_tokens;
  b["kv_pages"] = kv_pages;
  b["page_size"] = page_size;
  b["max_seq_len"] = max_seq;
  return b;
}

std::string PhaseShape::label() const {
  if (phase == "decode")
    return fmt::format("decode batch={} kv={}", query_lens.size(),
                       kv_lens.empty() ? 0 : kv_lens.front());
  std::vector<std::string> lens;
  for (auto q : query_lens) lens.push_back(std::to_string(q));
  return fmt::format("prefill tokens=[{}]", join(lens, ","));
}

const Node* Model::find_node(std::string_view n) const {
  for (const auto& node : nodes)
    if (node.name == n) return &node;
  return nullptr;
}

const Phase* Model::find_phase(std::string_view n) const {
  for (const auto& p : phases)
    if (p.name == n) return &p;
  return nullptr;
}

const Weight* Model::find_weight(std::string_view n) const {
  for (const auto& w : weights)
    if (w.name == n) return &w;
  return nullptr;
}

const std::vector<PhaseTensor>& phase_tensors() {
  static const std::vector<PhaseTensor> tensors = {
      {"qo_indptr", {"batch + 1"}, DType::kInt32},
      {"kv_indptr", {"batch + 1"}, DType::kInt32},
      {"kv_indices", {"kv_pages"}, DType::kInt32},
      {"positions", {"tokens"}, DType::kInt64},
  };
  return tensors;
}

PhaseTables phase_tables(const PhaseShape& shape, std::uint64_t seed) {
  PhaseTables t;
  t.qo_indptr = {0};
  t.kv_indptr = {0};
  for (std::size_t s = 0; s < shape.query_lens.size(); ++s) {
    std::int64_t q = shape.query_lens[s], len = shape.kv_lens[s];
    t.qo_indptr.push_back(static_cast<std::int32_t>(t.qo_indptr.back() + q));
    t.kv_indptr.push_back(static_cast<std::int32_t>(t.kv_indptr.back() +
                                                    (len + shape.page_size - 1) / shape.page_size));
    for (std::int64_t i = 0; i < q; ++i) t.positions.push_back(len - q + i);
  }
  t.kv_indices.resize(static_cast<std::size_t>(t.kv_indptr.back()));
  std::iota(t.kv_indices.begin(), t.kv_indices.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(t.kv_indices.begin(), t.kv_indices.end(), rng);
  for (std::size_t s = 0; s < shape.query_lens.size(); ++s) {
    std::int64_t q = shape.query_lens[s], len = shape.kv_lens[s];
    for (std::int64_t pos = len - q; pos < len; ++pos) {
      std::int64_t page =
          t.kv_indices[static_cast<std::size_t>(t.kv_indptr[s] + pos / shape.page_size)];
      t.append_rows.push_back(page * shape.page_size + pos % shape.page_size);
    }
  }
  return t;
}

LayerShapes resolve_shapes(const Model& model, const PhaseShape& shape) {
  return Resolver(model, shape).run();
}

Model load_model(const fs::path& file, const OperatorRegistry& registry) {
  const std::string source = file.string();
  std::string text = read_regular_file(file);
  auto j = json_util::parse_text<Json>(text, source);
  Model m = json_util::reading(source, [&] { return parse_model(j, file, registry); });
  for (const auto& phase : m.phases)
    for (const auto& shape : phase.shapes) resolve_shapes(m, shape);
  check_weights_used(m);
  return m;
}

bool names_a_model_file(const std::string& name_or_path) {
  return name_or_path.find('/') != std::string::npos ||
         fs::path(name_or_path).extension() == ".json";
}

fs::path find_model(const std::string& name_or_path) {
  std::error_code ec;
  fs::path p(name_or_path);
  if (names_a_model_file(name_or_path)) {
    if (!fs::is_regular_file(p, ec))
      throw input_error("--model", fmt::format("no model file '{}'", name_or_path));
    return p;
  }
  fs::path dir = data_dir() / "models";
  fs::path file = dir / (name_or_path + ".json");
  if (fs::is_regular_file(file, ec)) return file;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  auto close = close_matches(name_or_path, names, 1);
  throw input_error(
      "--model", close.empty()
                     ? fmt::format("no model '{}' (models: {})", name_or_path, join(names, ", "))
                     : fmt::format("no model '{}' (did you mean '{}'?)", name_or_path, close[0]));
}

}  // namespace kharness::model
