// kharness profile SOLUTION --operator NAME [--workload UUID] [--json] [--metrics M,...]
// and the hidden worker mode the counters are collected in.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "kharness/profile.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

struct ProfileArgs {
  std::string solution;
  std::string operator_name;
  std::string workload;
  std::string arch;
  std::vector<std::string> metrics;
  double timeout = 120;
  double launch_timeout = 10;
  std::string seed;
  bool no_cache = false;
  bool json = false;
};

// diagnosis_text, then every counter of every kernel with where it came from.
std::string render_profile(const Profile& p) {
  std::string out = diagnosis_text(p);
  for (const KernelProfile& k : p.kernels) {
    Table t({"  " + k.kernel + " (launch " + std::to_string(k.launch) + ")", "value", "source"});
    for (const auto& [name, m] : k.metrics) {
      std::string src = m.source;
      if (!m.actual_name.empty()) src += " (" + m.actual_name + ")";
      if (!m.value && !m.note.empty()) src += ": " + m.note;
      t.add({"  " + name, m.value ? fmt::format("{:.6g}", *m.value) : "missing", src});
    }
    for (const StallReason& s : k.stalls)
      t.add({"  stall " + s.reason, fmt::format("{:.1f}%", s.percent), "cupti"});
    const KernelStatic& s = k.statics;
    auto known = [](std::int64_t v) { return v < 0 ? std::string("?") : std::to_string(v); };
    t.add({"  registers / spill stores, loads (B) / stack (B)",
           fmt::format("{} / {}, {} / {}", known(s.registers), known(s.spill_store_bytes),
                       known(s.spill_load_bytes), known(s.stack_bytes)),
           "ptxas"});
    t.add({"  shared memory static + dynamic (B)",
           fmt::format("{} + {}", known(s.static_shared_bytes), s.dynamic_shared_bytes),
           "ptxas, plan"});
    t.add({"  tensor-core instructions (" + s.expected_tensor_instructions + ")",
           s.tensor_cores + (s.tensor_instructions.empty()
                                 ? std::string()
                                 : " (" + join(s.tensor_instructions, ", ") + ")"),
           s.disassembler});
    out += t.render();
  }
  out += fmt::format("  {} replay pass(es) per kernel, {:.2f} s\n", p.passes, p.seconds);
  return out;
}

ExitCode run_profile(const ProfileArgs& args, const GlobalOptions& global) {
  if (args.timeout <= 0) throw input_error("--timeout", "must be > 0");
  validate_launch_timeout(args.launch_timeout);
  require_compile_sandbox("profile");
  ProfileRequest request;
  request.solution = args.solution;
  request.target = make_target(args.operator_name, global, resolve_arch(args.arch), args.no_cache);
  request.workload = args.workload;
  request.timeout_seconds = args.timeout;
  request.launch_timeout_seconds = args.launch_timeout;
  request.seed = parse_seed_flag("--seed", args.seed);
  request.extra_metrics = args.metrics;
  Profile p = profile_solution(request);
  if (args.json) {
    nlohmann::json j = to_json(p);
    j["diagnosis_text"] = diagnosis_text(p);
    std::fputs((json_util::dump(j, 2) + "\n").c_str(), stdout);
  } else {
    std::fputs(render_profile(p).c_str(), stdout);
  }
  return ExitCode::kPassed;
}

}  // namespace

Runner setup_profile(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  add_solution_options(app, &args->solution, &args->operator_name);
  app.add_option("--workload", args->workload,
                 "Workload uuid or prefix (default: the operator's first)")
      ->type_name("UUID");
  app.add_option("--metrics", args->metrics,
                 "More CUPTI metrics to collect (comma-separated; unsupported ones are reported "
                 "missing)")
      ->delimiter(',')
      ->type_name("NAME");
  app.add_option("--arch", args->arch, "Target (default: this GPU)")->type_name("ARCH");
  app.add_option("--timeout", args->timeout, "Wall-clock limit of the worker in seconds (120)");
  add_launch_timeout_option(app, &args->launch_timeout);
  app.add_option("--seed", args->seed, "Seed of the inputs (default: random)");
  app.add_flag("--no-cache", args->no_cache, "Bypass the compile cache");
  app.add_flag("--json", args->json, "Print the profile as JSON (schema kharness.profile/1)");
  return [args](const GlobalOptions& global) { return run_profile(*args, global); };
}

}  // namespace kharness::cli
