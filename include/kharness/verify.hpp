// The correctness stage's options, harness side: what `kharness check` asks of the worker's
// trials. The stage runs in a worker process — kharness re-executed in its hidden worker mode —
// with a wall-clock limit, so a crash, trap or hang ends the worker and becomes a verdict, never
// the end of the harness; the request that carries these options there is pipeline::Request
// (src/pipeline/request.hpp). docs/correctness.md.
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

}  // namespace kharness
