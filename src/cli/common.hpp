// Helpers shared by subcommands: operator lookup, compile options, rendering compile results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cli/cli.hpp"
#include "kharness/compile.hpp"
#include "kharness/operators.hpp"

namespace kharness::cli {

OperatorRegistry make_registry(const GlobalOptions& global);
// --arch as given (normalised), else this machine's GPU's target, else sm_90a.
std::string resolve_arch(const std::string& flag);
// A seed flag's value: decimal or 0x-hex, 0 to 2^64-1, nothing else (no sign, no trailing
// characters); empty gives a random seed. Throws input_error naming `option`.
std::uint64_t parse_seed_flag(const std::string& option, const std::string& text);

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

}  // namespace kharness::cli
