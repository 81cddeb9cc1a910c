// Helpers shared by subcommands: operator lookup, compile options, rendering compile results.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli.hpp"
#include "kharness/compile.hpp"
#include "kharness/operators.hpp"

namespace kharness::cli {

OperatorRegistry make_registry(const GlobalOptions& global);
// --arch as given (normalised), else this machine's GPU's target, else sm_90a.
std::string resolve_arch(const std::string& flag);
CompileOptions make_compile_options(const std::string& arch, bool use_cache);

// Diagnostics, violations and the per-kernel resource table, for a terminal (JSON: to_json).
std::string render_compile_text(const std::string& what, const CompileResult& result);
// One line per rule violation: "REJECTED [rule] file:line: message".
std::string render_violations(const std::vector<RuleViolation>& violations);

}  // namespace kharness::cli
