#include "cli/common.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "cli/table.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/sandbox.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {

OperatorRegistry make_registry(const GlobalOptions& global) {
  return OperatorRegistry::from_environment(global.operators_dirs);
}

std::string resolve_arch(const std::string& flag) {
  if (!flag.empty()) return normalize_arch(flag);
  std::string arch = default_arch_for_device();
  return arch.empty() ? std::string("sm_90a") : normalize_arch(arch);
}

void add_gpus_option(CLI::App& app, std::string* gpus) {
  app.add_option("--gpus", *gpus,
                 "GPUs to evaluate on, one worker each: all (default) or ordinals such as 0,2,3; "
                 "repeat one (0,0) for two workers sharing it (timing never overlaps)")
      ->type_name("all|LIST");
}

namespace {

// The ordinals of a LIST; nullopt for "" and "all".
std::optional<std::vector<int>> parse_gpus_flag(const std::string& flag) {
  if (flag.empty() || flag == "all") return std::nullopt;
  std::vector<int> out;
  std::string item;
  auto bad = [&] {
    return input_error("--gpus", fmt::format("expected 'all' or device ordinals separated by "
                                             "commas (0,1 or 0,0), got '{}'",
                                             printable_line(bounded(flag, 60))));
  };
  for (std::size_t i = 0; i <= flag.size(); ++i) {
    if (i == flag.size() || flag[i] == ',') {
      if (item.empty() || item.size() > 4) throw bad();
      out.push_back(std::stoi(item));
      item.clear();
    } else if (std::isdigit(static_cast<unsigned char>(flag[i]))) {
      item += flag[i];
    } else {
      throw bad();
    }
  }
  return out;
}

}  // namespace

void validate_gpus_flag(const std::string& flag) { parse_gpus_flag(flag); }

std::vector<std::optional<GpuInfo>> resolve_gpus(const std::string& flag, bool gpu_work,
                                                 bool arch_given) {
  std::optional<std::vector<int>> list = parse_gpus_flag(flag);
  std::vector<std::optional<GpuInfo>> out;
  if (!gpu_work) {
    std::size_t n = list ? list->size() : 1;
    if (!list && flag == "all") {
      EnvironmentReport env = probe_environment();
      n = std::max<std::size_t>(1, env.gpus.size());
    }
    out.resize(n);
    return out;
  }
  EnvironmentReport env = probe_environment();
  if (!env.gpu_ready()) return {std::nullopt};
  if (!list) {
    for (const auto& g : env.gpus) out.emplace_back(g);
  } else {
    for (int ordinal : *list) {
      if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= env.gpus.size())
        throw input_error("--gpus", fmt::format("no GPU {} (this machine has {} visible: 0 to {})",
                                                ordinal, env.gpus.size(), env.gpus.size() - 1));
      out.emplace_back(env.gpus[static_cast<std::size_t>(ordinal)]);
    }
  }
  if (!arch_given) {
    for (const auto& g : out) {
      if (g->arch != out[0]->arch)
        throw input_error("--gpus", fmt::format("GPUs of different architectures ({} and {}): "
                                                "give --arch, or GPUs of one kind",
                                                out[0]->arch, g->arch));
    }
  }
  return out;
}

int gpu_sharing(const std::vector<std::optional<GpuInfo>>& gpus) {
  std::map<std::string, int> per_gpu;
  int most = 1;
  for (const auto& g : gpus) {
    if (g) most = std::max(most, ++per_gpu[g->uuid.empty() ? std::to_string(g->index) : g->uuid]);
  }
  return most;
}

void make_output_dir(const std::string& option, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw input_error(option,
                      fmt::format("cannot create the folder '{}': {}", dir.string(), ec.message()));
  }
}

namespace {

// The folder `file` goes into exists, and `file` is not itself a folder.
void prepare_output_file(const std::string& option, const std::filesystem::path& file) {
  if (file.has_parent_path()) make_output_dir(option, file.parent_path());
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw input_error(option, fmt::format("'{}' is a folder, not a file", file.string()));
}

}  // namespace

void write_output(const std::string& option, const std::filesystem::path& file,
                  std::string_view content) {
  prepare_output_file(option, file);
  try {
    write_file_atomic(file.string(), content);
  } catch (const std::exception& e) {
    throw input_error(option, fmt::format("cannot write '{}': {}", file.string(), e.what()));
  }
}

void require_compile_sandbox(const std::string& command) {
  const sandbox::LandlockSupport landlock = sandbox::landlock_support();
  if (landlock.available()) return;
  if (default_compile_limits().require_landlock) {
    throw environment_error(fmt::format(
        "{}: Linux Landlock is unavailable ({}), so the compiler cannot be confined to the CUDA "
        "toolkit's files; --allow-unsandboxed evaluates untrusted solutions anyway (kharness "
        "doctor shows the sandbox)",
        command, landlock.reason));
  }
  spdlog::warn(
      "{}: Landlock is unavailable ({}); compiling without the file sandbox "
      "(--allow-unsandboxed)",
      command, landlock.reason);
}

void check_output_file(const std::string& option, const std::filesystem::path& file) {
  prepare_output_file(option, file);
  std::error_code ec;
  // Opening for append creates the file if needed and leaves an existing one as it is.
  bool existed = std::filesystem::exists(file, ec);
  std::ofstream probe(file, std::ios::app);
  if (!probe) {
    throw input_error(option,
                      fmt::format("cannot write '{}': {}", file.string(), std::strerror(errno)));
  }
  probe.close();
  if (!existed) std::filesystem::remove(file, ec);
}

namespace {

std::string location(const std::string& file, int line) {
  if (file.empty()) return "";
  return line > 0 ? fmt::format("{}:{}: ", file, line) : file + ": ";
}

std::string param_summary(const KernelInfo& k) {
  std::vector<std::string> parts;
  for (const auto& p : k.params) parts.push_back(fmt::format("{}", p.type));
  return fmt::format("{} ({})", k.params.size(), join(parts, ", "));
}

std::string num_or_unknown(long long v) { return v < 0 ? "?" : std::to_string(v); }

}  // namespace

std::string render_violations(const std::vector<RuleViolation>& violations) {
  std::string out;
  for (const auto& v : violations) {
    out += fmt::format("  REJECTED [{}] {}{}\n", v.rule, location(v.file, v.line),
                       printable_line(v.message));
  }
  return out;
}

std::string render_compile_text(const std::string& what, const CompileResult& r) {
  std::string out =
      fmt::format("{}: {} for {}{} in {:.3f} s{}\n", what, status_name(r.status), r.arch,
                  r.cutlass_version.empty() ? "" : " with CUTLASS " + r.cutlass_version, r.seconds,
                  r.cache_hit ? " (compile cache hit)" : "");
  out += render_violations(r.violations);
  for (const auto& d : r.diagnostics) {
    out +=
        fmt::format("  {}{}: {}\n", location(d.file, d.line), severity_name(d.severity), d.message);
  }
  if (!r.kernels.empty()) {
    Table table({"kernel", "registers", "spill st/ld", "smem", "cmem", "stack", "params"});
    for (const auto& k : r.kernels) {
      table.add({k.name, num_or_unknown(k.registers),
                 fmt::format("{}/{} B", num_or_unknown(k.spill_store_bytes),
                             num_or_unknown(k.spill_load_bytes)),
                 human_bytes(k.shared_bytes), human_bytes(k.const_bytes),
                 human_bytes(k.stack_bytes), param_summary(k)});
    }
    std::string rendered = table.render();
    std::string indented;
    std::size_t start = 0;
    while (start < rendered.size()) {
      std::size_t end = rendered.find('\n', start);
      indented += "  " + rendered.substr(start, end - start + 1);
      start = end + 1;
    }
    out += indented;
  }
  return out;
}

std::uint64_t parse_seed_flag(const std::string& option, const std::string& text) {
  if (text.empty()) {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  // stoull accepts a sign (and wraps "-5"); a seed is written without one.
  if (std::isdigit(static_cast<unsigned char>(text[0]))) {
    try {
      std::size_t used = 0;
      const std::uint64_t seed = std::stoull(text, &used, 0);
      if (used == text.size()) return seed;
    } catch (const std::exception&) {  // out of range, or no digits after 0x
    }
  }
  throw input_error(option, fmt::format("'{}' is not an unsigned 64-bit integer", text));
}

ExitCode exit_code_of(const std::vector<Verdict>& verdicts) {
  bool clean = std::all_of(verdicts.begin(), verdicts.end(),
                           [](const Verdict& v) { return v.clean_pass(); });
  return clean ? ExitCode::kPassed : ExitCode::kFailed;
}

void add_operator_option(CLI::App& app, std::string* operator_name) {
  app.add_option("--operator", *operator_name,
                 "Operator name or definition file (default: the plan's \"definition\")")
      ->type_name("NAME");
}

void add_solution_options(CLI::App& app, std::string* solution, std::string* operator_name) {
  app.add_option("solution", *solution,
                 "A .cu file, a folder with solution.json, or a FlashInfer-Bench Solution JSON")
      ->required();
  add_operator_option(app, operator_name);
}

Target make_target(std::string operator_name, const GlobalOptions& global, std::string arch,
                   bool no_cache) {
  Target t;
  t.operator_name = std::move(operator_name);
  t.operators_dirs = global.operators_dirs;
  t.arch = std::move(arch);
  t.use_cache = !no_cache;
  return t;
}

void add_launch_timeout_option(CLI::App& app, double* seconds) {
  app.add_option("--launch-timeout", *seconds,
                 fmt::format("A launch still running after this many seconds is a hang: TIMEOUT "
                             "now, not at --timeout (default {:g})",
                             *seconds))
      ->type_name("SECONDS");
}

void validate_launch_timeout(double seconds) {
  if (!(seconds > 0)) throw input_error("--launch-timeout", "must be > 0 seconds");
}

}  // namespace kharness::cli
