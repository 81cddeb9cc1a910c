// The timing stage, GPU side (runs in the worker): times a solution's launches per workload with
// CUPTI activity records (or CUDA events, for comparison), L2 flushed before every iteration and
// persisting L2 off; the operator's baseline is timed in the same loop, interleaved (A B, B A,
// ...), so clock drift cancels. DESIGN §6. Every iteration, timed or warmup, is a checked one
// (DESIGN §5): outside the timed span its outputs get a poison that changes every iteration and
// its workspace NaN bytes, the module's globals are reset to their loaded state, shared memory is
// overwritten, and afterwards its outputs are checked against the reference outputs of its input
// set (on the device, sealed; verify::TimedOutputs). Input sets (3 by default) are visited in a
// seeded random order; guards, inputs and sealed references are checked after every batch of a
// random length. A failure is the workload's verdict (stale_output naming the iteration).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"
#include "verify/evaluate.hpp"

namespace kharness::bench {

struct BenchOptions {
  std::string protocol =
      "adaptive";  // "adaptive" (noise-based stopping) or "official" (FlashInfer-Bench)
  std::string timer = "cupti";  // "cupti" or "events" (comparison only)
  int warmup = 10;              // official: per trial; adaptive: once
  int iterations = 50;          // official: per trial
  int trials = 3;               // official
  double max_noise = 0.005;     // adaptive: relative noise of the median estimate
  double max_seconds = 2.0;     // adaptive: per workload, wall clock
  int min_samples = 10;         // adaptive
  int input_sets = 3;           // visited in a seeded random order during timing (>= 2)
  // How a module's global variables are reset before every iteration: "auto" (their initial bytes
  // copied back; the module reloaded when some cannot be resolved) or "reload" (always reloaded,
  // to measure the difference).
  std::string state_reset = "auto";
  bool baseline = true;  // time the operator's baseline too
  // "" (the operator's baseline), "cublaslt" (the built-in cuBLASLt GEMM), or a solution path.
  std::string baseline_solution;
  // Speed-of-light ceilings: "datasheet" (configs/gpus) or "measured" (`kharness doctor
  // --measure`'s copy bandwidth and cuBLASLt GEMM rates for this GPU and driver).
  std::string sol = "datasheet";

  nlohmann::json to_json() const;
  static BenchOptions from_json(const nlohmann::json& j);
};

// Times every selected workload; fills each WorkloadVerdict's `timing` and the verdict's `score`.
// A stale_output (or a timing error) turns the workload and the verdict into failures.
// `baseline` may be null (no speedup then).
void benchmark(const Operator& op, const verify::Compiled& reference,
               const verify::Compiled& candidate, const verify::Compiled* baseline,
               const verify::CheckOptions& check, const BenchOptions& options, Verdict& verdict);

}  // namespace kharness::bench
