#include "verify/precedence.hpp"

#include <algorithm>
#include <utility>

#include "verify/evaluate.hpp"  // status_of_kind

namespace kharness::verify {

bool add_trial(WorkloadVerdict& workload, TrialResult trial) {
  const bool failed = trial.status != Status::kPassed;
  if (failed && workload.status == Status::kPassed) {
    workload.status = trial.status;
    workload.failure = trial.failure;
    if (workload.failure) workload.failure->evidence["seed"] = trial.seed;
  }
  workload.trials.push_back(std::move(trial));
  return failed;
}

bool add_workload(Verdict& verdict, WorkloadVerdict workload, bool context_lost) {
  if (workload.status != Status::kPassed && verdict.status == Status::kPassed) {
    verdict.status = workload.status;
    verdict.failure = workload.failure;
    if (verdict.failure) verdict.failure->evidence["workload"] = workload.uuid;
  }
  verdict.workloads.push_back(std::move(workload));
  return context_lost;
}

void add_sampling_failure(WorkloadVerdict& workload, Failure failure) {
  if (workload.status != Status::kPassed) return;  // a failing trial already decided it
  workload.status = status_of_kind(failure.kind);
  workload.failure = std::move(failure);
  workload.failure->evidence["trials"] = workload.trials.size();
}

std::uint64_t SamplingBudget::next_trial() {
  const int trials_left = std::max(trials_ - given_, 1);
  ++given_;
  const std::uint64_t sets = std::max<std::uint64_t>(
      1, (left_ + trials_left - 1) / static_cast<std::uint64_t>(trials_left));
  left_ -= std::min(left_, sets);
  return sets;
}

}  // namespace kharness::verify
