#include "kharness/error.hpp"

namespace kharness {

Error::Error(ExitCode code, std::string where, const std::string& what)
    : std::runtime_error(what), code_(code), where_(std::move(where)) {}

std::string Error::message() const {
  if (where_.empty()) return what();
  return where_ + ": " + what();
}

Error input_error(std::string where, const std::string& what) {
  return Error(ExitCode::kUsage, std::move(where), what);
}

Error environment_error(const std::string& what) { return Error(ExitCode::kEnvironment, "", what); }

}  // namespace kharness
