// Helpers shared by subcommands: operator lookup, compile options, rendering compile results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli.hpp"
#include "core/enum_names.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/target.hpp"
#include "kharness/verdict.hpp"

namespace kharness::cli {

OperatorRegistry make_registry(const GlobalOptions& global);
// --arch as given (normalised), else this machine's GPU's target, else sm_90a.
std::string resolve_arch(const std::string& flag);
// A seed flag's value: decimal or 0x-hex, 0 to 2^64-1, nothing else (no sign, no trailing
// characters); empty gives a random seed. Throws input_error naming `option`.
std::uint64_t parse_seed_flag(const std::string& option, const std::string& text);

// --gpus all|LIST (docs/pipeline.md#pools-and-gpus): the workers of a pool, one per entry; an entry
// may repeat (0,0 is two workers on GPU 0). LIST holds CUDA device ordinals (after
// CUDA_VISIBLE_DEVICES, as `kharness doctor` numbers them).
void add_gpus_option(CLI::App& app, std::string* gpus);
// The syntax alone, before anything loads the driver: "", "all" or ordinals separated by commas;
// else input_error naming --gpus (exit 2).
void validate_gpus_flag(const std::string& flag);
// One entry per worker. For GPU work: "" (not given) and "all" are every visible GPU; an ordinal
// this machine lacks, or GPUs of different architectures without --arch (`arch_given`), is an
// input error; without a driver or a GPU, one entry with no GPU (the evaluation then says why, as
// without a pool). Without GPU work (--compile-only): one entry per list element (all: per
// visible GPU), none of them with a GPU; "" is one worker.
std::vector<std::optional<GpuInfo>> resolve_gpus(const std::string& flag, bool gpu_work,
                                                 bool arch_given);
// The most workers of `gpus` on one GPU (1 without GPUs). A worker may wait that many timings for
// its GPU lock, so its whole-worker limit (--timeout) is multiplied by it: a hang is still cut
// off by the launch watchdog in seconds.
int gpu_sharing(const std::vector<std::optional<GpuInfo>>& gpus);

// --launch-timeout SECONDS, on every command that runs a worker: the launch watchdog's limit
// (device/watchdog.hpp). `seconds` holds the default the help states.
void add_launch_timeout_option(CLI::App& app, double* seconds);

// An option whose value is one of E's names (core/enum_names.hpp), stored straight into `value`:
// the help lists the names ("TEXT:{adaptive,official}") and a value that is none of them is bad
// usage naming them ("--timing: foo not in {adaptive,official}"), as CLI11's IsMember words it.
template <class E>
CLI::Option* add_enum_option(CLI::App& app, const std::string& name, E* value,
                             const std::string& help) {
  std::string names;
  for (const auto& [e, n] : enum_names<E>()) names += (names.empty() ? "" : ",") + std::string(n);
  const std::string allowed = "{" + names + "}";
  // A transform: the name becomes the enum's number, which CLI11 stores into the enum.
  CLI::Validator by_name(
      [allowed](std::string& input) -> std::string {
        for (const auto& [e, n] : enum_names<E>()) {
          if (n == input) {
            input = std::to_string(static_cast<int>(e));
            return {};
          }
        }
        return input + " not in " + allowed;
      },
      allowed);
  return app.add_option(name, *value, help)->transform(by_name)->type_name("TEXT");
}
// Before anything runs: > 0 (NaN refused), else input_error naming --launch-timeout (exit 2).
void validate_launch_timeout(double seconds);

// Files and folders the user named (--out DIR, --json FILE, --html FILE, ...). One that cannot be
// created or written (a file where a folder is wanted, no permission) is bad usage naming the
// option, not an internal error.
void make_output_dir(const std::string& option, const std::filesystem::path& dir);
void write_output(const std::string& option, const std::filesystem::path& file,
                  std::string_view content);
// Before a long evaluation: fails now, as write_output would later, if `file` cannot be written.
void check_output_file(const std::string& option, const std::filesystem::path& file);

// Commands that evaluate untrusted solutions (check, validate, bench, score, run, profile) call
// this first: where Linux Landlock is unavailable it throws an environment error (exit 3) unless
// --allow-unsandboxed (KHARNESS_ALLOW_UNSANDBOXED=1) was given, then it warns.
void require_compile_sandbox(const std::string& command);

// Diagnostics, violations and the per-kernel resource table, for a terminal (JSON: to_json).
std::string render_compile_text(const std::string& what, const CompileResult& result);
// One line per rule violation: "REJECTED [rule] file:line: message".
std::string render_violations(const std::vector<RuleViolation>& violations);

// The exit code of verdicts (docs/verdicts.md#exit-codes): 0 when every verdict is a clean pass; 1
// when any failed or is suspect (a PASSED verdict timed faster than light).
ExitCode exit_code_of(const std::vector<Verdict>& verdicts);

// The positional solution of compile, export and profile, and --operator (which every command that
// judges a solution has).
void add_operator_option(CLI::App& app, std::string* operator_name);
void add_solution_options(CLI::App& app, std::string* solution, std::string* operator_name);

// The target of a command's evaluations: --operator, the catalogue folders of the global options,
// the resolved architecture, and --no-cache.
Target make_target(std::string operator_name, const GlobalOptions& global, std::string arch,
                   bool no_cache);

}  // namespace kharness::cli
