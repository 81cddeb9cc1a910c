// The timing stage's checked iterations (docs/correctness.md#checked-iterations), built from the
// correctness stage's input sets (verify/input_sets.hpp) and host judging (verify/host_judge.hpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/plan_launcher.hpp"
#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"
#include "kharness/verify.hpp"  // CheckOptions
#include "verify/evaluate.hpp"  // Compiled, IterationPoison

namespace kharness::verify {

class HarnessKernels;

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

}  // namespace kharness::verify
