// Shared helpers for the CPU tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "kharness/error.hpp"

namespace kharness::testing {

// The compile stage runs NVRTC in kharness re-executed as `__compile_worker`; a test binary is
// not kharness, so it names the built one (before main, whichever test runs first).
inline const bool kCompileWorkerNamed = [] {
  ::setenv("KHARNESS_COMPILE_WORKER", KHARNESS_BINARY, 0);
  return true;
}();

inline std::filesystem::path fixture(const std::string& relative) {
  return std::filesystem::path(KHARNESS_TEST_FIXTURES) / relative;
}

inline std::filesystem::path source_dir() { return std::filesystem::path(KHARNESS_SOURCE_DIR); }

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together when merge_stderr
};

// Runs a shell command line; returns its exit code and output.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs the built kharness binary with `args` (a shell fragment), stderr merged into the output.
inline CommandResult kharness(const std::string& args) {
  return run_command(std::string("'") + KHARNESS_BINARY + "' " + args + " 2>&1");
}

// A fresh empty folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kharness-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;  // owns the folder: copying would remove it twice
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Expects `fn` to throw a kharness::Error of exit code 2 whose location contains `where` and whose
// message contains `what`.
template <class Fn>
void expect_input_error(Fn fn, const std::string& where, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << where << ": " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage) << e.message();
    EXPECT_NE(e.where().find(where), std::string::npos) << e.message();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.message();
  }
}

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;  // restores once
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace kharness::testing
