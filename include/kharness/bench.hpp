// The timing stage's options (docs/timing.md#protocols): what `bench`, `validate`, `score` and
// `run` ask the worker's timing for. The stage itself runs in the worker (src/bench/benchmark.hpp);
// its results are kharness/timing.hpp's types.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kharness/timing.hpp"

namespace kharness::bench {

struct BenchOptions {
  Protocol protocol = Protocol::kAdaptive;
  Timer timer = Timer::kCupti;
  int warmup = 10;  // official: per trial; adaptive: once, at most
  // Adaptive: the warmup ends once this much time has passed (the first round's duration times
  // the rounds so far; at least one round), like nvbench's one warmup launch: ten warmup rounds
  // of a 40 ms kernel are 0.4 s of a run's candidate, and the first 50 ms do the warming.
  double warmup_seconds = 0.05;
  int iterations = 50;       // official: per trial
  int trials = 3;            // official
  double max_noise = 0.005;  // adaptive: relative noise of the median estimate
  double max_seconds = 2.0;  // adaptive: per workload, wall clock
  int min_samples = 10;      // adaptive
  int input_sets = 3;        // visited in a seeded random order during timing (>= 2)
  StateReset state_reset = StateReset::kAuto;
  bool baseline = true;  // time the operator's baseline too
  // "" (the operator's baseline), "cublaslt" (the built-in cuBLASLt GEMM), or a solution path.
  std::string baseline_solution;
  SolSource sol = SolSource::kDatasheet;  // speed-of-light ceilings

  // Every field, by the names of the CLI's options' values ("adaptive", "cupti", ...).
  nlohmann::json to_json() const;
  // Missing fields keep their defaults; throws std::runtime_error for an unknown enum name.
  static BenchOptions from_json(const nlohmann::json& j);
};

}  // namespace kharness::bench
