// Report writers: a list of verdicts rendered as JUnit XML, a Markdown leaderboard,
// FlashInfer-Bench Trace lines, or one score JSON (DESIGN §4, §7).
// Pure functions: they return text or JSON and never print or touch files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kharness/verdict.hpp"

namespace kharness::report {

// JUnit XML (testsuites > testsuite > testcase): one testcase per solution × workload
// (classname = solution, name = "uuid [axis=value ...]"). A failed workload carries
// <failure type="KIND" message="...">evidence JSON</failure>. A failed solution with no failed
// workload (compile error, rejected plan, timeout between workloads) gets one extra testcase
// named "compile" (COMPILE_ERROR) or "solution" holding the solution's failure.
std::string to_junit(const std::vector<Verdict>& verdicts, const std::string& suite_name);

// A Markdown leaderboard for a CI job summary: one row per solution, ranked passed first, then
// mean speedup (descending), then name; then, per workload, the best passing solution.
std::string to_markdown(const std::vector<Verdict>& verdicts);

struct TraceOptions {
  // ISO-8601 time written as evaluation.timestamp; empty means now (UTC).
  std::string timestamp;
  // Known FlashInfer-Bench workloads: either workload objects {uuid, axes, inputs} or workload
  // trace lines {definition, workload: {...}}. They supply `inputs` (written as {} when no entry
  // matches a verdict's workload uuid) and, for a solution that failed before any workload ran,
  // the workloads to report it against (those of its definition; trace lines without a
  // definition match any). A failed solution with no workloads and no known workload yields no
  // line: a Trace needs a workload uuid.
  std::vector<nlohmann::json> workloads;
};

// FlashInfer-Bench Trace lines (JSON Lines, one per solution × workload, each ending in '\n').
// Statuses map one to one except REJECTED, which FlashInfer-Bench lacks: it is written as
// COMPILE_ERROR with "REJECTED" at the start of evaluation.log.
std::string to_traces_jsonl(const std::vector<Verdict>& verdicts, const TraceOptions& options = {});

// {"schema": "kharness.score/1", "generated_at": ISO-8601 UTC, "solutions": [verdict JSON...],
//  "summary": {"solutions", "passed", "failed"}}. `generated_at` empty means now.
nlohmann::json to_report_json(const std::vector<Verdict>& verdicts,
                              const std::string& generated_at = "");

// The current time as ISO-8601 UTC ("2025-01-31T12:00:00Z").
std::string utc_now_iso8601();

}  // namespace kharness::report
