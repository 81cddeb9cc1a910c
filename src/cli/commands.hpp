// One setup function per subcommand (each in its cmd_*.cpp).
#pragma once

#include "cli/cli.hpp"

namespace kharness::cli {

Runner setup_compile(CLI::App& app);
Runner setup_doctor(CLI::App& app);
Runner setup_operators(CLI::App& app);
Runner setup_check(CLI::App& app);
Runner setup_bench(CLI::App& app);
Runner setup_validate(CLI::App& app);
Runner setup_score(CLI::App& app);
Runner setup_runs(CLI::App& app);
Runner setup_archive(CLI::App& app);
Runner setup_show(CLI::App& app);
Runner setup_report(CLI::App& app);
Runner setup_tune_space(CLI::App& app);
Runner setup_worker(CLI::App& app);
Runner setup_compile_worker(CLI::App& app);
Runner setup_profile(CLI::App& app);
Runner setup_run(CLI::App& app);
Runner setup_export(CLI::App& app);
Runner setup_compare(CLI::App& app);
Runner setup_model_check(CLI::App& app);

}  // namespace kharness::cli
