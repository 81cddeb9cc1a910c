// The correctness stage, harness side: `kharness check`. Compiles the candidate and the operator's
// reference (no GPU needed for that), then judges the candidate in a worker process — kharness
// re-executed in its hidden worker mode — with a wall-clock limit, so a crash, trap or hang ends
// the worker and becomes a verdict, never the end of the harness. docs/correctness.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/bench.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/target.hpp"
#include "kharness/verdict.hpp"

namespace kharness {

namespace verify {

// How a candidate is checked (the worker's side is verify/evaluate.hpp).
struct CheckOptions {
  std::vector<std::string> workloads;  // uuids or uuid prefixes; empty: every workload
  int trials = 3;
  std::uint64_t seed = 0;  // base seed; each trial's seed derives from it
  std::optional<double> atol, rtol, required_matched_ratio;  // override the definition's
  bool determinism = true;  // rerun the first trial on the same inputs

  nlohmann::json to_json() const;
  static CheckOptions from_json(const nlohmann::json& j);
};

}  // namespace verify

struct CheckRequest {
  std::filesystem::path solution;
  Target target;
  // The compile cache the parent compiled into and the worker reads (pipeline/evaluation.hpp: a
  // private one under --no-cache, so that an evaluation compiles once). Empty: the default cache
  // when use_cache, none otherwise.
  std::filesystem::path compile_cache_dir;
  double timeout_seconds = 60;  // the whole worker's wall-clock limit
  // A launch (a wait on the GPU in the worker) that lasts longer is a hang: TIMEOUT within seconds
  // (device/watchdog.hpp). <= 0: no launch watchdog, only timeout_seconds.
  double launch_timeout_seconds = 10;
  verify::CheckOptions options;
  // kCheck (correctness), kBench (timing, with timed outputs checked), kValidate (both) or
  // kCompile (compile and rules only: no GPU needed).
  Mode mode = Mode::kCheck;
  bench::BenchOptions bench;
  // Workloads added to the operator's for this check (held-out shapes, kharness/holdout.hpp), as
  // workload JSON; checked and compiled against like the shipped ones.
  std::vector<nlohmann::json> extra_workloads;
  // The GPU the worker runs on (docs/pipeline.md#pools-and-gpus: one worker per GPU of --gpus). The
  // worker sees only this GPU (CUDA_VISIBLE_DEVICES=its UUID), and the verdict's environment names
  // it. nullopt: the first visible GPU.
  std::optional<GpuInfo> gpu;
};

}  // namespace kharness
