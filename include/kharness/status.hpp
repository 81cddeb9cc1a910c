// Verdict statuses (FlashInfer-Bench Trace evaluation statuses plus REJECTED).
// docs/verdicts.md#statuses.
#pragma once

#include <optional>
#include <string_view>

namespace kharness {

enum class Status {
  kPassed,
  kCompileError,
  kIncorrectShape,
  kIncorrectDtype,
  kIncorrectNumerical,
  kRuntimeError,
  kTimeout,
  kRejected,
};

std::string_view status_name(Status status);  // "PASSED", "COMPILE_ERROR", ...
std::optional<Status> parse_status(std::string_view name);

}  // namespace kharness
