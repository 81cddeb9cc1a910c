#include "kharness/status.hpp"

#include <array>
#include <utility>

namespace kharness {
namespace {

constexpr std::array<std::pair<Status, std::string_view>, 8> kNames = {{
    {Status::kPassed, "PASSED"},
    {Status::kCompileError, "COMPILE_ERROR"},
    {Status::kIncorrectShape, "INCORRECT_SHAPE"},
    {Status::kIncorrectDtype, "INCORRECT_DTYPE"},
    {Status::kIncorrectNumerical, "INCORRECT_NUMERICAL"},
    {Status::kRuntimeError, "RUNTIME_ERROR"},
    {Status::kTimeout, "TIMEOUT"},
    {Status::kRejected, "REJECTED"},
}};

}  // namespace

std::string_view status_name(Status status) {
  for (const auto& [s, name] : kNames) {
    if (s == status) return name;
  }
  return "UNKNOWN";
}

std::optional<Status> parse_status(std::string_view name) {
  for (const auto& [s, n] : kNames) {
    if (n == name) return s;
  }
  return std::nullopt;
}

}  // namespace kharness
