// The correctness stage, GPU side: runs inside the worker process (never in the harness itself).
// For each workload and trial: fresh inputs from a recorded seed, the reference first (its outputs
// leave the device, its buffers are scrubbed and freed), then the candidate from a freshly loaded
// module with poisoned, guard-fenced outputs and checksummed inputs, then a rerun on the same
// inputs for determinism. DESIGN §5.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "device/plan_launcher.hpp"
#include "kharness/compile.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/verdict.hpp"

namespace kharness::verify {

class HarnessKernels;

struct CheckOptions {
  std::vector<std::string> workloads;  // uuids or uuid prefixes; empty: every workload
  int trials = 3;
  std::uint64_t seed = 0;  // base seed; each trial's seed derives from it
  std::optional<double> atol, rtol, required_matched_ratio;  // override the definition's
  bool determinism = true;  // rerun the first trial on the same inputs

  nlohmann::json to_json() const;
  static CheckOptions from_json(const nlohmann::json& j);
};

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

// The hook the timing stage uses to check outputs produced *inside* timed iterations: several
// input sets, each with the reference's outputs (computed first, kept on the host) and the
// candidate's own poisoned, guard-fenced output buffers. The timing loop rotates the sets, poisons
// a set's outputs before that set's last timed iteration and verifies them afterwards; a kernel
// that computes only while it is being checked (or replays cached results) fails as stale_output.
class TimedOutputs {
 public:
  TimedOutputs(const Operator& op, const Compiled& reference, const Compiled& candidate,
               const Workload& workload, int sets, const CheckOptions& options);
  ~TimedOutputs();
  TimedOutputs(const TimedOutputs&) = delete;  // owns device buffers
  TimedOutputs& operator=(const TimedOutputs&) = delete;

  int sets() const;
  // Inputs, candidate outputs and workspace of one set, for the candidate's launches.
  const device::LaunchEnv& env(int set) const;
  // Poisons the set's outputs and workspace (enqueued on `stream`).
  void poison(int set, CUstream stream) const;
  // The harness kernels (fill, poison, checksum, read-through) these buffers were made with.
  const HarnessKernels& kernels() const;
  // Guards, inputs and outputs of the set against the reference: nullopt, or a stale_output failure
  // whose evidence names the underlying cause (output_not_written, tolerance, ...).
  std::optional<Failure> verify(int set);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs on the current device. Never throws for a misbehaving candidate: the verdict says what it
// did. Throws kharness::Error (internal) when the reference itself fails.
Verdict evaluate_correctness(const Operator& op, const Compiled& reference,
                             const Compiled& candidate, const CheckOptions& options,
                             const EvaluationSink& sink = {});

}  // namespace kharness::verify
