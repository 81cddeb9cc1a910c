// The command line: one table of subcommands (commands.cpp), one place that prints errors.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/error.hpp"

namespace kharness::cli {

// Options every subcommand sees.
struct GlobalOptions {
  int verbosity = 0;
  bool quiet = false;
  std::vector<std::filesystem::path> operators_dirs;
  std::filesystem::path archive_dir;  // --archive; empty: $KHARNESS_ARCHIVE, else ./.kharness
  double compile_timeout = 0;         // --compile-timeout; 0: KHARNESS_COMPILE_TIMEOUT, else 60 s
  bool allow_unsandboxed = false;     // --allow-unsandboxed (also KHARNESS_ALLOW_UNSANDBOXED=1)
  std::filesystem::path cutlass_dir;  // --cutlass; empty: KHARNESS_CUTLASS, else an installed wheel
};

// The work of a parsed subcommand; returns the process exit code.
using Runner = std::function<ExitCode(const GlobalOptions&)>;

struct Command {
  std::string_view name;
  std::string_view summary;  // the one line --help shows
  // Adds the subcommand's options to `app` and returns what runs it once parsed.
  std::function<Runner(CLI::App& app)> setup;
};

const std::vector<Command>& commands();

int run(int argc, char** argv);

}  // namespace kharness::cli
