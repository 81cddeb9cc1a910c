// What became of a candidate of a run: the pipeline's verdict status, or one of the controller's
// own outcomes (an answer without a usable solution, a duplicate, a suspect time, ...). The run's
// records, its summary table and the provider's feedback write it by name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kharness/status.hpp"

namespace kharness::controller {

enum class Outcome {
  kVerdict,          // judged by the pipeline: CandidateStatus::verdict says how
  kCompiled,         // COMPILED: compiles and keeps the rules (--compile-only)
  kSuspect,          // SUSPECT: PASSED, but timed faster than light: never promoted
  kDuplicate,        // DUPLICATE: the same source as an earlier candidate
  kNotEvaluated,     // NOT_EVALUATED: the run stopped before evaluating it
  kNoCode,           // NO_CODE: the answer has no code block
  kTruncated,        // TRUNCATED: the answer was cut by the output limit
  kConflictingCode,  // CONFLICTING_CODE: several different planned blocks
  kBadPlan,          // BAD_PLAN: the plan comment is missing or does not parse
  kBadResponse,      // BAD_RESPONSE: the provider's response could not be read
};

struct CandidateStatus {
  Outcome outcome = Outcome::kNotEvaluated;
  Status verdict = Status::kPassed;  // kVerdict: the verdict's status

  static CandidateStatus of(Status status) { return {Outcome::kVerdict, status}; }
  // PASSED, as a verdict (a suspect or compile-only one is not).
  bool passed() const { return outcome == Outcome::kVerdict && verdict == Status::kPassed; }
  // "PASSED", "COMPILE_ERROR", ... for a verdict; "COMPILED", "NO_CODE", ... for the others.
  std::string name() const;
  // The status of `name` (as name() writes it); nullopt for another name.
  static std::optional<CandidateStatus> parse(std::string_view name);

  bool operator==(const CandidateStatus& other) const {
    return outcome == other.outcome && (outcome != Outcome::kVerdict || verdict == other.verdict);
  }
  bool operator!=(const CandidateStatus& other) const { return !(*this == other); }
};

}  // namespace kharness::controller
