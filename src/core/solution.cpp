#include "kharness/solution.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <set>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/family_source.hpp"
#include "kharness/file.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

namespace ju = json_util;
namespace fs = std::filesystem;
using nlohmann::json;

// Far above the source rules' limits (1 MiB a file), which then say how large it is; what is
// larger is not read at all.
constexpr std::size_t kMaxSourceFileBytes = std::size_t{16} << 20;

const char* const kSourceExtensions[] = {".cu", ".cuh", ".h", ".hpp", ".hh", ".inc", ".inl"};

bool is_source_extension(const fs::path& p) {
  for (const char* ext : kSourceExtensions) {
    if (p.extension() == ext) return true;
  }
  return false;
}

// IEEE half / bfloat16 from float, round to nearest even.
std::uint16_t to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000;
  std::uint32_t mag = x & 0x7fffffff;
  if (mag > 0x7f800000) return static_cast<std::uint16_t>(sign | 0x7e00);   // NaN
  if (mag >= 0x477ff000) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (mag < 0x38800000) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &mag, 4);
    // Scale into the subnormal range and round to nearest even.
    auto q = static_cast<std::uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t rounded = mag + 0xfff + ((mag >> 13) & 1);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

Literal parse_literal(const json& j, const std::string& source, const std::string& path) {
  if (j.size() != 1) {
    throw input_error(ju::field(source, path),
                      "a literal is an object with one key, its dtype: {\"int32\": 4}");
  }
  auto it = j.begin();
  auto dtype = parse_dtype(it.key());
  if (!dtype) {
    throw input_error(
        ju::field(source, path + "." + it.key()),
        fmt::format("unknown dtype '{}' (expected one of: {})", it.key(), dtype_names()));
  }
  std::string vpath = path + "." + it.key();
  Literal lit;
  lit.dtype = *dtype;
  if (*dtype == DType::kFloat8E4M3 || *dtype == DType::kFloat8E5M2) {
    throw input_error(ju::field(source, vpath), "fp8 literals are not supported; pass float32");
  }
  if (*dtype == DType::kBool) {
    ju::expect_type(it.value(), it.value().is_boolean() || it.value().is_number_integer(),
                    "a boolean", source, vpath);
    lit.int_value =
        it.value().is_boolean() ? it.value().get<bool>() : it.value().get<std::int64_t>() != 0;
  } else if (is_floating(*dtype)) {
    lit.float_value = ju::as_number(it.value(), source, vpath);
  } else {
    lit.int_value = ju::as_int(it.value(), source, vpath);
    std::int64_t lo, hi;
    switch (*dtype) {
      case DType::kInt8:
        lo = -128;
        hi = 127;
        break;
      case DType::kUInt8:
        lo = 0;
        hi = 255;
        break;
      case DType::kInt16:
        lo = -32768;
        hi = 32767;
        break;
      case DType::kInt32:
        lo = std::numeric_limits<std::int32_t>::min();
        hi = std::numeric_limits<std::int32_t>::max();
        break;
      default:
        lo = std::numeric_limits<std::int64_t>::min();
        hi = std::numeric_limits<std::int64_t>::max();
        break;
    }
    if (lit.int_value < lo || lit.int_value > hi) {
      throw input_error(ju::field(source, vpath),
                        fmt::format("{} does not fit in {}", lit.int_value, it.key()));
    }
  }
  return lit;
}

Expr parse_size_expr(const json& j, const std::string& source, const std::string& path) {
  if (j.is_number_integer()) return Expr::constant(ju::as_int(j, source, path));
  ju::expect_type(j, j.is_string(), "an integer or an expression string", source, path);
  try {
    return Expr::parse(j.get<std::string>());
  } catch (const ExprError& e) {
    throw input_error(ju::field(source, path), e.what());
  }
}

std::array<Expr, 3> parse_dim3(const json& obj, const char* key, const std::string& source,
                               const std::string& path, bool required) {
  std::array<Expr, 3> out = {Expr::constant(1), Expr::constant(1), Expr::constant(1)};
  auto it = obj.find(key);
  std::string p = ju::join_path(path, key);
  if (it == obj.end()) {
    if (required) throw input_error(ju::field(source, p), "missing required field");
    return out;
  }
  if (!it->is_array()) {  // a single value means [x, 1, 1]
    out[0] = parse_size_expr(*it, source, p);
    return out;
  }
  if (it->empty() || it->size() > 3) {
    throw input_error(ju::field(source, p),
                      fmt::format("expected 1 to 3 values, got {}", it->size()));
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    out[i] = parse_size_expr((*it)[i], source, ju::index_path(p, i));
  }
  return out;
}

void check_relative_path(const std::string& p, const std::string& where) {
  fs::path path(p);
  if (p.empty()) throw input_error(where, "empty path");
  if (path.is_absolute())
    throw input_error(where, fmt::format("'{}' is absolute; source paths are relative", p));
  for (const auto& part : path) {
    if (part == "..")
      throw input_error(where, fmt::format("'{}' leaves the solution folder ('..')", p));
  }
}

// Two sources of one path (also "a.cuh" and "./a.cuh") make NVRTC refuse the whole program, which
// would read as an environment failure; it is the submission's error.
void check_unique_path(std::set<std::string>& seen, const std::string& p,
                       const std::string& where) {
  if (!seen.insert(fs::path(p).lexically_normal().generic_string()).second)
    throw input_error(where, fmt::format("'{}' is listed twice; each source path is given once",
                                         printable_line(p.substr(0, 200))));
}

// A plan's "definition" names an operator of the registry; it is never a path: a submission
// does not choose the definition (tolerances, reference) it is judged by. Definition files and
// folders come only from the person running kharness (--operator FILE, --operators-dir).
void check_definition_name(const std::string& name, const std::string& where) {
  if (name.empty()) return;
  bool path_like = name.find_first_of("/\\") != std::string::npos || name == "." || name == ".." ||
                   fs::path(name).extension() == ".json";
  if (path_like) {
    throw input_error(where, fmt::format("'{}' is a path; a plan's definition is an operator "
                                         "name (definition files are given by whoever runs "
                                         "kharness: --operator FILE or --operators-dir DIR)",
                                         printable_line(name.substr(0, 200))));
  }
}

bool blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

// Fills name/author/description from the plan object where present.
void take_metadata(const json& j, const std::string& source, Solution& s) {
  if (!j.is_object()) return;
  s.name = ju::string_or(j, "name", s.name, source, "");
  s.author = ju::string_or(j, "author", s.author, source, "");
  s.description = ju::string_or(j, "description", s.description, source, "");
}

Solution load_folder(const fs::path& dir) {
  fs::path manifest = dir / "solution.json";
  std::string source = manifest.string();
  // Every file of a folder solution is read beneath the folder with no symlink on the way: a
  // link (to a host file, to another team's file, or inside) is not read, compiled or archived.
  json j =
      ju::parse_text<json>(read_file_beneath(dir, "solution.json", kMaxSourceFileBytes), source);
  ju::require_object(j, source, "");
  Solution s;
  s.form = SolutionForm::kFolder;
  s.origin = dir;
  s.name = dir.filename().string();
  take_metadata(j, source, s);
  std::vector<std::string> paths;
  std::set<std::string> seen;
  if (auto it = j.find("sources"); it != j.end()) {
    ju::expect_type(*it, it->is_array(), "an array of file names", source, "sources");
    for (std::size_t i = 0; i < it->size(); ++i) {
      std::string where = ju::field(source, ju::index_path("sources", i));
      std::string p = ju::as_string((*it)[i], source, ju::index_path("sources", i));
      check_relative_path(p, where);
      check_unique_path(seen, p, where);
      paths.push_back(p);
    }
  } else {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      // Symlinks are listed too, and refused by the read like FIFOs and devices.
      if (!entry.is_directory() && is_source_extension(entry.path())) {
        paths.push_back(entry.path().lexically_relative(dir).generic_string());
      }
    }
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) throw input_error(ju::field(source, "sources"), "no source files");
  for (std::size_t i = 0; i < paths.size(); ++i) {
    s.sources.push_back({paths[i], read_file_beneath(dir, paths[i], kMaxSourceFileBytes)});
  }
  std::string entry = ju::string_or(j, "entry", "", source, "");
  if (entry.empty()) {
    auto it = std::find_if(paths.begin(), paths.end(),
                           [](const std::string& p) { return fs::path(p).extension() == ".cu"; });
    if (it == paths.end())
      throw input_error(ju::field(source, "entry"), "no .cu source to compile");
    entry = *it;
  }
  auto pos = std::find(paths.begin(), paths.end(), entry);
  if (pos == paths.end()) {
    throw input_error(ju::field(source, "entry"),
                      fmt::format("'{}' is not one of the sources", entry));
  }
  s.entry = static_cast<std::size_t>(pos - paths.begin());
  if (blank(s.entry_source().content)) {
    throw input_error((dir / entry).string(), "empty source");
  }
  if (j.contains("launches") || j.contains("variants")) {
    json plan = j;
    for (const char* key : {"name", "author", "description", "sources", "entry"}) plan.erase(key);
    s.plan = parse_plan(plan, source);
    s.plan_source = source;
  } else {
    std::string file = (dir / entry).string();
    auto [plan, line] = extract_plan_comment(s.entry_source().content, file);
    take_metadata(plan, file, s);
    s.plan_source = fmt::format("{}:{}", file, line);
    s.plan = parse_plan(plan, s.plan_source);
  }
  return s;
}

Solution load_flashinfer_bench(const fs::path& file, const json& j) {
  std::string source = file.string();
  Solution s;
  s.form = SolutionForm::kFlashInferBench;
  s.origin = file;
  s.name = ju::as_string(ju::require(j, "name", source, ""), source, "name");
  s.author = ju::string_or(j, "author", "", source, "");
  s.description = ju::string_or(j, "description", "", source, "");
  std::string definition = ju::string_or(j, "definition", "", source, "");
  check_definition_name(definition, ju::field(source, "definition"));
  const auto& spec = ju::require_object(ju::require(j, "spec", source, ""), source, "spec");
  std::string language =
      ju::as_string(ju::require(spec, "language", source, "spec"), source, "spec.language");
  std::string lower = language;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower != "cuda") {
    throw input_error(ju::field(source, "spec.language"),
                      fmt::format("kharness runs CUDA solutions; got '{}'", language));
  }
  const auto& sources = ju::require(j, "sources", source, "");
  ju::expect_type(sources, sources.is_array(), "an array of {path, content}", source, "sources");
  if (sources.empty()) throw input_error(ju::field(source, "sources"), "no sources");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    std::string path = ju::index_path("sources", i);
    const auto& obj = ju::require_object(sources[i], source, path);
    std::string p = ju::as_string(ju::require(obj, "path", source, path), source, path + ".path");
    check_relative_path(p, ju::field(source, path + ".path"));
    check_unique_path(seen, p, ju::field(source, path + ".path"));
    std::string content =
        ju::as_string(ju::require(obj, "content", source, path), source, path + ".content");
    s.sources.push_back({p, content});
  }
  std::string entry_file;
  std::string entry_point = ju::string_or(spec, "entry_point", "", source, "spec");
  if (!entry_point.empty()) entry_file = entry_point.substr(0, entry_point.find("::"));
  // A solution exported by kharness (kharness/export.hpp) carries a generated host launcher for
  // FlashInfer-Bench's builder. kharness launches the plan itself and never compiles host code,
  // so the launcher is left out; when it is the entry point, its second line names the kernel
  // source that is the entry here.
  for (auto it = s.sources.begin(); it != s.sources.end();) {
    if (it->content.rfind(exchange::kFibLauncherMarker, 0) != 0) {
      ++it;
      continue;
    }
    if (it->path == entry_file) {
      std::size_t line = it->content.find('\n');
      std::size_t next = line == std::string::npos ? line : it->content.find('\n', line + 1);
      std::string second =
          line == std::string::npos
              ? std::string()
              : it->content.substr(line + 1,
                                   next == std::string::npos ? std::string::npos : next - line - 1);
      if (second.rfind(exchange::kFibEntryPrefix, 0) != 0)
        throw input_error(ju::field(source, "sources"),
                          fmt::format("the generated launcher '{}' does not name its kernel "
                                      "source (a second line \"{}PATH\")",
                                      it->path, exchange::kFibEntryPrefix));
      entry_file = second.substr(std::string(exchange::kFibEntryPrefix).size());
    }
    it = s.sources.erase(it);
  }
  if (s.sources.empty()) throw input_error(ju::field(source, "sources"), "no kernel source");
  auto found = std::find_if(s.sources.begin(), s.sources.end(), [&](const SourceFile& f) {
    return entry_file.empty() ? fs::path(f.path).extension() == ".cu" : f.path == entry_file;
  });
  if (found == s.sources.end()) {
    throw input_error(ju::field(source, "spec.entry_point"),
                      entry_file.empty()
                          ? std::string("no .cu source")
                          : fmt::format("'{}' is not one of the sources", entry_file));
  }
  s.entry = static_cast<std::size_t>(found - s.sources.begin());
  std::string entry_where = fmt::format("{}: {}", source, s.entry_source().path);
  if (blank(s.entry_source().content)) throw input_error(entry_where, "empty source");
  if (auto it = j.find("kharness"); it != j.end()) {
    s.plan_source = ju::field(source, "kharness");
    s.plan = parse_plan(*it, s.plan_source);
  } else {
    auto [plan, line] = extract_plan_comment(s.entry_source().content, entry_where);
    s.plan_source = fmt::format("{}:{}", entry_where, line);
    s.plan = parse_plan(plan, s.plan_source);
  }
  if (s.plan.definition.empty()) s.plan.definition = definition;
  return s;
}

}  // namespace

std::vector<std::uint8_t> Literal::encode() const {
  std::vector<std::uint8_t> out(dtype_size(dtype));
  auto put = [&](const void* p) { std::memcpy(out.data(), p, out.size()); };
  switch (dtype) {
    case DType::kFloat32: {
      float f = static_cast<float>(float_value);
      put(&f);
      break;
    }
    case DType::kFloat16: {
      std::uint16_t h = to_half(static_cast<float>(float_value));
      put(&h);
      break;
    }
    case DType::kBFloat16: {
      std::uint16_t h = to_bf16(static_cast<float>(float_value));
      put(&h);
      break;
    }
    default:  // integers and bool, little endian
      for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(int_value) >> (8 * i));
      }
      break;
  }
  return out;
}

const TensorMapSpec* Launch::find_tensor_map(const std::string& name) const {
  for (const auto& m : tensor_maps) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string LaunchArg::text() const {
  if (!tensor_map.empty()) return fmt::format("{{tensor_map: {}}}", tensor_map);
  if (!literal) return name;
  if (is_floating(literal->dtype))
    return fmt::format("{{{}: {}}}", dtype_name(literal->dtype), literal->float_value);
  return fmt::format("{{{}: {}}}", dtype_name(literal->dtype), literal->int_value);
}

namespace {

// One list of launches, at `where` ("launches", "variants[1].launches").
std::vector<Launch> parse_launches(const json& launches, const std::string& source,
                                   const std::string& where) {
  ju::expect_type(launches, launches.is_array(), "an array of launches", source, where);
  std::vector<Launch> out;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    std::string path = ju::index_path(where, i);
    const auto& l = ju::require_object(launches[i], source, path);
    ju::reject_unknown_keys(l,
                            {"kernel", "grid", "block", "shared_bytes", "cluster", "args",
                             "tensor_maps", "pdl", "cooperative"},
                            source, path);
    Launch launch;
    launch.kernel = ju::as_string(ju::require(l, "kernel", source, path), source, path + ".kernel");
    if (launch.kernel.empty())
      throw input_error(ju::field(source, path + ".kernel"), "empty kernel name");
    launch.grid = parse_dim3(l, "grid", source, path, true);
    launch.block = parse_dim3(l, "block", source, path, true);
    launch.cluster = parse_dim3(l, "cluster", source, path, false);
    if (auto it = l.find("shared_bytes"); it != l.end()) {
      launch.shared_bytes = parse_size_expr(*it, source, path + ".shared_bytes");
    }
    if (auto it = l.find("tensor_maps"); it != l.end()) {
      std::string mpath = path + ".tensor_maps";
      ju::expect_type(*it, it->is_object(), "an object of named tensor maps", source, mpath);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m.key().empty()) throw input_error(ju::field(source, mpath), "empty map name");
        launch.tensor_maps.push_back(
            parse_tensor_map(m.key(), m.value(), source, ju::join_path(mpath, m.key())));
      }
    }
    for (const char* key : {"pdl", "cooperative"}) {
      if (auto it = l.find(key); it != l.end()) {
        ju::expect_type(*it, it->is_boolean(), "true or false", source, ju::join_path(path, key));
        (std::string(key) == "pdl" ? launch.pdl : launch.cooperative) = it->get<bool>();
      }
    }
    if (launch.pdl && i == 0) {
      throw input_error(ju::field(source, path + ".pdl"),
                        "programmatic dependent launch overlaps a launch with the one before it "
                        "in the plan; launch 0 has none (the harness's own work precedes it)");
    }
    std::string args_path = path + ".args";
    const auto& args = ju::require(l, "args", source, path);
    ju::expect_type(args, args.is_array(), "an array", source, args_path);
    for (std::size_t a = 0; a < args.size(); ++a) {
      std::string apath = ju::index_path(args_path, a);
      LaunchArg arg;
      if (args[a].is_string()) {
        arg.name = args[a].get<std::string>();
        if (arg.name.empty()) throw input_error(ju::field(source, apath), "empty argument name");
      } else if (args[a].is_object() && args[a].contains("tensor_map")) {
        if (args[a].size() != 1) {
          throw input_error(ju::field(source, apath),
                            "a tensor map argument is {\"tensor_map\": NAME}");
        }
        arg.tensor_map = ju::as_string(args[a]["tensor_map"], source, apath + ".tensor_map");
        if (launch.find_tensor_map(arg.tensor_map) == nullptr) {
          throw input_error(
              ju::field(source, apath + ".tensor_map"),
              fmt::format("'{}' is not declared in this launch's tensor_maps", arg.tensor_map));
        }
      } else if (args[a].is_object()) {
        arg.literal = parse_literal(args[a], source, apath);
      } else {
        ju::expect_type(args[a], false,
                        "a name, a typed literal like {\"int32\": 4} or {\"tensor_map\": NAME}",
                        source, apath);
      }
      launch.args.push_back(std::move(arg));
    }
    out.push_back(std::move(launch));
  }
  return out;
}

// "variants": [{"when": "M <= 64", "launches": [...]}, ..., {"launches": [...]}]. A condition
// that does not parse, a conditional last variant (a workload could match none) and an
// unconditional variant before the last (those after it could never run) are refused here,
// naming the field; conditions naming something other than an axis are refused by the plan
// rules, which know the definition.
std::vector<LaunchVariant> parse_variants(const json& variants, const std::string& source) {
  ju::expect_type(variants, variants.is_array(), "an array of {\"when\", \"launches\"}", source,
                  "variants");
  if (variants.empty()) throw input_error(ju::field(source, "variants"), "no variants");
  std::vector<LaunchVariant> out;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    std::string path = ju::index_path("variants", v);
    const auto& obj = ju::require_object(variants[v], source, path);
    ju::reject_unknown_keys(obj, {"when", "launches"}, source, path);
    LaunchVariant variant;
    bool last = v + 1 == variants.size();
    if (auto it = obj.find("when"); it != obj.end()) {
      std::string wpath = path + ".when";
      ju::expect_type(*it, it->is_string(), "a condition string such as \"M <= 64\"", source,
                      wpath);
      if (last) {
        throw input_error(ju::field(source, wpath),
                          "the last variant has no condition: it serves every workload that no "
                          "earlier variant took");
      }
      try {
        variant.when = Expr::parse(it->get<std::string>());
      } catch (const ExprError& e) {
        throw input_error(ju::field(source, wpath), e.what());
      }
    } else if (!last) {
      throw input_error(ju::field(source, path + ".when"),
                        fmt::format("missing: only the last variant may have no condition (variant "
                                    "{} would take every workload from those after it)",
                                    v));
    }
    variant.launches =
        parse_launches(ju::require(obj, "launches", source, path), source, path + ".launches");
    out.push_back(std::move(variant));
  }
  return out;
}

}  // namespace

const std::vector<Launch>& LaunchPlan::variant_launches(std::size_t index) const {
  return variants.empty() ? launches : variants.at(index).launches;
}

std::size_t LaunchPlan::variant_for(const Bindings& axes) const {
  for (std::size_t v = 0; v < variants.size(); ++v) {
    if (!variants[v].when || variants[v].when->eval(axes) != 0) return v;
  }
  return 0;  // no variants (the parser makes the last variant unconditional)
}

LaunchPlan LaunchPlan::variant_plan(std::size_t index) const {
  if (variants.empty()) return *this;
  LaunchPlan plan = *this;
  plan.launches = variants.at(index).launches;
  plan.variants.clear();
  return plan;
}

LaunchPlan LaunchPlan::resolved(const Bindings& axes) const {
  return variant_plan(variant_for(axes));
}

std::string LaunchPlan::variant_label(std::size_t index) const {
  if (variants.empty()) return "";
  const auto& when = variants.at(index).when;
  return fmt::format("{} ({})", index, when ? when->text() : "otherwise");
}

LaunchPlan parse_plan(const json& j, const std::string& source) {
  ju::require_object(j, source, "");
  // Unknown keys are refused so a typo ("grd") is an error, not a silent default.
  ju::reject_unknown_keys(j,
                          {"definition", "launches", "variants", "workspace_bytes",
                           "compile_options", "name", "author", "description"},
                          source, "");
  LaunchPlan plan;
  plan.raw = j;
  for (const char* key : {"name", "author", "description"}) plan.raw.erase(key);
  plan.definition = ju::string_or(j, "definition", "", source, "");
  check_definition_name(plan.definition, ju::field(source, "definition"));
  if (j.contains("launches") && j.contains("variants")) {
    throw input_error(ju::field(source, "variants"),
                      "a plan has either \"launches\" or \"variants\", not both");
  }
  if (auto it = j.find("variants"); it != j.end()) {
    plan.variants = parse_variants(*it, source);
  } else {
    plan.launches = parse_launches(ju::require(j, "launches", source, ""), source, "launches");
  }
  if (auto it = j.find("workspace_bytes"); it != j.end()) {
    plan.workspace_bytes = parse_size_expr(*it, source, "workspace_bytes");
  }
  if (auto it = j.find("compile_options"); it != j.end()) {
    ju::expect_type(*it, it->is_array(), "an array of strings", source, "compile_options");
    for (std::size_t i = 0; i < it->size(); ++i) {
      plan.compile_options.push_back(
          ju::as_string((*it)[i], source, ju::index_path("compile_options", i)));
    }
  }
  return plan;
}

std::pair<json, int> extract_plan_comment(const std::string& text, const std::string& file) {
  // Find the first block comment, skipping line comments and string/char literals.
  std::size_t i = 0, n = text.size();
  std::size_t start = std::string::npos;
  while (i < n) {
    char c = text[i];
    if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      start = i;
      break;
    } else if (c == '"' || c == '\'') {
      char quote = c;
      ++i;
      while (i < n && text[i] != quote && text[i] != '\n') i += text[i] == '\\' ? 2 : 1;
      ++i;
    } else {
      ++i;
    }
  }
  if (start == std::string::npos) {
    throw input_error(file,
                      "no /* kharness {...} */ comment: a single-file solution begins with "
                      "its launch plan as a block comment");
  }
  int line = line_column(text, start).first;
  std::size_t body = start + 2;
  while (body < n && std::isspace(static_cast<unsigned char>(text[body]))) ++body;
  if (text.compare(body, 8, "kharness") != 0) {
    throw input_error(
        fmt::format("{}:{}", file, line),
        "the first block comment is not a kharness plan (expected /* kharness {...} */)");
  }
  std::size_t end = text.find("*/", body);
  if (end == std::string::npos) {
    throw input_error(fmt::format("{}:{}", file, line), "unterminated /* kharness comment");
  }
  std::size_t json_start = body + 8;
  std::string payload = text.substr(json_start, end - json_start);
  // Offset the JSON's own line numbers so errors point at the line of the file.
  int payload_line = line_column(text, json_start).first;
  if (blank(payload)) {
    throw input_error(fmt::format("{}:{}", file, line), "the kharness comment holds no JSON plan");
  }
  json plan = json_util::parse_text<json>(payload, file, payload_line);
  return {plan, line};
}

Solution parse_single_file_solution(const std::string& text, const std::string& file_name) {
  if (blank(text)) throw input_error(file_name, "empty source");
  Solution s;
  s.form = SolutionForm::kSingleFile;
  s.origin = file_name;
  s.name = fs::path(file_name).stem().string();
  s.sources.push_back({file_name, text});  // diagnostics name the file as the user gave it
  auto [plan, line] = extract_plan_comment(text, file_name);
  take_metadata(plan, file_name, s);
  s.plan_source = fmt::format("{}:{}", file_name, line);
  s.plan = parse_plan(plan, s.plan_source);
  return s;
}

namespace {

// The `_families` folder a file lies in (operators/_families/<family>/..., or _families/_shared/),
// empty when it is in none.
fs::path families_dir_of(const fs::path& file) {
  const fs::path abs = fs::absolute(file).lexically_normal();
  for (fs::path dir = abs.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
    if (dir.parent_path().filename() == "_families") return dir.parent_path();
  }
  return {};
}

// The file a line `#include "name"` names, or empty for any other line.
std::string quoted_include(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return {};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return {};
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line[i] != '"') return {};
  const std::size_t end = line.find('"', i + 1);
  return end == std::string::npos ? std::string() : line.substr(i + 1, end - i - 1);
}

// Families whose kernels differ in a few lines share the rest through _families/_shared/: a
// family's seed.cu, baseline or reference.cu #includes "../_shared/<file>" (after its own plan
// and the #defines that pick its variant), as a compiler would read it. A solution has no include
// paths (docs/plans.md#forms), so the text loaded is whole all the same: each such line is replaced
// by the shared file's text (which may include further _shared files). Other #include lines are
// left for the source rules to judge.
std::string inline_shared_includes(const fs::path& file, const std::string& text,
                                   const fs::path& families, int depth) {
  constexpr int kMaxDepth = 8;
  const fs::path dir = fs::absolute(file).parent_path();
  std::string out;
  out.reserve(text.size());
  std::size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    std::size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string line = text.substr(start, end - start);
    start = end;
    const std::string name = quoted_include(line);
    // The include as a path inside the _families folder ("_shared/a.cuh"), by its text alone:
    // the file is then opened beneath _families with no symlink on the way (a link to
    // /proc/self/environ or a host file is refused, not inlined).
    const fs::path relative =
        name.empty() ? fs::path() : (dir / name).lexically_normal().lexically_relative(families);
    if (relative.empty() || *relative.begin() != "_shared" ||
        std::distance(relative.begin(), relative.end()) < 2) {
      out += line;
      continue;
    }
    const std::string where = fmt::format("{}:{}", file.string(), line_no);
    if (depth >= kMaxDepth) {
      throw input_error(where, fmt::format("#include \"{}\": _shared files nest deeper than {} "
                                           "(do they include each other?)",
                                           printable_line(name), kMaxDepth));
    }
    std::string why;
    std::optional<std::string> included =
        try_read_file_beneath(families, relative, kMaxSourceFileBytes, &why);
    if (!included) {
      throw input_error(where, fmt::format("#include \"{}\": {} in {}", printable_line(name), why,
                                           (families / "_shared").string()));
    }
    std::string body = inline_shared_includes(families / relative, *included, families, depth + 1);
    if (!body.empty() && body.back() != '\n') body += '\n';
    out += body;
  }
  return out;
}

}  // namespace

std::string read_single_file_source(const fs::path& path) {
  std::string text = read_regular_file(path, kMaxSourceFileBytes);
  const fs::path families = families_dir_of(path);
  if (families.empty()) return text;
  return inline_shared_includes(path, text, families, 0);
}

namespace {

// A single file, a folder or a FlashInfer-Bench JSON (see load_solution).
Solution load_any_form(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw input_error(path.string(), "no such file or folder");
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(path / "solution.json", ec)) {
      throw input_error(path.string(), "a solution folder needs a solution.json");
    }
    return load_folder(path);
  }
  if (path.filename() == "solution.json")
    return load_folder(path.parent_path().empty() ? "." : path.parent_path());
  if (path.extension() == ".json") {
    json j =
        json_util::parse_text<json>(read_regular_file(path, kMaxSourceFileBytes), path.string());
    json_util::require_object(j, path.string(), "");
    return load_flashinfer_bench(path, j);
  }
  Solution s = parse_single_file_solution(read_single_file_source(path), path.string());
  s.origin = path;
  return s;
}

}  // namespace

Solution load_solution(const fs::path& path) {
  // A field of a wrong type that no check caught is the file's error (exit 2), not an internal one.
  return json_util::reading(path.string(), [&] { return load_any_form(path); });
}

}  // namespace kharness
