#include "verify/precedence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
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

void run_trials(WorkloadVerdict& workload, int trials, std::uint64_t sampling_sets,
                const std::function<TrialResult(int trial, std::uint64_t sets)>& run) {
  SamplingBudget budget(sampling_sets, trials);
  for (int t = 0; t < trials; ++t) {
    const std::uint64_t sets = sampling_sets > 0 ? budget.next_trial() : 1;
    if (add_trial(workload, run(t, sets))) break;  // one failing trial decides the workload
  }
}

Failure launch_failure(const device::LaunchOutcome& o, const std::string& role) {
  std::string kind =
      o.error_name == "PLAN_ERROR" ? "launch_failed" : device::failure_kind_of(o.error_name);
  if (o.error_name == "COOPERATIVE_NOT_RESIDENT") kind = "cooperative_not_resident";
  if (o.error_name == "CUDA_ERROR_INVALID_VALUE" ||
      o.error_name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") {
    kind = "launch_failed";
  }
  return Failure{kind,
                 fmt::format("{}: {}", role, o.message),
                 {{"launch", o.launch_index}, {"kernel", o.kernel}, {"cuda_error", o.error_name}}};
}

std::optional<std::int64_t> guard_damage(const PatternCheck& before, const PatternCheck& after,
                                         std::size_t bytes, std::size_t guard_bytes) {
  if (before.mismatches > 0) {
    return static_cast<std::int64_t>(before.first_mismatch_byte) -
           static_cast<std::int64_t>(guard_bytes);
  }
  if (after.mismatches > 0) return static_cast<std::int64_t>(bytes + after.first_mismatch_byte);
  return std::nullopt;
}

std::optional<Failure> memory_failure(const std::vector<GuardState>& guards,
                                      const std::vector<InputState>& inputs) {
  for (const GuardState& g : guards) {
    if (!g.damage) continue;
    const std::int64_t offset = *g.damage;
    return Failure{
        "out_of_bounds_write",
        fmt::format("a write landed outside {} ({} bytes), at byte offset {} {}", g.buffer, g.bytes,
                    offset, offset < 0 ? "before its start" : "from its start"),
        {{"tensor", g.buffer}, {"bytes", g.bytes}, {"guard_offset", offset}}};
  }
  for (const InputState& in : inputs) {
    if (in.checksum != in.expected) {
      return Failure{"input_modified",
                     fmt::format("the candidate changed its input '{}'", in.tensor),
                     {{"tensor", in.tensor}}};
    }
  }
  return std::nullopt;
}

std::optional<Failure> sealed_copy_failure(const std::vector<std::uint64_t>& sealed,
                                           const std::vector<std::uint64_t>& now,
                                           const std::vector<std::string>& tensors,
                                           const std::string& whose) {
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (now[i] == sealed.at(i)) continue;
    const std::string& tensor = tensors.at(i);
    return Failure{"harness_memory_modified",
                   fmt::format("a kernel wrote into the harness's sealed copy of {}'s {}: the "
                               "comparison cannot be trusted",
                               whose, tensor),
                   {{"tensor", tensor}, {"copy", whose}}};
  }
  return std::nullopt;
}

bool record_is_for(const std::optional<CompareRecord>& record, std::uint64_t stream,
                   std::uint64_t nonce, std::uint64_t elements) {
  return record && record->stream == stream && record->nonce == nonce &&
         record->totals.elements == elements;
}

Failure forged_record(const std::string& tensor) {
  return Failure{"harness_memory_modified",
                 fmt::format("the record of the device comparison of {} was overwritten: a "
                             "kernel wrote into the harness's memory",
                             tensor),
                 {{"tensor", tensor}}};
}

std::optional<Failure> judge_output(const std::string& tensor, const OutputCheck& check,
                                    const Tolerance& tolerance, TrialResult& trial) {
  trial.comparisons.push_back(check.comparison);
  if (check.reference_unwritten > 0) {
    throw Error(ExitCode::kInternal, "reference",
                fmt::format("the operator's reference left {} elements of {} unwritten",
                            check.reference_unwritten, tensor));
  }
  return output_failure(check, tolerance);
}

Failure on_rerun(Failure f) {
  f.evidence["rerun"] = true;
  f.message = "on a rerun with the same inputs: " + f.message;
  return f;
}

Failure nondeterministic(const std::string& tensor, const Failure& f) {
  return Failure{"nondeterministic",
                 fmt::format("{}: a rerun on the same inputs differs beyond tolerance ({})", tensor,
                             f.message),
                 f.evidence};
}

std::optional<Failure> judge_rerun(const std::vector<std::uint64_t>& differing,
                                   const std::vector<std::string>& tensors,
                                   const RerunJudges& judges, TrialResult& trial) {
  bool held_to_reference = false;
  for (std::size_t i = 0; i < differing.size(); ++i) {
    if (differing[i] == 0) continue;
    trial.bitwise_deterministic = false;
    if (!held_to_reference) {
      // Differs: the rerun must still match the reference, and the first run within tolerance.
      held_to_reference = true;
      if (auto f = judges.against_reference()) return on_rerun(*f);
    }
    if (auto f = judges.against_first(i)) return nondeterministic(tensors.at(i), *f);
  }
  return std::nullopt;
}

std::uint64_t timed_stream_id(int set, std::size_t tensor) {
  return (static_cast<std::uint64_t>(set) << 16) | tensor;
}

std::optional<std::string> changed_input(std::map<std::string, std::uint64_t>& known,
                                         const std::map<std::string, std::uint64_t>& before,
                                         const std::map<std::string, std::uint64_t>& after) {
  // What the refresh wrote (or what the set held) is what the launch must leave.
  for (const auto& [name, sum] : before) known[name] = sum;
  for (const auto& [name, sum] : after) {
    if (sum != known.at(name)) return name;
  }
  return std::nullopt;
}

bool check_record_is_for(const std::optional<CheckRecord>& record, std::uint64_t iteration,
                         std::uint64_t tensor, std::uint64_t stream) {
  return record && record->iteration == iteration && record->tensor == tensor &&
         record->stream == stream;
}

std::optional<Failure> record_failure(const CheckRecord& r, const TensorSpec& t,
                                      const Tolerance& tol) {
  const std::uint64_t bad = r.unwritten + r.nonfinite + r.mismatches;
  const double matched =
      r.elements == 0 ? 1.0 : 1.0 - static_cast<double>(bad) / static_cast<double>(r.elements);
  std::string kind;
  if (r.unwritten > 0) {
    kind = "output_not_written";
  } else if (r.nonfinite > 0) {
    kind = "nan_or_inf";
  } else if (matched < tol.required_matched_ratio) {
    kind = "tolerance";
  } else {
    return std::nullopt;
  }
  std::uint8_t e[8], g[8];
  std::memcpy(e, &r.expected_bits, 8);
  std::memcpy(g, &r.got_bits, 8);
  const double expected = to_double(t.dtype, e);
  const double got = to_double(t.dtype, g);
  nlohmann::json value_got = std::isfinite(got) ? nlohmann::json(got)
                             : std::isnan(got)  ? nlohmann::json("nan")
                                                : nlohmann::json(got > 0 ? "inf" : "-inf");
  std::string what =
      kind == "output_not_written"
          ? fmt::format("{} of {} elements still hold this iteration's poison", r.unwritten,
                        r.elements)
      : kind == "nan_or_inf"
          ? fmt::format("{} NaN/Inf elements where the reference is finite", r.nonfinite)
          : fmt::format(
                "{} of {} elements out of tolerance (atol {}, rtol {}); matched ratio "
                "{:.6f} < {}",
                r.mismatches + r.unwritten + r.nonfinite, r.elements, tol.atol, tol.rtol, matched,
                tol.required_matched_ratio);
  Failure f{kind,
            fmt::format("{}: {} (first at index {}: expected {}, got {})", t.name, what,
                        r.first_index, expected, value_got.dump()),
            {{"tensor", t.name},
             {"elements", r.elements},
             {"unwritten", r.unwritten},
             {"nonfinite", r.nonfinite},
             {"mismatches", r.mismatches},
             {"matched_ratio", matched},
             {"first_bad_index", r.first_index},
             {"expected", expected},
             {"got", value_got},
             {"max_abs_error", r.max_abs_error},
             {"max_rel_error", r.max_rel_error}}};
  return f;
}

Failure stale(const Failure& f, std::uint64_t iteration, int set) {
  Failure out{"stale_output",
              fmt::format("timed iteration {} (input set {}): {}", iteration, set, f.message),
              f.evidence};
  out.evidence["iteration"] = iteration;
  out.evidence["input_set"] = set;
  out.evidence["cause"] = f.kind;
  return out;
}

}  // namespace kharness::verify
