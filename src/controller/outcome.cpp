#include "controller/outcome.hpp"

#include <utility>

namespace kharness::controller {
namespace {

constexpr std::pair<Outcome, std::string_view> kNames[] = {
    {Outcome::kCompiled, "COMPILED"},
    {Outcome::kSuspect, "SUSPECT"},
    {Outcome::kDuplicate, "DUPLICATE"},
    {Outcome::kNotEvaluated, "NOT_EVALUATED"},
    {Outcome::kNoCode, "NO_CODE"},
    {Outcome::kTruncated, "TRUNCATED"},
    {Outcome::kConflictingCode, "CONFLICTING_CODE"},
    {Outcome::kBadPlan, "BAD_PLAN"},
    {Outcome::kBadResponse, "BAD_RESPONSE"},
};

}  // namespace

std::string CandidateStatus::name() const {
  if (outcome == Outcome::kVerdict) return std::string(status_name(verdict));
  for (const auto& [o, n] : kNames) {
    if (o == outcome) return std::string(n);
  }
  return "NOT_EVALUATED";
}

std::optional<CandidateStatus> CandidateStatus::parse(std::string_view name) {
  for (const auto& [o, n] : kNames) {
    if (n == name) return CandidateStatus{o, Status::kPassed};
  }
  if (auto s = parse_status(name)) return of(*s);
  return std::nullopt;
}

}  // namespace kharness::controller
