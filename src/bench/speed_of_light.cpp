#include "bench/speed_of_light.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "bench/measure.hpp"
#include "core/json_util.hpp"
#include "kharness/dtype.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::bench {
namespace ju = json_util;
namespace {

double positive_number(const nlohmann::json& obj, const char* key, const std::string& source,
                       const std::string& path = "") {
  std::string field = ju::join_path(path, key);
  double v = ju::as_number(ju::require(obj, key, source, path), source, field);
  if (!(v > 0.0))
    throw input_error(ju::field(source, field), fmt::format("must be > 0, got {}", v));
  return v;
}

std::int64_t positive_int(const nlohmann::json& obj, const char* key, const std::string& source) {
  std::int64_t v = ju::as_int(ju::require(obj, key, source, ""), source, key);
  if (v <= 0) throw input_error(ju::field(source, key), fmt::format("must be > 0, got {}", v));
  return v;
}

int positive_small_int(const nlohmann::json& obj, const char* key, const std::string& source) {
  std::int64_t v = positive_int(obj, key, source);
  if (v > 1'000'000)
    throw input_error(ju::field(source, key), fmt::format("implausible value {}", v));
  return static_cast<int>(v);
}

// Peak keys: dtype names plus "tf32" (float32 data on tensor cores).
std::vector<std::string> peak_keys() {
  std::vector<std::string> keys;
  for (DType d :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2,
        DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    keys.emplace_back(dtype_name(d));
  }
  keys.emplace_back("tf32");
  return keys;
}

// Evaluates an optional formula; nullopt (with `note` extended) when missing or failing.
std::optional<double> eval_formula(const std::optional<Expr>& formula, const char* what,
                                   const Bindings& axes, std::string& note) {
  auto add = [&](const std::string& s) { note += note.empty() ? s : "; " + s; };
  if (!formula) {
    add(fmt::format("the definition has no kharness.{} formula", what));
    return std::nullopt;
  }
  try {
    return static_cast<double>(formula->eval(axes));
  } catch (const ExprError& e) {
    add(fmt::format("kharness.{} '{}' cannot be evaluated: {}", what, formula->text(), e.what()));
    return std::nullopt;
  }
}

}  // namespace

GpuSpec parse_gpu_spec(const std::string& text, const std::string& source) {
  nlohmann::json j = ju::parse_text(text, source);
  ju::require_object(j, source, "");
  ju::reject_unknown_keys(
      j,
      {"match", "arch", "sm_count", "l2_bytes", "dram_bandwidth_bytes_per_s",
       "measured_copy_bandwidth_bytes_per_s", "max_sm_clock_mhz", "peak_flops", "schema", "notes"},
      source, "");
  GpuSpec g;
  g.source = source;
  std::string schema = ju::string_or(j, "schema", kGpuSpecSchema, source, "");
  if (schema != kGpuSpecSchema) {
    throw input_error(
        ju::field(source, "schema"),
        fmt::format("unsupported schema '{}' (expected '{}')", schema, kGpuSpecSchema));
  }
  g.match = ju::as_string(ju::require(j, "match", source, ""), source, "match");
  if (g.match.empty()) throw input_error(ju::field(source, "match"), "must not be empty");
  g.arch = ju::as_string(ju::require(j, "arch", source, ""), source, "arch");
  if (g.arch.rfind("sm_", 0) != 0) {
    throw input_error(ju::field(source, "arch"), fmt::format("expected sm_XY, got '{}'", g.arch));
  }
  g.sm_count = positive_small_int(j, "sm_count", source);
  g.l2_bytes = positive_int(j, "l2_bytes", source);
  g.max_sm_clock_mhz = positive_small_int(j, "max_sm_clock_mhz", source);
  g.dram_bandwidth = positive_number(j, "dram_bandwidth_bytes_per_s", source);
  if (j.contains("measured_copy_bandwidth_bytes_per_s") &&
      !j["measured_copy_bandwidth_bytes_per_s"].is_null()) {
    g.measured_copy_bandwidth = positive_number(j, "measured_copy_bandwidth_bytes_per_s", source);
  }
  g.notes = ju::string_or(j, "notes", "", source, "");
  const auto& peaks =
      ju::require_object(ju::require(j, "peak_flops", source, ""), source, "peak_flops");
  static const std::vector<std::string> known = peak_keys();
  for (auto it = peaks.begin(); it != peaks.end(); ++it) {
    std::string path = ju::join_path("peak_flops", it.key());
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      auto close = close_matches(it.key(), known, 1);
      throw input_error(ju::field(source, path),
                        close.empty()
                            ? fmt::format("unknown dtype (known: {})", join(known, ", "))
                            : fmt::format("unknown dtype (did you mean '{}'?)", close[0]));
    }
    g.peak_flops[it.key()] = positive_number(peaks, it.key().c_str(), source, "peak_flops");
  }
  if (g.peak_flops.empty()) throw input_error(ju::field(source, "peak_flops"), "no peak given");
  return g;
}

std::vector<GpuSpec> load_gpu_specs(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw input_error(dir.string(), "no such folder (expected GPU specs, one *.json per model)");
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      files.push_back(entry.path());
  }
  if (ec) throw input_error(dir.string(), "cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<GpuSpec> specs;
  for (const auto& file : files) {
    GpuSpec g = parse_gpu_spec(read_file(file.string()), file.string());
    for (const auto& other : specs) {
      if (other.match == g.match) {
        throw input_error(
            ju::field(file.string(), "match"),
            fmt::format("'{}' is also the match of {}", g.match, other.source.string()));
      }
    }
    specs.push_back(std::move(g));
  }
  return specs;
}

const GpuSpec* match_gpu(const std::vector<GpuSpec>& specs, const std::string& gpu_name) {
  const GpuSpec* best = nullptr;
  for (const auto& g : specs) {
    if (g.match.empty() || gpu_name.find(g.match) == std::string::npos) continue;
    if (!best || g.match.size() > best->match.size()) best = &g;
  }
  return best;
}

std::string compute_dtype(const GpuSpec& gpu, const Definition& definition) {
  // Fastest first; each entry lists the peaks that may serve it, in preference order.
  struct Choice {
    DType dtype;
    std::vector<const char*> peaks;
  };
  static const Choice kOrder[] = {
      {DType::kFloat8E4M3, {"float8_e4m3fn"}},
      {DType::kFloat8E5M2, {"float8_e5m2", "float8_e4m3fn"}},
      {DType::kBFloat16, {"bfloat16"}},
      {DType::kFloat16, {"float16"}},
      {DType::kFloat32, {"float32"}},
  };
  std::set<DType> present;
  for (const auto& t : definition.inputs) {
    if (!t.is_scalar() && is_floating(t.dtype)) present.insert(t.dtype);
  }
  for (const auto& c : kOrder) {
    if (!present.count(c.dtype)) continue;
    for (const char* p : c.peaks) {
      if (gpu.peak_flops.count(p)) return p;
    }
  }
  return gpu.peak_flops.count("float32") ? "float32" : "";
}

SolEstimate speed_of_light(const GpuSpec& gpu, const Definition& definition, const Bindings& axes,
                           bool use_measured_bandwidth) {
  SolEstimate e;
  std::optional<double> flops = eval_formula(definition.kharness.flops, "flops", axes, e.note);
  std::optional<double> bytes = eval_formula(definition.kharness.bytes, "bytes", axes, e.note);
  if (flops) {
    e.flops = *flops;
    e.peak_dtype = compute_dtype(gpu, definition);
    if (e.peak_dtype.empty()) {
      e.note += std::string(e.note.empty() ? "" : "; ") + gpu.match + " has no applicable peak";
    } else {
      e.compute_seconds = e.flops / gpu.peak_flops.at(e.peak_dtype);
    }
  }
  e.bandwidth = use_measured_bandwidth && gpu.measured_copy_bandwidth > 0.0
                    ? gpu.measured_copy_bandwidth
                    : gpu.dram_bandwidth;
  if (bytes && e.bandwidth > 0.0) {
    e.bytes = *bytes;
    e.memory_seconds = e.bytes / e.bandwidth;
  }
  e.seconds = std::max(e.compute_seconds, e.memory_seconds);
  if (e.seconds > 0.0) e.bound = e.compute_seconds >= e.memory_seconds ? "compute" : "memory";
  return e;
}

double sol_fraction(double sol_seconds, double measured_seconds) {
  if (!(sol_seconds > 0.0) || !(measured_seconds > 0.0)) return 0.0;
  return sol_seconds / measured_seconds;
}

LightCeilings light_ceilings(const GpuSpec& datasheet, const MeasuredPeaks* measured,
                             const GpuInfo& device) {
  LightCeilings c;
  c.gpu = datasheet.match;
  std::string measured_source = measured ? "measured " + measured->measured_at : "";
  for (const auto& [dtype, rate] : datasheet.peak_flops) {
    if (rate > c.peak_flops) {
      c.peak_flops = rate;
      c.peak_dtype = dtype;
      c.peak_source = "datasheet";
    }
  }
  if (measured) {
    for (const auto& [dtype, rate] : measured->gemm_flops) {
      if (rate > c.peak_flops) {
        c.peak_flops = rate;
        c.peak_dtype = dtype;
        c.peak_source = measured_source;
      }
    }
  }
  auto consider = [&](double bandwidth, const std::string& source) {
    if (std::isfinite(bandwidth) && bandwidth > c.bandwidth) {
      c.bandwidth = bandwidth;
      c.bandwidth_source = source;
    }
  };
  consider(datasheet.dram_bandwidth, "datasheet");
  // The spec's measured copy rate is ours, from an earlier machine; doctor's is this one's.
  consider(datasheet.measured_copy_bandwidth, "datasheet (measured copy)");
  if (measured) consider(measured->copy_bandwidth, measured_source);
  // Double data rate: bytes/s = bus bits / 8 * clock * 2. NVML's memory clock of HBM follows this
  // convention (H100 SXM: 5120 bits at 2619 MHz = 3.35 TB/s, its datasheet figure).
  int clock = device.max_memory_clock_mhz.value_or(device.memory_clock_mhz.value_or(0));
  if (device.memory_bus_width_bits > 0 && clock > 0) {
    consider(device.memory_bus_width_bits / 8.0 * clock * 1e6 * 2.0, "bus width x memory clock");
  }
  c.l2_bytes = std::max<std::int64_t>(datasheet.l2_bytes, device.l2_cache_bytes);
  return c;
}

nlohmann::json LowerBound::to_json() const {
  return {{"seconds", seconds},
          {"term", term},
          {"compute_seconds", compute_seconds},
          {"memory_seconds", memory_seconds},
          {"flops", flops},
          {"flops_formula", flops_formula},
          {"formula_bytes", formula_bytes},
          {"bytes_formula", bytes_formula},
          {"output_bytes", output_bytes},
          {"dram_bytes", dram_bytes},
          {"l2_bytes", ceilings.l2_bytes},
          {"gpu", ceilings.gpu},
          {"peak_flops", ceilings.peak_flops},
          {"peak_dtype", ceilings.peak_dtype},
          {"peak_source", ceilings.peak_source},
          {"bandwidth", ceilings.bandwidth},
          {"bandwidth_source", ceilings.bandwidth_source},
          {"margin", kFasterThanLightMargin},
          {"note", note}};
}

LowerBound physical_lower_bound(const Definition& definition, const Bindings& axes,
                                const LightCeilings& ceilings) {
  LowerBound b;
  b.ceilings = ceilings;
  const KharnessSpec& k = definition.kharness;
  const bool own_flops = k.min_flops.has_value(), own_bytes = k.min_bytes.has_value();
  const char* flops_name = own_flops ? "min_flops" : "flops";
  const char* bytes_name = own_bytes ? "min_bytes" : "bytes";
  const std::optional<Expr>& flops_expr = own_flops ? k.min_flops : k.flops;
  const std::optional<Expr>& bytes_expr = own_bytes ? k.min_bytes : k.bytes;
  if (flops_expr) b.flops_formula = fmt::format("kharness.{}: {}", flops_name, flops_expr->text());
  if (bytes_expr) b.bytes_formula = fmt::format("kharness.{}: {}", bytes_name, bytes_expr->text());
  std::optional<double> flops = eval_formula(flops_expr, flops_name, axes, b.note);
  std::optional<double> bytes = eval_formula(bytes_expr, bytes_name, axes, b.note);
  if (flops && *flops > 0 && ceilings.peak_flops > 0) {
    b.flops = *flops;
    b.compute_seconds = b.flops / ceilings.peak_flops;
  }
  if (bytes && *bytes > 0 && ceilings.bandwidth > 0) {
    b.formula_bytes = *bytes;
    // Outputs as the definition shapes them; in doubles, so no product overflows.
    std::optional<double> outputs = 0.0;
    for (const auto& t : definition.outputs) {
      try {
        double n = static_cast<double>(dtype_size(t.dtype));
        for (std::int64_t d : tensor_shape(t, axes)) n *= static_cast<double>(d);
        *outputs += n;
      } catch (const std::exception& e) {
        b.note += std::string(b.note.empty() ? "" : "; ") + "output " + t.name +
                  " has no size here (" + e.what() + "): all the bytes may be writes";
        outputs.reset();
        break;
      }
    }
    // Without the outputs' size, every byte might be a write L2 absorbs: the least is what
    // overflows L2. Otherwise the formula's outputs are capped at what it counts in all.
    const double l2 = static_cast<double>(std::max<std::int64_t>(0, ceilings.l2_bytes));
    double written = outputs ? std::min(*outputs, b.formula_bytes) : b.formula_bytes;
    b.output_bytes = outputs ? *outputs : 0.0;
    double read = b.formula_bytes - written;
    b.dram_bytes = read + std::max(0.0, written - l2);
    b.memory_seconds = b.dram_bytes / ceilings.bandwidth;
  }
  if (!(ceilings.peak_flops > 0) && flops)
    b.note += std::string(b.note.empty() ? "" : "; ") + "no peak FLOP rate";
  if (!(ceilings.bandwidth > 0) && bytes)
    b.note += std::string(b.note.empty() ? "" : "; ") + "no DRAM bandwidth";
  b.seconds = std::max(b.compute_seconds, b.memory_seconds);
  if (!std::isfinite(b.seconds) || b.seconds < 0) b.seconds = 0.0;
  if (b.seconds > 0) b.term = b.compute_seconds >= b.memory_seconds ? "compute" : "memory";
  return b;
}

std::optional<Failure> faster_than_light(double latency_seconds, const LowerBound& bound) {
  if (!(bound.seconds > 0) || !(latency_seconds > 0) ||
      !(latency_seconds < kFasterThanLightMargin * bound.seconds)) {
    return std::nullopt;
  }
  const LightCeilings& c = bound.ceilings;
  std::string why = bound.term == "compute"
                        ? fmt::format("{:.3g} FLOP at {:.3g} FLOP/s ({} peak, {})", bound.flops,
                                      c.peak_flops, c.peak_dtype, c.peak_source)
                        : fmt::format("{:.3g} bytes across DRAM at {:.3g} B/s ({})",
                                      bound.dram_bytes, c.bandwidth, c.bandwidth_source);
  Failure f;
  f.kind = kFasterThanLight;
  f.message = fmt::format(
      "timed {:.3f} us, below the physical lower bound of {:.3f} us ({}): the time cannot be real",
      latency_seconds * 1e6, bound.seconds * 1e6, why);
  f.evidence = bound.to_json();
  f.evidence["latency"] = latency_seconds;
  f.evidence["bound_seconds"] = bound.seconds;
  f.evidence["ratio"] = latency_seconds / bound.seconds;
  return f;
}

void flag_faster_than_light(const Definition& definition, const Bindings& axes,
                            const std::vector<GpuSpec>& specs, const GpuInfo& device,
                            const std::string& driver, WorkloadVerdict& wv, Verdict& verdict) {
  try {
    const GpuSpec* spec = match_gpu(specs, device.name);
    if (!spec || !wv.timing.candidate) return;
    std::optional<MeasuredPeaks> measured = load_measured_peaks(device.name, driver);
    LowerBound bound = physical_lower_bound(
        definition, axes, light_ceilings(*spec, measured ? &*measured : nullptr, device));
    if (!(bound.seconds > 0)) return;
    wv.timing.lower_bound = bound.to_json();
    if (auto suspect = faster_than_light(wv.timing.candidate->latency, bound)) {
      suspect->evidence["workload"] = wv.uuid;
      wv.suspect = std::move(suspect);
      verdict.suspect = kFasterThanLight;
    }
  } catch (const std::exception&) {
    // a bound that cannot be formed flags nothing: the verdict keeps its time unjudged
  }
}

}  // namespace kharness::bench
