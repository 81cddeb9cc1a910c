#include "cli/cli.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "kharness/version.hpp"

namespace kharness::cli {
namespace {

void print_error(const std::string& message) {
  // One line of bounded length, whatever a message quotes.
  std::fprintf(stderr, "kharness: error: %s\n", printable_line(bounded(message, 2000)).c_str());
}

void setup_logging(const GlobalOptions& options) {
  auto logger = spdlog::stderr_color_mt("kharness");
  // -vv: each line also says how long after the previous one it came (where the time goes).
  logger->set_pattern(options.verbosity >= 2 ? "kharness: %^%l%$ (+%o ms): %v"
                                             : "kharness: %^%l%$: %v");
  spdlog::level::level_enum level = spdlog::level::info;
  if (options.quiet) level = spdlog::level::err;
  if (options.verbosity == 1) level = spdlog::level::debug;
  if (options.verbosity >= 2) level = spdlog::level::trace;
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

// The first word that is not an option (or an option's value): the subcommand as typed.
std::string typed_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--operators-dir" || arg == "--archive" || arg == "--compile-timeout" ||
        arg == "--cutlass") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] != '-') return arg;
  }
  return "";
}

// CLI11's messages, made into one line, with a suggestion for a mistyped subcommand.
std::string usage_message(const CLI::ParseError& e, int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto& c : commands()) names.emplace_back(c.name);
  std::string typed = typed_command(argc, argv);
  if (!typed.empty() && std::find(names.begin(), names.end(), typed) == names.end()) {
    auto close = close_matches(typed, names, 1);
    if (!close.empty())
      return fmt::format("unknown command '{}' (did you mean '{}'?)", typed, close[0]);
    return fmt::format("unknown command '{}' (kharness --help lists them)", typed);
  }
  if (typed.empty()) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      bool known = false;
      for (const char* k :
           {"-v", "-vv", "--verbose", "-q", "--quiet", "--operators-dir", "--archive",
            "--compile-timeout", "--allow-unsandboxed", "--cutlass", "-h", "--help", "--version"}) {
        known = known || arg == k;
      }
      if (arg.rfind("-", 0) == 0 && !known)
        return fmt::format("unknown option '{}' (see --help)", arg);
    }
  }
  std::string what = e.what();
  for (auto& c : what) {
    if (c == '\n') c = ' ';
  }
  return what + " (see --help)";
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"kharness: decides whether a CUDA kernel is correct and how fast it is."};
  app.set_version_flag("--version", fmt::format("kharness {} (commit {})", kVersion, kGitCommit),
                       "Print the version and git commit");
  app.require_subcommand(1);
  app.fallthrough();
  GlobalOptions global;
  app.add_flag("-v,--verbose", global.verbosity, "More log output on stderr (-vv: trace)");
  app.add_flag("-q,--quiet", global.quiet, "Only errors on stderr");
  app.add_option("--operators-dir", global.operators_dirs,
                 "Extra folder of operator definitions (repeatable; also KHARNESS_OPERATORS)")
      ->type_name("DIR");
  app.add_option("--archive", global.archive_dir,
                 "Archive of evaluations (default: $KHARNESS_ARCHIVE, else ./.kharness)")
      ->type_name("DIR");
  app.add_option("--compile-timeout", global.compile_timeout,
                 "Wall-clock and CPU limit of one NVRTC compile, in seconds (default 60; "
                 "also KHARNESS_COMPILE_TIMEOUT; never above a command's --timeout)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  app.add_flag("--allow-unsandboxed", global.allow_unsandboxed,
               "Evaluate untrusted solutions even where Linux Landlock is unavailable (the "
               "compiler then runs without its file sandbox; also KHARNESS_ALLOW_UNSANDBOXED=1)");

  app.add_option("--cutlass", global.cutlass_dir,
                 "CUTLASS release whose CuTe and CUTLASS headers solutions may include: its "
                 "include folder or checkout (default: $KHARNESS_CUTLASS, else the headers of an "
                 "installed nvidia-cutlass wheel)")
      ->type_name("DIR");

  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (const auto& command : commands()) {
    CLI::App* sub = app.add_subcommand(std::string(command.name), std::string(command.summary));
    if (command.summary.empty()) sub->group("");  // hidden from --help
    runners.emplace_back(sub, command.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // "kharness nosuch --help" is a mistyped command, not a request for the main help.
    std::string typed = typed_command(argc, argv);
    bool known = typed.empty();
    for (const auto& c : commands()) known = known || c.name == typed;
    if (!known) {
      print_error(usage_message(e, argc, argv));
      return static_cast<int>(ExitCode::kUsage);
    }
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(usage_message(e, argc, argv));
    return static_cast<int>(ExitCode::kUsage);
  }

  // An option given an empty value ("--operator ''", a variable that expanded to nothing) is a
  // mistake, not the option left out: the commands read empty as "not given".
  std::vector<const CLI::App*> parsed = {&app};
  for (const auto& [sub, runner] : runners)
    if (sub->parsed()) parsed.push_back(sub);
  for (const CLI::App* one : parsed) {
    for (const CLI::Option* opt : one->get_options()) {
      if (opt->count() == 0 || opt->get_type_size() == 0) continue;  // not given, or a flag
      for (const std::string& value : opt->results()) {
        if (value.empty()) {
          print_error(fmt::format("{}: empty value", opt->get_name()));
          return static_cast<int>(ExitCode::kUsage);
        }
      }
    }
  }

  setup_logging(global);
  // The compile stage and every worker read these (KHARNESS_* passes the workers' scrubbed
  // environment): one setting for the whole run, whichever process compiles.
  if (global.compile_timeout > 0)
    ::setenv("KHARNESS_COMPILE_TIMEOUT", fmt::format("{}", global.compile_timeout).c_str(), 1);
  if (global.allow_unsandboxed) ::setenv("KHARNESS_ALLOW_UNSANDBOXED", "1", 1);
  try {
    if (!global.cutlass_dir.empty()) {
      // Checked once here (a folder without CUTLASS headers is bad usage), then read by every
      // compile, in this process and in the workers, as KHARNESS_CUTLASS.
      const CutlassRoot root = cutlass_root_at(global.cutlass_dir, "--cutlass");
      ::setenv("KHARNESS_CUTLASS", root.include_dir.c_str(), 1);
    }
    for (auto& [sub, runner] : runners) {
      if (sub->parsed()) return static_cast<int>(runner(global));
    }
    print_error("no command given (see --help)");
    return static_cast<int>(ExitCode::kUsage);
  } catch (const Error& e) {
    print_error(e.message());
    return static_cast<int>(e.code());
  } catch (const CLI::ParseError& e) {
    print_error(usage_message(e, argc, argv));
    return static_cast<int>(ExitCode::kUsage);
  } catch (const std::exception& e) {
    print_error(fmt::format("internal error: {} (please report it)", e.what()));
    return static_cast<int>(ExitCode::kInternal);
  }
}

}  // namespace kharness::cli
