// The table of subcommands: `--help` and dispatch both read it, so they cannot drift apart.
#include "cli/cli.hpp"
#include "cli/commands.hpp"

namespace kharness::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"compile", "Compile a solution with NVRTC and check it against its operator (no GPU needed)",
       setup_compile},
      {"doctor", "Show GPUs, driver, NVRTC/CUPTI versions and whether counters are permitted",
       setup_doctor},
      {"operators", "List, show and check operator definitions", setup_operators},
  };
  return table;
}

}  // namespace kharness::cli
