// Run-to-run comparison (`kharness compare OLD NEW`): per solution × workload, the latency ratio
// new/old and a call that accounts for both sides' measured noise, in the spirit of nvbench's
// nvbench_compare.py. Pure functions: they return values and text, and never print.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/verdict.hpp"

namespace kharness::report {

// One side of a row: a workload's timed candidate latency (timing.candidate of a verdict).
struct TimedSide {
  std::string status;  // the workload's status
  double latency = 0;  // seconds; 0 when not timed
  // Relative standard error of the latency estimate (timing.candidate.noise; else cv/sqrt(count));
  // negative when unknown (too few samples, not timed).
  double noise = -1;
  std::size_t count = 0;
  bool timed() const { return latency > 0; }
};

// The calls, in the order a table sorts them by severity.
//   slower / faster  the ratio is beyond `sigmas` times the combined noise
//   same             within it, and that band is narrow (below noise_limit)
//   unclear          within a band too wide to say "same", or a side's noise unknown
//   failed           the workload failed on the new side (PASSED, or absent, on the old)
//   fixed            it failed on the old side and passes on the new
//   added / removed  present on one side only
struct CompareRow {
  std::string definition, solution, workload;
  nlohmann::json axes = nlohmann::json::object();
  std::optional<TimedSide> old_side, new_side;
  std::string call;
  double ratio = 0;         // new / old latency; 0 when not both timed
  double noise = 0;         // combined relative noise sqrt(old² + new²); -1 when unknown
  bool regression = false;  // counts for --fail-on-regression
};

struct CompareOptions {
  double sigmas = 2.0;        // a change beyond this many combined standard errors is real
  double noise_limit = 0.05;  // a band wider than this (relative) cannot call "same"
  // --fail-on-regression PCT: a row is a regression when it is "slower" by more than PCT
  // percent, or "failed". Unset: no row is.
  std::optional<double> fail_percent;
};

struct CompareResult {
  std::vector<CompareRow> rows;  // the new side's order, then the removed rows in the old order
  bool regression = false;       // any row is a regression
  // Per call ("same", "faster", ...), how many rows.
  std::map<std::string, std::size_t> counts() const;
};

// The call for two timed sides (exposed for tests).
std::string compare_call(const TimedSide& old_side, const TimedSide& new_side,
                         const CompareOptions& options, double* ratio, double* noise);

CompareResult compare_verdicts(const std::vector<Verdict>& old_verdicts,
                               const std::vector<Verdict>& new_verdicts,
                               const CompareOptions& options);

// A Markdown summary line and table: solution, definition, workload, old, new, ratio, noise, call.
std::string to_markdown(const CompareResult& result, const std::string& old_name,
                        const std::string& new_name);
// {"schema": "kharness.compare/1", "old", "new", "options", "summary": {call: count},
//  "regression": bool, "rows": [...]}
nlohmann::json to_json(const CompareResult& result, const std::string& old_name,
                       const std::string& new_name, const CompareOptions& options);

// CSV (RFC 4180: a header row, CRLF line ends, fields with a comma, quote or line break quoted,
// quotes doubled): one row per solution × workload (a solution with no workload, such as a
// compile error, gets one row with an empty workload).
std::string to_csv(const std::vector<Verdict>& verdicts);
// One CSV field, quoted when RFC 4180 requires it.
std::string csv_field(const std::string& text);

}  // namespace kharness::report
