// The correctness stage, GPU side: runs inside the worker process (never in the harness itself).
// For each workload and trial: fresh inputs from a recorded seed, the reference first (its outputs
// leave the device, or for the elementwise comparator stay there only sealed under a per-process
// key and checksummed; its buffers are scrubbed and freed), then the candidate from a freshly
// loaded module with poisoned, guard-fenced outputs and checksummed inputs, then a rerun on the
// same inputs for determinism. Elementwise outputs are compared on the device (compare_output's
// totals, bit for bit: HarnessKernels::compare_sealed), so a passing trial downloads none of its
// outputs; the other comparators compare on the host. docs/correctness.md.
// The trial loop is evaluate.cpp's; its jobs are InputSets (input_sets.hpp), HostJudge
// (host_judge.hpp), SealedJudge (sealed_judge.hpp) and SamplingSets (sampling_sets.hpp), over one
// TrialContext (trial.hpp); its decisions are precedence.hpp's. The timing stage's checked
// iterations are TimedOutputs (timed_outputs.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/verdict.hpp"
#include "kharness/verify.hpp"  // CheckOptions

namespace kharness::verify {

// A solution and its compiled module.
struct Compiled {
  const Solution* solution = nullptr;
  const CompileResult* result = nullptr;
};

// Called once per finished workload (the worker streams them to the parent as they complete) and
// before each workload starts (`started` with the uuid), so a crash or hang is attributed.
struct EvaluationSink {
  std::function<void(const std::string& uuid)> started;
  std::function<void(const WorkloadVerdict&)> finished;
};

// The tolerance in force: the definition's, overridden by the options.
Tolerance effective_tolerance(const Definition& definition, const CheckOptions& options);
// The workloads selected by the options; throws Error (exit 2) for a uuid that matches none.
std::vector<const Workload*> select_workloads(const Operator& op, const CheckOptions& options);
// The seed of one trial: a mix of the base seed, the workload's index and the trial number.
std::uint64_t trial_seed(std::uint64_t base, std::size_t workload_index, int trial);

// SplitMix64's finaliser: the seed mixer of trial_seed and of the timing loop's seeded choices.
std::uint64_t splitmix(std::uint64_t x);
// The status a failure kind gives a workload: INCORRECT_NUMERICAL for wrong outputs
// (output_not_written, nan_or_inf, tolerance, nondeterministic, input_modified, stale_output),
// RUNTIME_ERROR for everything else.
Status status_of_kind(const std::string& kind);
// A fresh 64-bit secret from the OS (std::random_device), for TimedOutputs' key: never derived
// from the seed, which a verdict records.
std::uint64_t secret_key();

// The poison of one timed iteration: one element pattern per output tensor of the definition
// (iteration_poison_element, kharness/numeric.hpp), a pure function of the draw.
struct IterationPoison {
  std::vector<std::vector<std::uint8_t>> outputs;
};
IterationPoison iteration_poison(const Definition& definition, std::uint64_t draw);

// Runs on the current device. Never throws for a misbehaving candidate: the verdict says what it
// did. Throws kharness::Error (internal) when the reference itself fails.
Verdict evaluate_correctness(const Operator& op, const Compiled& reference,
                             const Compiled& candidate, const CheckOptions& options,
                             const EvaluationSink& sink = {});

}  // namespace kharness::verify
