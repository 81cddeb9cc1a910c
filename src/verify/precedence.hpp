// The correctness stage's decisions, as pure functions so that they are tested on the CPU
// (tests/precedence_test.cpp) apart from the device work that feeds them (evaluate.cpp and the
// jobs it runs, timed_outputs.cpp):
// - which failure a workload and a verdict report: the first failing trial decides its workload
//   and ends it; the first failing workload decides the verdict, and the others still run, unless
//   the failure left the context unusable;
// - how a sampling workload's input sets are spread over its trials;
// - which failure a trial reports when several rules break at once: the memory rules (a guard
//   zone, in buffer order, before an input's checksum), the sealed copies' checksums, each
//   output's comparison in output order (output_not_written, nan_or_inf, tolerance), and for the
//   determinism rerun the reference before the first run;
// - whether a record read back from the device is the one the harness asked for;
// - how a timed iteration's check reads: its inputs' checksums, its record's failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "device/plan_launcher.hpp"  // LaunchOutcome
#include "kharness/definition.hpp"
#include "kharness/verdict.hpp"
#include "verify/compare.hpp"
#include "verify/harness_kernels.hpp"  // PatternCheck, CheckRecord, CompareRecord

namespace kharness::verify {

// ---- trials, workloads, verdicts ----------------------------------------------------------------

// Adds a finished trial to its workload. The first failing trial's status and failure become the
// workload's (the failure's evidence gains the trial's seed, to replay it). Returns true when the
// workload is decided: no further trial runs.
bool add_trial(WorkloadVerdict& workload, TrialResult trial);

// Adds a finished workload to the verdict. The first failing workload's status and failure
// become the verdict's (the failure's evidence gains the workload's uuid); later failures stay in
// their own workload verdicts. Returns true when nothing more may run: `context_lost` (a sticky
// CUDA error, after which this process can launch nothing).
bool add_workload(Verdict& verdict, WorkloadVerdict workload, bool context_lost);

// A failure found by the sampling comparator's pooled judgement at the end of a workload whose
// trials all passed: it becomes the workload's, with the number of trials pooled.
void add_sampling_failure(WorkloadVerdict& workload, Failure failure);

// The input sets of a sampling workload, spread over its trials: trial t of `trials` draws on
// sets_for_trial(t) sets (its own, then more), at least one each, `total` in all where total >=
// trials. The earlier trials take the remainder, so a workload decided early has drawn most.
class SamplingBudget {
 public:
  SamplingBudget(std::uint64_t total, int trials) : left_(total), trials_(trials) {}
  // Sets for the next trial (call once per trial, in order).
  std::uint64_t next_trial();

 private:
  std::uint64_t left_;
  int trials_;
  int given_ = 0;
};

// A workload's trials, in order: trial t runs with the input sets `budget` gives it (`sampling`:
// a SamplingBudget of that many sets in all; 0 for other comparators: one set a trial) and is
// added to `workload` (add_trial); the first failing trial ends the loop.
void run_trials(WorkloadVerdict& workload, int trials, std::uint64_t sampling_sets,
                const std::function<TrialResult(int trial, std::uint64_t sets)>& run);

// ---- one trial's rules --------------------------------------------------------------------------

// The failure a launch outcome (not ok) gives, `role` naming who launched ("candidate",
// "candidate (rerun)"): the CUDA error's kind (illegal_address, ...), launch_failed for a plan
// the launcher refused and for parameters or resources the launch could not take,
// cooperative_not_resident for a cooperative grid too large to be resident.
Failure launch_failure(const device::LaunchOutcome& outcome, const std::string& role);

// The first changed guard byte of a buffer of `bytes` bytes fenced by `guard_bytes` before and
// after it, from the two zones' pattern checks: a signed offset from the start of the data
// (negative: before it) or, for the zone after, from its start too (>= bytes); the zone before
// wins. nullopt when both zones are intact.
std::optional<std::int64_t> guard_damage(const PatternCheck& before, const PatternCheck& after,
                                         std::size_t bytes, std::size_t guard_bytes);

// The memory rules' reads of one input set (docs/correctness.md#poison-and-guards), as values:
// each buffer's guard damage (guard_damage), and each checked input's checksum now and before the
// candidate ran.
struct GuardState {
  std::string buffer;
  std::size_t bytes = 0;
  std::optional<std::int64_t> damage;
};
struct InputState {
  std::string tensor;
  std::uint64_t checksum = 0;
  std::uint64_t expected = 0;
};
// The first broken memory rule: out_of_bounds_write for the first damaged guard (in the order
// given: inputs, outputs, workspace), else input_modified for the first changed input.
std::optional<Failure> memory_failure(const std::vector<GuardState>& guards,
                                      const std::vector<InputState>& inputs);

// harness_memory_modified for the first sealed copy whose keyed checksum `now` is not the one it
// had when sealed (`sealed`); `tensors` names each copy's output, `whose` whose outputs the copies
// hold ("the reference", "the first run").
std::optional<Failure> sealed_copy_failure(const std::vector<std::uint64_t>& sealed,
                                           const std::vector<std::uint64_t>& now,
                                           const std::vector<std::string>& tensors,
                                           const std::string& whose);

// A device comparison's record counts only when it authenticated (not nullopt) and is bound to
// what the harness asked: the expected copy's keystream, this comparison's nonce, and the
// output's element count. Anything else is a record some kernel overwrote or replayed.
bool record_is_for(const std::optional<CompareRecord>& record, std::uint64_t stream,
                   std::uint64_t nonce, std::uint64_t elements);
// The failure of a record that is not (record_is_for) the one asked for.
Failure forged_record(const std::string& tensor);

// One output's comparison, judged: its statistics are added to the trial's comparisons; a
// reference that left elements unwritten is an internal error (thrown: the operator is broken,
// not the candidate); the failure output_failure finds, if any.
std::optional<Failure> judge_output(const std::string& tensor, const OutputCheck& check,
                                    const Tolerance& tolerance, TrialResult& trial);

// ---- the determinism rerun ----------------------------------------------------------------------

// A failure found on the rerun, marked as such (evidence.rerun, the message says so).
Failure on_rerun(Failure f);
// The rerun's output `tensor` against the first run's (as expected), within tolerance: `f` is
// what output_failure found.
Failure nondeterministic(const std::string& tensor, const Failure& f);

// How the rerun's outputs are compared: all of them with the reference, and one of them with the
// first run's within tolerance.
struct RerunJudges {
  std::function<std::optional<Failure>()> against_reference;
  std::function<std::optional<Failure>(std::size_t output)> against_first;
};
// The rerun's decision (docs/correctness.md#determinism), given per output the number of bits
// (or elements) that differ from the first run: outputs that are bitwise equal pass; at the first
// that differs the trial is not bitwise deterministic and the rerun is held to the reference
// once (its failure on_rerun), then each differing output, in order, to the first run within
// tolerance (its failure nondeterministic). The first failure wins.
std::optional<Failure> judge_rerun(const std::vector<std::uint64_t>& differing,
                                   const std::vector<std::string>& tensors,
                                   const RerunJudges& judges, TrialResult& trial);

// ---- timed iterations ---------------------------------------------------------------------------

// The keystream of output `tensor` of input set `set` in the timing stage's sealed checks.
std::uint64_t timed_stream_id(int set, std::size_t tensor);

// A timed iteration's inputs against what they held (docs/correctness.md#checked-iterations):
// `known` holds the set's last known checksums, `before` those read after this iteration's refresh
// (empty when it did not refresh: the set's inputs are held to `known`), `after` those read after
// its launch. `known` takes the refreshed values; returns the first input (by name) whose
// checksum changed across the launch.
std::optional<std::string> changed_input(std::map<std::string, std::uint64_t>& known,
                                         const std::map<std::string, std::uint64_t>& before,
                                         const std::map<std::string, std::uint64_t>& after);

// A timed check record counts only when it authenticated and is the one of this iteration, this
// output and this keystream.
bool check_record_is_for(const std::optional<CheckRecord>& record, std::uint64_t iteration,
                         std::uint64_t tensor, std::uint64_t stream);

// The failure a device check record shows, in compare.cpp's order: output_not_written,
// nan_or_inf, tolerance (with the definition's matched ratio: a ratio equal to it passes).
std::optional<Failure> record_failure(const CheckRecord& r, const TensorSpec& t,
                                      const Tolerance& tol);

// A timed iteration's failure: stale_output naming the iteration and the input set, with the
// underlying kind as evidence.cause.
Failure stale(const Failure& f, std::uint64_t iteration, int set);

}  // namespace kharness::verify
