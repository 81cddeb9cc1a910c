// The correctness stage's decisions, as pure functions so that they are tested on the CPU
// (tests/precedence_test.cpp) apart from the device work that feeds them (evaluate.cpp):
// - which failure a workload and a verdict report: the first failing trial decides its workload
//   and ends it; the first failing workload decides the verdict, and the others still run, unless
//   the failure left the context unusable;
// - how a sampling workload's input sets are spread over its trials.
#pragma once

#include <cstdint>
#include <string>

#include "kharness/verdict.hpp"

namespace kharness::verify {

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

}  // namespace kharness::verify
