// Errors a user can act on. Loaders and parsers throw kharness::Error; the CLI catches it once,
// prints one line ("kharness: error: <where>: <what>") and exits with its code
// (docs/verdicts.md#exit-codes).
// Stages do not throw past the pipeline: they turn failures into verdict statuses.
#pragma once

#include <stdexcept>
#include <string>

namespace kharness {

// Exit codes of every command (docs/verdicts.md#exit-codes).
enum class ExitCode : int {
  kPassed = 0,       // all passed
  kFailed = 1,       // a solution failed; the verdict says why
  kUsage = 2,        // bad usage or bad input
  kEnvironment = 3,  // no GPU, driver too old, counters not permitted
  kInternal = 4,     // a bug in kharness
};

class Error : public std::runtime_error {
 public:
  // `where` names the file and the field or line ("defs/x.json: inputs.q.dtype"); may be empty.
  Error(ExitCode code, std::string where, const std::string& what);

  ExitCode code() const { return code_; }
  const std::string& where() const { return where_; }
  // "where: what", or "what" when there is no location.
  std::string message() const;

 private:
  ExitCode code_;
  std::string where_;
};

// Bad usage or bad input (exit 2).
Error input_error(std::string where, const std::string& what);
// The machine cannot do what was asked: no driver, no GPU, counters not permitted (exit 3).
Error environment_error(const std::string& what);

}  // namespace kharness
