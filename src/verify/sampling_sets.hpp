// Sampling judgement (docs/correctness.md#sampling): a sampling workload's trials launch the
// candidate on more input sets than they have trials (SamplingBudget, precedence.hpp), each held
// to the memory rules and its draws to their support and pooled; at the workload's end the pool
// is judged by the distribution tests (SamplingDraws::judge).
#pragma once

#include <cstdint>
#include <optional>

#include "verify/host_judge.hpp"
#include "verify/input_sets.hpp"
#include "verify/sampling_compare.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {

class SamplingSets {
 public:
  SamplingSets(TrialContext& context, InputSets& inputs, HostJudge& host)
      : c_(context), inputs_(inputs), host_(host) {}

  // A sampling trial's other input sets: the candidate, still in the trial's module (state it
  // keeps, a generator's counter, advances), on `sets` more fresh input sets (seeds derived from
  // the trial's `seed`), each with its own poison and scrubbed shared memory, held to the memory
  // rules and the support, its draws added to `draws`. No reference runs on them: the sampling
  // comparator reads no reference output (it computes each row's distribution from the inputs).
  // Returns the first failure (naming the set); `context_lost` is set when a launch left the
  // context unusable. Each step is a phase ("sampling_sets.<step>"; their sum, with the release of
  // each set's buffers, is the caller's "sampling_sets").
  std::optional<Failure> sample_more(const Workload& w, const LaunchPlan& plan, std::uint64_t seed,
                                     std::uint64_t sets, device::PlanLauncher& launcher,
                                     SamplingDraws& draws, bool& context_lost, CUstream s);

  // The end of a workload whose trials all passed: the pooled draws judged (phase
  // "sampling_test"); a failure becomes the workload's (add_sampling_failure).
  void judge(WorkloadVerdict& workload, const SamplingDraws& draws);

 private:
  TrialContext& c_;
  InputSets& inputs_;
  HostJudge& host_;
};

}  // namespace kharness::verify
