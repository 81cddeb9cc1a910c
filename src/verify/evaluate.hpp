// The correctness stage, GPU side: runs inside the worker process (never in the harness itself).
// For each workload and trial: fresh inputs from a recorded seed, the reference first (its outputs
// leave the device, or for the elementwise comparator stay there only sealed under a per-process
// key and checksummed; its buffers are scrubbed and freed), then the candidate from a freshly
// loaded module with poisoned, guard-fenced outputs and checksummed inputs, then a rerun on the
// same inputs for determinism. Elementwise outputs are compared on the device (compare_output's
// totals, bit for bit: HarnessKernels::compare_sealed), so a passing trial downloads none of its
// outputs; the other comparators compare on the host. docs/correctness.md.
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
#include "kharness/verify.hpp"  // CheckOptions

namespace kharness::verify {

class HarnessKernels;

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

// What the timing stage checks every iteration against (docs/correctness.md#checked-iterations:
// every timed iteration runs on inputs generated for it alone and is verified against their own
// truth). Several sets of buffers: inputs (filled afresh before every iteration by refresh(),
// checksummed under a key before and after its launch), the candidate's own guard-fenced outputs
// and workspace. After a launch, the reference runs on that launch's inputs (all of it, or for
// definitions with kharness.timed_check a point reference on rows drawn after the launch); for
// elementwise comparators its outputs are sealed under `key` (the caller's secret, only ever a
// harness kernel's parameter) and compared on the device into authenticated records read once per
// batch; other comparators download them and compare on the host (a sampler's draws are pooled and
// judged together). No remembered output can be right for inputs never seen before, so a kernel
// that caches, replays, skips work or computes only while checked fails as stale_output naming
// the iteration.
// What a workload's timed iterations were checked against (TimedOutputs::truth).
struct TimedTruth {
  std::string mode;  // "full reference", "point reference" or "sampling" (support + pooled test)
  std::uint64_t fresh_inputs = 0;         // input sets generated for one iteration each
  std::vector<std::string> fixed_inputs;  // inputs from files, the same every iteration
  std::string rows_of;                    // the point reference: rows of this axis,
  int rows = 0;                           // this many per iteration,
  std::int64_t rows_total = 0;            // of this many,
  std::uint64_t rows_checked = 0;         // and this many in all
};

class TimedOutputs {
 public:
  // `batch_slots`: the most device checks enqueued between two collect() calls.
  TimedOutputs(const Operator& op, const Compiled& reference, const Compiled& candidate,
               const Workload& workload, int sets, const CheckOptions& options, int batch_slots,
               std::uint64_t key);
  ~TimedOutputs();
  TimedOutputs(const TimedOutputs&) = delete;  // owns device buffers
  TimedOutputs& operator=(const TimedOutputs&) = delete;

  int sets() const;
  // True when iterations are checked on the device (enqueue_check/collect); otherwise the caller
  // synchronises after each iteration and calls verify_on_host before the next launch.
  bool checked_on_device() const;
  // Inputs, candidate outputs and workspace of one set, for the candidate's launches.
  const device::LaunchEnv& env(int set) const;
  // Fills the set's inputs afresh (every generated tensor, structured ones included) from a seed
  // derived from `draw`, and checksums them under the key (enqueued on `stream`): the inputs of
  // one timed iteration, seen by no other launch. Inputs from files stay as they are.
  void refresh(int set, std::uint64_t draw, CUstream stream);
  // Writes this iteration's poison over the set's outputs and NaN bytes (0xFF) over its
  // workspace (enqueued on `stream`).
  void poison(int set, const IterationPoison& poison, CUstream stream) const;
  // Enqueues the device check of the set's outputs, as iteration `iteration` poisoned them,
  // against the truth of the set's current inputs: the reference run now (the point reference:
  // rows drawn now, after the launch), sealed, compared into an authenticated record; and the
  // inputs' keyed checksums again.
  void enqueue_check(int set, std::uint64_t iteration, const IterationPoison& poison,
                     CUstream stream);
  // Reads the records of the checks enqueued since the last call (synchronises `stream`): the
  // first failure, input_modified (an input's checksum changed across the launch), a
  // stale_output naming the iteration and the underlying cause, or harness_memory_modified for a
  // record that does not authenticate.
  std::optional<Failure> collect(CUstream stream);
  // The set's outputs against the reference run now on its inputs (host-checked comparators;
  // a sampler's draws are held to their support and pooled for judge_draws). Synchronises.
  std::optional<Failure> verify_on_host(int set, std::uint64_t iteration, CUstream stream);
  // A sampling definition: every timed draw so far, pooled, by the distribution test.
  std::optional<Failure> judge_draws() const;
  // What the iterations were checked against so far.
  TimedTruth truth() const;
  // Every set's guard zones intact (out_of_bounds_write). Synchronises `stream`.
  std::optional<Failure> integrity(CUstream stream);
  // All of the above for one iteration, now: its outputs (device or host), then integrity().
  std::optional<Failure> check_now(int set, std::uint64_t iteration, const IterationPoison& poison,
                                   CUstream stream);
  // The harness kernels (fill, poison, checksum, read-through) these buffers were made with.
  const HarnessKernels& kernels() const;

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
