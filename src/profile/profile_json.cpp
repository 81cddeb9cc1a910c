// The metric list and the JSON form of a Profile (schema kharness.profile/1): missing metrics are
// null with a note, never 0.
#include <fmt/format.h>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/profile.hpp"

namespace kharness {

using nlohmann::json;

const std::vector<std::string>& profile_metric_names() {
  static const std::vector<std::string> names = {
      metric::kDuration,
      metric::kSmThroughput,
      metric::kMemThroughput,
      metric::kDramThroughput,
      metric::kL2Throughput,
      metric::kL1Throughput,
      metric::kDramRead,
      metric::kDramWrite,
      metric::kL2HitRate,
      metric::kL1HitRate,
      metric::kAchievedOccupancy,
      metric::kIssueActive,
      metric::kFmaPipe,
      metric::kTensorPipe,
      metric::kGlobalLoadEfficiency,
      metric::kLocalLoadSectors,
      metric::kLocalStoreSectors,
      metric::kGlobalLoadSectors,
      metric::kWarpsActiveSum,
      metric::kRegistersPerThread,
      metric::kOccupancyLimitRegisters,
      metric::kOccupancyLimitSharedMem,
      metric::kOccupancyLimitWarps,
      metric::kOccupancyLimitBlocks,
      metric::kSharedMemConfigSize,
      metric::kTheoreticalOccupancy,
  };
  return names;
}

std::vector<std::string> profile_metric_alternatives(const std::string& name) {
  if (name == metric::kTensorPipe) {
    // Hopper names its warpgroup MMA pipe "gmma"; Volta–Ada (and Hopper's mma.sync) use "hmma".
    return {"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"};
  }
  if (name == metric::kL1Throughput) {
    return {"l1tex__throughput.avg.pct_of_peak_sustained_elapsed"};
  }
  return {};
}

std::optional<double> KernelProfile::value(const std::string& name) const {
  auto it = metrics.find(name);
  if (it == metrics.end()) return std::nullopt;
  return it->second.value;
}

namespace {

json diagnosis_json(const Diagnosis& d) {
  return {{"kind", d.kind},         {"limiter", d.limiter}, {"summary", d.summary},
          {"evidence", d.evidence}, {"notes", d.notes},     {"directions", d.directions}};
}

Diagnosis diagnosis_from(const json& j) {
  Diagnosis d;
  d.kind = j.value("kind", "unknown");
  d.limiter = j.value("limiter", "");
  d.summary = j.value("summary", "");
  d.evidence = j.value("evidence", std::vector<std::string>{});
  d.notes = j.value("notes", std::vector<std::string>{});
  d.directions = j.value("directions", std::vector<std::string>{});
  return d;
}

json statics_json(const KernelStatic& s) {
  auto known = [](std::int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  return {{"registers", known(s.registers)},
          {"spill_store_bytes", known(s.spill_store_bytes)},
          {"spill_load_bytes", known(s.spill_load_bytes)},
          {"stack_bytes", known(s.stack_bytes)},
          {"static_shared_bytes", known(s.static_shared_bytes)},
          {"dynamic_shared_bytes", s.dynamic_shared_bytes},
          {"tensor_cores", s.tensor_cores},
          {"tensor_instructions", s.tensor_instructions},
          {"expected_tensor_instructions", s.expected_tensor_instructions},
          {"disassembler", s.disassembler}};
}

KernelStatic statics_from(const json& j) {
  auto known = [&](const char* key) -> std::int64_t {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? -1 : json_util::whole_or(j, key, std::int64_t{-1});
  };
  KernelStatic s;
  s.registers = j.contains("registers") && !j["registers"].is_null()
                    ? json_util::whole_or(j, "registers", -1)
                    : -1;
  s.spill_store_bytes = known("spill_store_bytes");
  s.spill_load_bytes = known("spill_load_bytes");
  s.stack_bytes = known("stack_bytes");
  s.static_shared_bytes = known("static_shared_bytes");
  s.dynamic_shared_bytes = json_util::whole_or(j, "dynamic_shared_bytes", std::int64_t{0});
  s.tensor_cores = j.value("tensor_cores", "unknown");
  s.tensor_instructions = j.value("tensor_instructions", std::vector<std::string>{});
  s.expected_tensor_instructions = j.value("expected_tensor_instructions", "");
  s.disassembler = j.value("disassembler", "");
  return s;
}

json metric_json(const Metric& m) {
  json j = {{"value", m.value ? json(*m.value) : json(nullptr)}, {"source", m.source}};
  if (!m.actual_name.empty()) j["actual_name"] = m.actual_name;
  if (!m.note.empty()) j["note"] = m.note;
  return j;
}

Metric metric_from(const json& j) {
  Metric m;
  auto v = j.find("value");
  if (v != j.end() && !v->is_null()) m.value = v->get<double>();
  m.source = j.value("source", m.value ? "cupti" : "missing");
  m.actual_name = j.value("actual_name", "");
  m.note = j.value("note", "");
  return m;
}

}  // namespace

json to_json(const Profile& p) {
  json kernels = json::array();
  for (const KernelProfile& k : p.kernels) {
    json metrics = json::object();
    for (const auto& [name, m] : k.metrics) metrics[name] = metric_json(m);
    json stalls = json::array();
    for (const StallReason& s : k.stalls)
      stalls.push_back({{"reason", s.reason}, {"percent", s.percent}});
    kernels.push_back({{"launch", k.launch},
                       {"kernel", k.kernel},
                       {"grid", k.grid},
                       {"block", k.block},
                       {"metrics", metrics},
                       {"stalls", stalls},
                       {"static", statics_json(k.statics)},
                       {"diagnosis", diagnosis_json(k.diagnosis)}});
  }
  json j = {{"schema", p.schema},
            {"solution", p.solution},
            {"source", p.source},
            {"definition", p.definition},
            {"family", p.family},
            {"workload", p.workload},
            {"axes", p.axes},
            {"gpu", p.gpu},
            {"chip", p.chip},
            {"arch", p.arch},
            {"sm_count", p.sm_count},
            {"passes", p.passes},
            {"replay", p.replay},
            {"kernels", kernels},
            {"diagnosis", diagnosis_json(p.diagnosis)},
            {"warnings", p.warnings},
            {"gpu_seconds", p.gpu_seconds},
            {"seconds", p.seconds},
            {"phases", p.phases}};
  if (p.sol) {
    j["sol"] = {{"sol_seconds", p.sol->sol_seconds},
                {"measured_seconds", p.sol->measured_seconds},
                {"fraction", p.sol->fraction},
                {"bound", p.sol->bound},
                {"flops", p.sol->flops},
                {"bytes", p.sol->bytes},
                {"note", p.sol->note}};
  } else {
    j["sol"] = nullptr;
  }
  return j;
}

Profile profile_from_json(const json& j) {
  // A field of the wrong type becomes an input error that names the profile, never the JSON
  // library's own words (they name no field a user can find).
  return json_util::reading("profile", [&] {
    if (!j.is_object()) throw input_error("profile", "not a JSON object");
    Profile p;
    p.schema = j.at("schema").get<std::string>();
    if (p.schema != kProfileSchema) {
      throw input_error("profile: schema", fmt::format("'{}' is not {}", p.schema, kProfileSchema));
    }
    p.solution = j.value("solution", "");
    p.source = j.value("source", "");
    p.definition = j.value("definition", "");
    p.family = j.value("family", "");
    p.workload = j.value("workload", "");
    p.axes = j.value("axes", json::object());
    p.gpu = j.value("gpu", "");
    p.chip = j.value("chip", "");
    p.arch = j.value("arch", "");
    p.sm_count = json_util::whole_or(j, "sm_count", 0);
    p.passes = json_util::whole_or(j, "passes", 0);
    p.replay = j.value("replay", "");
    p.warnings = j.value("warnings", std::vector<std::string>{});
    p.gpu_seconds = j.value("gpu_seconds", 0.0);
    p.seconds = j.value("seconds", 0.0);
    p.phases = j.value("phases", json::object());
    if (j.contains("diagnosis")) p.diagnosis = diagnosis_from(j.at("diagnosis"));
    if (j.contains("sol") && !j.at("sol").is_null()) {
      const json& s = j.at("sol");
      SolSummary sol;
      sol.sol_seconds = s.value("sol_seconds", 0.0);
      sol.measured_seconds = s.value("measured_seconds", 0.0);
      sol.fraction = s.value("fraction", 0.0);
      sol.bound = s.value("bound", "");
      sol.flops = s.value("flops", 0.0);
      sol.bytes = s.value("bytes", 0.0);
      sol.note = s.value("note", "");
      p.sol = sol;
    }
    for (const json& kj : j.at("kernels")) {
      KernelProfile k;
      (void)kj.at("launch");  // required
      k.launch = json_util::whole_or(kj, "launch", 0);
      k.kernel = kj.at("kernel").get<std::string>();
      k.grid = kj.value("grid", std::array<unsigned, 3>{1, 1, 1});
      k.block = kj.value("block", std::array<unsigned, 3>{1, 1, 1});
      for (const auto& [name, mj] : kj.at("metrics").items()) k.metrics[name] = metric_from(mj);
      for (const json& s : kj.value("stalls", json::array()))
        k.stalls.push_back({s.at("reason").get<std::string>(), s.at("percent").get<double>()});
      if (kj.contains("static")) k.statics = statics_from(kj.at("static"));
      if (kj.contains("diagnosis")) k.diagnosis = diagnosis_from(kj.at("diagnosis"));
      p.kernels.push_back(std::move(k));
    }
    return p;
  });
}

}  // namespace kharness
