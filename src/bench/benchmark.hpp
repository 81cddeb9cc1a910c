// The timing stage, GPU side (runs in the worker): times a solution's launches per workload with
// CUPTI activity records (or CUDA events, for comparison), L2 flushed before every iteration and
// the persisting-L2 limit at 0; inputs rotate among several sets and the outputs of each set's last
// timed iteration are checked against the reference (stale_output); the operator's baseline is
// timed in the same loop, interleaved (A B A B ...), so clock drift cancels. DESIGN §6.
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
  int input_sets = 2;           // rotated during timing (>= 2)
  bool baseline = true;         // time the operator's baseline too
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
