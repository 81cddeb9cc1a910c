// What every fuzz target holds kharness to: an input is either accepted or refused with
// kharness::Error as an input error (exit 2). Any other exception, an
// internal error, a crash, a sanitizer report or a hang is a bug (libFuzzer stops on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kharness/error.hpp"

namespace kharness::fuzz {

inline std::string text(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A bug found: thrown past LLVMFuzzerTestOneInput it ends the fuzzer (an uncaught exception);
// tests/fuzz_regression_test.cpp catches it as a test failure.
struct Finding : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs `fn`; an input error of one line is the expected refusal, any other Error is a finding
// (another exception escapes as it is: a finding too).
template <class Fn>
void expect_accepted_or_input_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) {
      throw Finding("not an input error (exit " + std::to_string(static_cast<int>(e.code())) +
                    "): " + e.message());
    }
  }
}

// As expect_accepted_or_input_error, and the refusal is one line that does not quote the JSON
// library (its "type must be string, but is number" names no file or field a user can find).
template <class Fn>
void expect_accepted_or_clean_input_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) {
      throw Finding("not an input error (exit " + std::to_string(static_cast<int>(e.code())) +
                    "): " + e.message());
    }
    const std::string message = e.message();
    for (const char* library :
         {"type must be", "cannot use ", "json.exception", "is out of range"}) {
      if (message.find(library) != std::string::npos)
        throw Finding("quotes the JSON library: " + message);
    }
    if (message.find('\n') != std::string::npos) throw Finding("not one line: " + message);
  }
}

}  // namespace kharness::fuzz
