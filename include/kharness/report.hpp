// Report writers: a list of verdicts rendered as JUnit XML, a Markdown leaderboard,
// FlashInfer-Bench Trace lines, or one score JSON (docs/verdicts.md#verdict-fields).
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
// named "compile" (COMPILE_ERROR) or "solution" holding the solution's failure. A passed solution
// with no workload (--compile-only) gets one passing testcase named "compile". A workload timed
// faster than light (WorkloadVerdict::suspect) is a <failure type="faster_than_light">: the
// suspect verdict exits 1, and a CI report must not show green where the gate is red.
std::string to_junit(const std::vector<Verdict>& verdicts, const std::string& suite_name);

// A Markdown leaderboard for a CI job summary: one row per solution, ranked clean passes first,
// then suspect passes (status "PASSED (SUSPECT)", failure "suspect: faster_than_light", under a
// warning line), then failures; within each, mean speedup (descending), then name; then, per
// workload, the best passing solution (never a suspect one).
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
// COMPILE_ERROR with "REJECTED" at the start of evaluation.log, and a workload timed faster than
// light, which FlashInfer-Bench would rank, as RUNTIME_ERROR with "SUSPECT" at the start of its
// log (the suspect solution's other workloads keep their status, the log naming the suspicion).
std::string to_traces_jsonl(const std::vector<Verdict>& verdicts, const TraceOptions& options = {});

// {"schema": "kharness.score/1", "generated_at": ISO-8601 UTC, "solutions": [verdict JSON...],
//  "summary": {"solutions", "passed", "suspect", "failed"}}: passed counts clean passes, suspect
//  the PASSED verdicts timed faster than light. `generated_at` empty means now.
nlohmann::json to_report_json(const std::vector<Verdict>& verdicts,
                              const std::string& generated_at = "");

// ---------------------------------------------------------------------------------------------
// The HTML report of an archive (`kharness report --html`): one self-contained file (no network,
// no scripts) with inline SVG charts. The CLI gathers the data from the archive; this renders it.

struct HtmlCandidate {
  std::string id;
  int seq = 0;
  std::string name;
  std::string status;    // PASSED, COMPILE_ERROR, ...
  double speedup = 0.0;  // mean speedup over the baseline; 0 when not timed
  bool cached = false;
};

struct HtmlRun {
  std::string id, started_at, state, command, operator_name;
  std::vector<HtmlCandidate> candidates;  // in evaluation order
};

struct HtmlWorkload {
  std::string label;  // uuid prefix and axes
  double speedup = 0.0;
  double sol_fraction = 0.0;
  double latency = 0.0;  // seconds
  double flops = 0.0;    // per call, from the definition's formula; 0 when unknown
  double bytes = 0.0;
};

struct HtmlBest {
  std::string operator_name, candidate_id, name, gpu;
  double speedup = 0.0;
  std::vector<HtmlWorkload> workloads;
};

struct Roof {
  std::string gpu;
  double peak_flops = 0.0;  // FLOP/s
  std::string peak_dtype;
  double bandwidth = 0.0;  // bytes/s
};

// One shape of a model-check verdict timed end to end (model-check --time): each node's time in
// the baseline layer and in the substituted one, drawn as two stacked bars.
struct HtmlLayerTiming {
  std::string title;  // "llama-3.1-8b decode batch=16 kv=4096"
  struct Node {
    std::string name;
    std::string definition;
    bool substituted = false;
    double baseline_seconds = 0.0;
    double seconds = 0.0;
  };
  std::vector<Node> nodes;     // in execution order
  double baseline_span = 0.0;  // the measured layer spans, seconds
  double span = 0.0;
};

struct HtmlReport {
  std::string title = "kharness report";
  std::string generated_at;  // empty: now
  std::vector<HtmlRun> runs;
  std::vector<HtmlBest> best;  // one per operator
  std::vector<Roof> roofs;     // the GPUs the best candidates ran on
  // Model layers timed end to end. A report of these alone (model-check --html) has no archive
  // sections.
  std::vector<HtmlLayerTiming> layers;
};

// The timed shapes of a model-check verdict (its JSON, kharness/model_check.hpp's to_json), in
// order; shapes without "timing" are left out. Throws kharness::Error (usage) naming `source`
// and the field when a field is missing or of the wrong type.
std::vector<HtmlLayerTiming> layer_timings(const nlohmann::json& verdict,
                                           const std::string& source);

// A Markdown summary of a model-check verdict: the outcome, the tolerance, one row per shape
// (hidden-state drift after the last layer, the failure named by node and layer), and per timed
// shape the layer speedup and a table of nodes (time before and after, kernel speedup, share of
// the layer) with the check that node times sum to within 5% of the span.
std::string model_markdown(const nlohmann::json& verdict, const std::string& source);

// Charts: per run, speedup over the candidate index (failed candidates marked at 0, the running
// best as a step line); per best candidate, per-workload speedup bars; one roofline (achieved
// FLOP/s against arithmetic intensity, log-log, with each GPU's compute and bandwidth roofs).
// Well-formed XML (XHTML syntax) so that tools and tests can parse it.
std::string to_html(const HtmlReport& report);

// XML (and XHTML) text or attribute value: markup characters escaped, invalid UTF-8 replaced, and
// control characters XML 1.0 cannot hold written as a visible "\xNN".
std::string xml_escape(const std::string& raw, bool attribute);

// The current time as ISO-8601 UTC ("2025-01-31T12:00:00Z").
std::string utc_now_iso8601();

}  // namespace kharness::report
