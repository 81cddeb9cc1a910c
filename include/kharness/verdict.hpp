// Verdicts: what kharness concluded about a solution, per workload and overall (docs/verdicts.md).
// A verdict is a value: stages fill it, the CLI prints it, the archive stores it as JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/status.hpp"
#include "kharness/timing.hpp"

namespace kharness {

// Why a verdict failed. `kind` is one of the stable names of docs/verdicts.md#failure-kinds:
// output_not_written, out_of_bounds_write, input_modified, nan_or_inf, tolerance, nondeterministic,
// stale_output, illegal_address, launch_failed, param_mismatch, shape_mismatch, timeout,
// worker_crashed, ...
struct Failure {
  std::string kind;
  std::string message;  // one line a person can act on
  // tensor, first_bad_index, expected, got, max_abs_error, max_rel_error, matched_ratio,
  // launch, kernel, cuda_error, guard_offset, ... (whatever shows it)
  nlohmann::json evidence = nlohmann::json::object();
};

// Element-wise comparison of one output tensor against the reference.
struct Comparison {
  std::string tensor;
  std::uint64_t elements = 0;
  std::uint64_t mismatches = 0;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  double matched_ratio = 1.0;
  std::int64_t first_bad_index = -1;  // flat index; -1 when none
  double expected = 0.0;              // at first_bad_index
  double got = 0.0;
};

struct TrialResult {
  std::uint64_t seed = 0;
  Status status = Status::kPassed;
  std::optional<Failure> failure;
  std::vector<Comparison> comparisons;
  bool bitwise_deterministic = true;  // the rerun on the same inputs matched bit for bit
  double seconds = 0.0;
};

// The suspect marker of a verdict timed below a physical lower bound
// (docs/verdicts.md#suspect-verdicts): its status stays PASSED (the outputs were right), but the
// time cannot be real, so it exits 1, ranks below every clean PASS and is never promoted.
inline constexpr const char* kFasterThanLight = "faster_than_light";

struct WorkloadVerdict {
  std::string uuid;
  nlohmann::json axes = nlohmann::json::object();
  // The plan variant that served this workload, as LaunchPlan::variant_label writes it
  // ("1 (M <= 256)"); empty for a plan without variants.
  std::string variant;
  Status status = Status::kPassed;
  std::optional<Failure> failure;  // the first failing trial's
  std::vector<TrialResult> trials;
  // Timing stage: protocol, candidate and baseline latency statistics, speedup, speed-of-light,
  // the physical lower bound (timing.lower_bound). Empty (`{}`) when the workload was not timed.
  TimingResult timing;
  // Set when the candidate was timed below the physical lower bound: kind "faster_than_light",
  // evidence {latency, bound_seconds, term, flops, dram_bytes, peak_flops, bandwidth, ...}.
  std::optional<Failure> suspect;
};

struct Verdict {
  std::string solution;    // name
  std::string source;      // where it was loaded from
  std::string definition;  // operator name
  Status status = Status::kPassed;
  std::optional<Failure> failure;  // the first failure, for one-line summaries
  // "" or kFasterThanLight: some workload's time is physically impossible (its `suspect` says
  // which and why). Independent of `status`.
  std::string suspect;
  std::vector<WorkloadVerdict> workloads;
  std::string worker_stderr;  // bounded
  bool worker_stderr_truncated = false;
  double seconds = 0.0;
  nlohmann::json compile = nlohmann::json::object();      // compile summary (status, kernels)
  nlohmann::json environment = nlohmann::json::object();  // GPU, driver, versions
  std::uint64_t seed = 0;                // base seed of the run (replay with --seed)
  std::map<std::string, double> phases;  // seconds spent per phase, for "where the time goes"
  Score score;  // mean and geometric-mean speedup, fast_p, SOL, integrity, holdout

  bool passed() const { return status == Status::kPassed; }
  // PASSED and not suspect: what exits 0, ranks, and may be promoted.
  bool clean_pass() const { return passed() && suspect.empty(); }
  // The first suspect workload, or nullptr.
  const WorkloadVerdict* first_suspect() const;
};

nlohmann::json to_json(const Failure& failure);
nlohmann::json to_json(const Comparison& comparison);
nlohmann::json to_json(const WorkloadVerdict& workload);
nlohmann::json to_json(const Verdict& verdict);
WorkloadVerdict workload_verdict_from_json(const nlohmann::json& json);
// Throws kharness::Error (exit 4: it is our own protocol) when the JSON is not a verdict.
Verdict verdict_from_json(const nlohmann::json& json);
// The same for a verdict read from a file (an archive, a run folder, which anyone may have
// edited): Error is an input error (exit 2) naming `source`.
Verdict verdict_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace kharness
