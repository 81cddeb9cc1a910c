// kharness doctor [--json]: what this machine can do. Exit 0 when a GPU is ready, 3 when not.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "bench/measure.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/sandbox.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

std::string archive_dir(const GlobalOptions& global) {
  if (!global.archive_dir.empty()) return global.archive_dir.string() + " (--archive)";
  const char* env = std::getenv("KHARNESS_ARCHIVE");
  return env && *env ? std::string(env) + " (KHARNESS_ARCHIVE)"
                     : std::string("./.kharness (default)");
}

// The compile sandbox: Landlock's ABI, or why it is missing and what that means.
std::string sandbox_line() {
  const sandbox::LandlockSupport l = sandbox::landlock_support();
  const CompileLimits limits = default_compile_limits();
  std::string limits_text = fmt::format(
      "NVRTC in a child process: {:.3g} s, {:.3g} GiB, scrubbed "
      "environment",
      limits.timeout_seconds, static_cast<double>(limits.address_space_bytes) / (1ULL << 30));
  if (l.available())
    return fmt::format("Landlock ABI {} (compiler reads the CUDA toolkit only, writes nothing); {}",
                       l.abi, limits_text);
  return fmt::format(
      "NO Landlock: {}; check, validate, bench, score, run and profile refuse "
      "untrusted solutions{}; {}",
      l.reason,
      limits.require_landlock ? " unless --allow-unsandboxed" : " (allowed: --allow-unsandboxed)",
      limits_text);
}

// The CUTLASS root solutions may include CuTe and CUTLASS headers from: its version, folder and
// origin, or why there is none. A bad KHARNESS_CUTLASS is reported here, not fatal.
struct CutlassLine {
  std::optional<CutlassRoot> root;
  std::string problem;  // set when there is no root
};
CutlassLine cutlass_line() {
  CutlassLine line;
  try {
    line.root = find_cutlass();
    if (!line.root) line.problem = cutlass_missing_hint();
  } catch (const Error& e) {
    line.problem = e.message();
  }
  return line;
}

std::string mhz(const std::optional<int>& v) { return v ? fmt::format("{} MHz", *v) : "?"; }

// --measure: the copy bandwidth and GEMM rates this GPU reaches, against its datasheet, saved
// for `--sol measured`.
ExitCode run_measure(bool json) {
  bench::MeasuredPeaks m = bench::measure_peaks();
  bench::save_measured_peaks(m);
  std::string file = bench::measured_peaks_file(m.gpu, m.driver).string();
  const bench::GpuSpec* spec = nullptr;
  std::vector<bench::GpuSpec> specs;
  try {
    specs = bench::load_gpu_specs(data_dir() / "configs" / "gpus");
    spec = bench::match_gpu(specs, m.gpu);
  } catch (const Error&) {
  }
  if (json) {
    nlohmann::json j = bench::to_json(m);
    j["file"] = file;
    if (spec)
      j["datasheet"] = {{"dram_bandwidth_bytes_per_s", spec->dram_bandwidth},
                        {"peak_flops", spec->peak_flops}};
    std::fputs((json_util::dump(j, 2) + "\n").c_str(), stdout);
    return ExitCode::kPassed;
  }
  std::string out = fmt::format("measured on {} (driver {}), {}\n", m.gpu, m.driver, m.measured_at);
  Table t({"ceiling", "measured", "datasheet", "fraction"});
  auto row = [&](const std::string& what, double measured, double sheet, double unit,
                 const char* suffix) {
    t.add({what, measured > 0 ? fmt::format("{:.1f} {}", measured / unit, suffix) : "-",
           sheet > 0 ? fmt::format("{:.1f} {}", sheet / unit, suffix) : "-",
           measured > 0 && sheet > 0 ? fmt::format("{:.0f}%", 100 * measured / sheet) : "-"});
  };
  row("copy bandwidth", m.copy_bandwidth, spec ? spec->dram_bandwidth : 0, 1e12, "TB/s");
  for (const auto& [dtype, flops] : m.gemm_flops) {
    double sheet = 0;
    if (spec) {
      auto it = spec->peak_flops.find(dtype);
      if (it != spec->peak_flops.end()) sheet = it->second;
    }
    row("GEMM " + dtype + " (cuBLASLt 8192^3)", flops, sheet, 1e12, "TFLOP/s");
  }
  out += t.render();
  for (const auto& [what, note] : m.notes) out += fmt::format("note: {}: {}\n", what, note);
  out += fmt::format("saved to {}; `--sol measured` on bench/validate uses it\n", file);
  std::fputs(out.c_str(), stdout);
  return ExitCode::kPassed;
}

ExitCode run_doctor(bool json, const GlobalOptions& global) {
  EnvironmentReport r = probe_environment();
  OperatorRegistry registry = make_registry(global);
  std::vector<std::string> dirs;
  for (const auto& d : registry.search_dirs())
    dirs.push_back(fmt::format("{} ({})", d.path.string(), d.origin));
  if (json) {
    nlohmann::json j = to_json(r);
    j["schema"] = "kharness.doctor/1";
    j["operator_dirs"] = dirs;
    j["archive"] = archive_dir(global);
    j["compile_cache"] = default_cache_dir().string();
    j["cuda_include_dir"] = default_cuda_include_dir().string();
    const CutlassLine cutlass = cutlass_line();
    if (cutlass.root) {
      j["cutlass"] = {{"version", cutlass.root->version},
                      {"include_dir", cutlass.root->include_dir.string()},
                      {"origin", cutlass.root->origin}};
    } else {
      j["cutlass"] = {{"version", nullptr}, {"reason", cutlass.problem}};
    }
    const sandbox::LandlockSupport landlock = sandbox::landlock_support();
    const CompileLimits limits = default_compile_limits();
    j["sandbox"] = {{"landlock_abi", landlock.abi},
                    {"landlock_available", landlock.available()},
                    {"reason", landlock.reason},
                    {"compile_timeout_seconds", limits.timeout_seconds},
                    {"compile_address_space_bytes", limits.address_space_bytes},
                    {"allow_unsandboxed", !limits.require_landlock}};
    std::fputs((json_util::dump(j, 2) + "\n").c_str(), stdout);
    return r.gpu_ready() ? ExitCode::kPassed : ExitCode::kEnvironment;
  }
  std::string out = fmt::format("kharness {} (commit {}) on {} ({})\n\n", r.kharness_version,
                                r.kharness_commit, r.hostname, r.os);
  if (r.driver.available) {
    out += fmt::format("driver         NVIDIA {} (CUDA {})\n",
                       r.driver.nvidia_version.empty() ? "?" : r.driver.nvidia_version,
                       cuda_version_string(r.driver.cuda_version));
  } else {
    out += fmt::format("driver         none: {}\n", r.driver.reason);
  }
  out +=
      fmt::format("CUDA runtime   {} (static, built in)\n", cuda_version_string(r.runtime_version));
  out += fmt::format("NVRTC          {}\n", r.nvrtc_version.empty() ? "?" : r.nvrtc_version);
  const CutlassLine cutlass = cutlass_line();
  out += cutlass.root ? fmt::format("CUTLASS        {} in {} ({})\n", cutlass.root->version,
                                    cutlass.root->include_dir.string(), cutlass.root->origin)
                      : fmt::format("CUTLASS        none: {}\n", cutlass.problem);
  out += fmt::format("CUPTI          {}\n",
                     r.cupti_api_version ? fmt::format("API {}", r.cupti_api_version) : "?");
  out += fmt::format("NVML           {}\n",
                     r.nvml_available ? "available" : "not available (clocks unknown)");
  std::string counters = std::string(profiling_permission_name(r.profiling.permission));
  if (!r.profiling.reason.empty()) counters += " (" + r.profiling.reason + ")";
  out += fmt::format("counters       {}\n", counters);
  if (!r.profiling.fix.empty()) out += fmt::format("               fix: {}\n", r.profiling.fix);
  out += "\n";
  if (r.gpus.empty()) {
    out += r.driver.available
               ? "GPUs           none visible (check CUDA_VISIBLE_DEVICES)\n"
               : "GPUs           none: correctness, timing and profiling need a GPU;\n"
                 "               compile, operators and every CPU check work here\n";
  } else {
    Table gpus(
        {"#", "name", "cc", "arch", "SMs", "memory", "L2", "SM clock", "max SM", "mem clock"});
    for (const auto& g : r.gpus) {
      gpus.add({std::to_string(g.index), g.name, fmt::format("{}.{}", g.cc_major, g.cc_minor),
                g.arch, std::to_string(g.sm_count),
                human_bytes(static_cast<long long>(g.total_memory_bytes)),
                human_bytes(g.l2_cache_bytes), mhz(g.sm_clock_mhz), mhz(g.max_sm_clock_mhz),
                mhz(g.memory_clock_mhz)});
    }
    out += gpus.render();
  }
  out += "\n";
  out += fmt::format("operators      {}\n", join(dirs, "\n               "));
  out += fmt::format("archive        {}\n", archive_dir(global));
  out += fmt::format("compile cache  {}\n", default_cache_dir().string());
  out += fmt::format("CUDA headers   {}\n", default_cuda_include_dir().string());
  out += fmt::format("sandbox        {}\n", sandbox_line());
  for (const auto& note : r.notes) out += fmt::format("note: {}\n", note);
  std::fputs(out.c_str(), stdout);
  return r.gpu_ready() ? ExitCode::kPassed : ExitCode::kEnvironment;
}

}  // namespace

Runner setup_doctor(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto measure = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "Print as JSON");
  app.add_flag("--measure", *measure,
               "Measure this GPU's copy bandwidth and cuBLASLt GEMM rates and save them for "
               "`--sol measured` (needs a GPU)");
  return [json, measure](const GlobalOptions& global) {
    return *measure ? run_measure(*json) : run_doctor(*json, global);
  };
}

}  // namespace kharness::cli
