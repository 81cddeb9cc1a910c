// The table of subcommands: `--help` and dispatch both read it, so they cannot drift apart.
#include "cli/commands.hpp"

#include "cli/cli.hpp"

namespace kharness::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"compile", "Compile a solution with NVRTC and check it against its operator (no GPU needed)",
       setup_compile},
      {"doctor", "Show GPUs, driver, NVRTC/CUPTI versions and whether counters are permitted",
       setup_doctor},
      {"validate", "Compile, check and time solutions: one verdict with latency, speedup and % SOL",
       setup_validate},
      {"check",
       "Compile and check solutions for correctness on the GPU, each in an isolated worker",
       setup_check},
      {"bench", "Time solutions with CUPTI (cold L2, rotated inputs, baseline interleaved)",
       setup_bench},
      {"score", "Validate many solutions; write JSON, JUnit, Markdown and FlashInfer-Bench traces",
       setup_score},
      {"profile",
       "Hardware counters per kernel (CUPTI) and a diagnosis: memory-, compute-, latency-bound, "
       "occupancy-limited or at the roofline",
       setup_profile},
      {"report", "Summarise runs from the archive: candidates, best per operator, --html charts",
       setup_report},
      {"runs", "List the runs in the archive (./.kharness, --archive DIR)", setup_runs},
      {"archive", "Archive maintenance: `archive merge DEST SRC...` joins archives (shards)",
       setup_archive},
      {"show", "Show an archived candidate: verdict, files, diff against its parent", setup_show},
      {"operators", "List, show and check operator definitions", setup_operators},
      {"run",
       "Optimise an operator's kernel with a model: prompts, candidates, verdicts, promotion",
       setup_run},
      {"export",
       "Write a solution as a FlashInfer-Bench Solution JSON with a host launcher generated "
       "from its plan (--fib FILE)",
       setup_export},
      {"compare",
       "Compare two score/validate/bench JSON files: per solution and workload, faster, slower, "
       "same or unclear within the measured noise; --fail-on-regression PCT",
       setup_compare},
      {"model-check",
       "Run a model's layers (models/) with the references, then with solutions substituted; "
       "compare the hidden states under the model's tolerance",
       setup_model_check},
      {"tune-space",
       "Show the knob space of an operator's seed; list, write or compile configurations",
       setup_tune_space},
      // Hidden (no summary): the worker process `check` runs each solution in, and the sandboxed
      // compiler process of the compile stage.
      {"__worker", "", setup_worker},
      {"__compile_worker", "", setup_compile_worker},
  };
  return table;
}

}  // namespace kharness::cli
