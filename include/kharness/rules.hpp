// Rules a solution must obey before anything runs (status REJECTED, docs/pipeline.md#rules):
// device code only, includes limited to toolkit headers and the solution's own files, size
// limits, a plan consistent with the definition, and kernels whose parameters match the plan.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/solution.hpp"

namespace kharness {

struct PtxParam;
struct KernelInfo;

struct RuleViolation {
  std::string rule;  // stable identifier: "host_code", "include_path", "param_mismatch", ...
  std::string message;
  std::string file;  // empty when not about a file
  int line = 0;      // 1-based; 0 when not about a line
};

struct SourceRules {
  std::size_t max_file_bytes = 1 << 20;                    // one source file
  std::size_t max_total_bytes = 4 << 20;                   // all sources together
  std::vector<std::filesystem::path> system_include_dirs;  // the toolkit's include/
  // A CUTLASS include root (CutlassRoot::include_dir): names under its cute/ and cutlass/ are
  // allowed; empty: none was found, and such an include is refused saying how to provide one.
  std::filesystem::path cutlass_include_dir;
};

std::vector<RuleViolation> check_source_rules(const Solution& solution, const SourceRules& rules);
// Names in expressions and args resolve against the definition; every workload's launch
// geometry evaluates (no division by zero, positive grid/block, within hardware limits).
std::vector<RuleViolation> check_plan_rules(const LaunchPlan& plan, const Definition& definition,
                                            const std::vector<Workload>& workloads);
// Each launched kernel exists in the compiled module and takes the plan's arguments.
std::vector<RuleViolation> check_kernel_interface(const LaunchPlan& plan,
                                                  const Definition* definition,
                                                  const std::vector<KernelInfo>& kernels);

// The compiled module's own rules (device_heap: no malloc/free/new/delete in device code).
std::vector<RuleViolation> check_ptx_rules(const std::string& ptx);

}  // namespace kharness
