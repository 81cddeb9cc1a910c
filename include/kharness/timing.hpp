// What the timing stage concludes, as types (docs/timing.md, docs/verdicts.md#verdict-fields): per
// workload a TimingResult (protocol, timer, input sets, each contender's latency statistics,
// speedup, speed-of-light, phases, integrity), per verdict a Score, and the enums of the timing
// options and of an evaluation's mode. Stages and reports read these fields; JSON is only their
// archive and report form (to_json / *_from_json below), whose keys are a contract:
// `kharness.verdict/1` as the verdict has always written them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kharness {

// ---- Enums and their names ---------------------------------------------------------------------

// How a workload is timed: "adaptive" (until the noise of the median is under a target, like
// nvbench) or "official" (FlashInfer-Bench's protocol: warmup, iterations, trials).
enum class Protocol { kAdaptive, kOfficial };
// What measures an iteration: "cupti" (activity records) or "events" (CUDA events, comparison
// only).
enum class Timer { kCupti, kEvents };
// Where speed-of-light ceilings come from: "datasheet" (configs/gpus) or "measured" (`kharness
// doctor --measure`'s results for this GPU and driver).
enum class SolSource { kDatasheet, kMeasured };
// How a module's globals are reset before every iteration: "auto" (initial bytes copied back,
// reloaded when some cannot be resolved) or "reload" (always reloaded).
enum class StateReset { kAuto, kReload };
// What an evaluation does: "compile" (compile and rules, no GPU), "check" (correctness), "bench"
// (timing, timed outputs checked) or "validate" (both).
enum class Mode { kCompile, kCheck, kBench, kValidate };
// Why a contender's sampling stopped: "not_finished", "noise_met", "time_limit", "sample_count".
enum class StopReason {
  kNotFinished,
  kNoiseMet,     // the noise of the median reached its target (stdrel)
  kTimeLimit,    // the time budget ran out first (stdrel)
  kSampleCount,  // the requested number of samples was taken (fixed)
};

std::string_view name_of(Protocol value);
std::string_view name_of(Timer value);
std::string_view name_of(SolSource value);
std::string_view name_of(StateReset value);
std::string_view name_of(Mode value);
std::string_view name_of(StopReason value);

// The enum value of `name` (as name_of writes it), nullopt for another name. Defined for the
// enums above.
template <class E>
std::optional<E> parse_enum(std::string_view name);

// ---- Latency statistics ------------------------------------------------------------------------

// One contender's samples summarized (bench/statistics.hpp computes them and says how).
struct LatencyStats {
  std::size_t count = 0;
  double median = 0.0;
  double mean = 0.0;
  double min = 0.0;
  double max = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  double stdev = 0.0;      // sample standard deviation (n - 1); 0 for one sample
  double cv = 0.0;         // stdev / mean
  double noise = 0.0;      // SE(median) / median; +inf below bench::kMinSamplesForNoise samples
  bool noise_met = false;  // noise <= the max_noise given to bench::summarize()
};

// {"count", "median", "mean", "min", "max", "p10", "p90", "stdev", "cv", "noise", "noise_met"};
// non-finite values are written as null (and read back as NaN).
nlohmann::json to_json(const LatencyStats& stats);
LatencyStats latency_stats_from_json(const nlohmann::json& j);

// ---- One workload's timing ---------------------------------------------------------------------

// What a contender's timed figures rest on (docs/correctness.md#checked-iterations).
struct TimingIntegrity {
  std::uint64_t checked_iterations = 0;  // iterations whose outputs were checked
  std::string check;                     // "device" or "host": where they were checked
  std::size_t module_globals = 0;        // global variables of its module
  std::string state_reset;               // "none needed", "globals restored", "module reload"
  // What every iteration ran on and was checked against (docs/correctness.md#checked-iterations):
  // inputs generated for it alone (fresh_inputs of them), the truth "full reference", "point
  // reference" (rows of an axis drawn after each launch) or "sampling" (support, then every draw in
  // one distribution test).
  std::uint64_t fresh_inputs = 0;
  std::string truth;
  std::string point;               // the point reference: "128 of M = 16384 rows"
  std::uint64_t rows_checked = 0;  // rows checked over the workload
  // The chance that a kernel skipping 1% of the rows in every iteration passed the point
  // reference: 0.99^rows_checked (0 under the full reference).
  std::optional<double> miss_probability_1pct;
  std::vector<std::string> fixed_inputs;  // inputs from files: the same in every iteration
};

// One contender's (the candidate's or its baseline's) timing of a workload.
struct ContenderTiming {
  LatencyStats stats;
  double latency = 0.0;                    // what speedups use: the median, or official_latency
  std::optional<double> official_latency;  // --timing official: mean of the trial medians
  std::optional<StopReason> stop_reason;   // adaptive protocol
  int clock_flagged_samples = 0;  // samples taken while the SM clock was below 80% of its max
  std::string clock_note;         // why throttling is unknown; "" when it is known
  std::string kernels;            // the kernels an iteration ran (CUPTI's signature)
  std::string solution;           // what a built-in baseline is ("" for a solution)
  std::optional<TimingIntegrity> integrity;
};

// Where a workload's timing time went: seconds per phase ("setup_seconds",
// "warmup_seconds", "run_seconds", "harvest_seconds", ...) and the loop's counts.
struct TimingPhases {
  std::map<std::string, double> seconds;
  std::uint64_t harvests = 0;
  std::uint64_t rounds = 0;
};

// The candidate's latency against the operator's speed of light on this GPU.
struct SolResult {
  double seconds = 0.0;   // the speed-of-light time at the workload's axes
  std::string bound;      // the term that binds: "memory" or "compute"
  double fraction = 0.0;  // seconds / the candidate's latency
  std::string gpu;        // the GPU spec that matched
  SolSource ceilings = SolSource::kDatasheet;
  std::string measured_at;  // kMeasured: when the ceilings were measured (ISO 8601)
};

// A workload's timing. Every field is optional in the JSON form: a workload that failed its
// check has none (`{}`), one whose timing threw has `seconds` only; the rest come from one
// measurement (protocol, timer, input_sets, phases, the contenders, speedup) and from the SOL
// estimate.
struct TimingResult {
  std::optional<Protocol> protocol;
  std::optional<Timer> timer;
  std::optional<int> input_sets;  // visited in a seeded random order
  std::string input_sets_note;    // why fewer input sets than asked for; ""
  std::optional<ContenderTiming> candidate;
  std::optional<ContenderTiming> baseline;
  std::string baseline_unavailable;  // why the built-in baseline does not run here; ""
  std::optional<double> speedup;     // baseline latency / candidate latency
  // The controller's: the ratio over its incumbent when `speedup` is estimated through it.
  std::optional<double> speedup_vs_incumbent;
  std::optional<TimingPhases> phases;
  std::optional<double> seconds;  // the workload's whole timing
  std::optional<SolResult> sol;
  // The physical lower bound (bench::LowerBound::to_json); null when none was formed.
  nlohmann::json lower_bound;

  // A candidate latency was measured.
  bool timed() const { return candidate.has_value(); }
};

nlohmann::json to_json(const TimingResult& timing);
// Throws std::exception (nlohmann's type errors) for fields of the wrong type.
TimingResult timing_from_json(const nlohmann::json& j);

// ---- A verdict's score -------------------------------------------------------------------------

// What the timed figures of a verdict rest on, summed over its workloads
// (docs/correctness.md#checked-iterations).
struct ScoreIntegrity {
  std::uint64_t checked_iterations = 0;
  bool every_iteration_checked = true;
  int fewest_input_sets = 0;
  std::string guarantees;  // in words
};

// A definition's score over its workloads (docs/timing.md#speedup-and-score), and the records
// stages add to it.
struct Score {
  std::optional<double> mean_speedup;     // the score: the mean of the workloads' speedups
  std::optional<double> geomean_speedup;  // their geometric mean
  // "fast_1", "fast_1.5", "fast_2": the fraction of workloads faster than p x the baseline.
  std::optional<std::map<std::string, double>> fast_p;
  std::optional<double> mean_sol_fraction;
  std::optional<std::size_t> workloads_timed;
  std::optional<ScoreIntegrity> integrity;
  // What the speedups are over when it is not the operator's own baseline: the baseline
  // solution's file name (--baseline PATH, a run's incumbent) or "cublaslt". Empty: the
  // operator's baseline, or none.
  std::string speedups_over;
  // The held-out workloads drawn for this verdict (kharness/holdout.hpp); null: none.
  nlohmann::json holdout;
};

nlohmann::json to_json(const Score& score);
// Throws std::exception for fields of the wrong type.
Score score_from_json(const nlohmann::json& j);

}  // namespace kharness
