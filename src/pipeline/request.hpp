// One evaluation request, from the command line to the worker (docs/pipeline.md#the-request). A
// Request is built of one option struct per concern, like CUTLASS's profiler Options: what every
// evaluation of an invocation shares (mode, Target, limits, correctness and timing options,
// held-out shapes, archive), then what one evaluation adds (the candidate, the baseline it is
// timed against, its held-out workloads). `check`, `bench`, `validate` and `score` fill it
// straight from their flags (cli/cmd_check.cpp), `run` keeps one in its SearchOptions, the
// pipeline (pipeline/evaluation.hpp) completes it per candidate, and the worker receives it as
// JSON (request_json, request_from_json) and reads it as it is: the baseline is resolved once,
// in the pipeline (resolve_baseline), and the worker never chooses again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/bench.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/target.hpp"
#include "kharness/timing.hpp"
#include "kharness/verify.hpp"
#include "verify/load.hpp"

namespace kharness::pipeline {

// The worker's two clocks (docs/pipeline.md#worker).
struct Timeouts {
  double seconds = 60;  // the whole worker's wall clock (--timeout), before sharing
  // A launch (a wait on the GPU in the worker) that lasts longer is a hang: TIMEOUT within seconds
  // (device/watchdog.hpp). <= 0: no launch watchdog, only `seconds`.
  double launch_seconds = 10;
};

// What the pipeline archives of an invocation. Parent-side only: never sent to the worker.
struct ArchiveSettings {
  // false: the verdict cache is read but nothing is archived and no archive run is begun: the
  // caller archives Evaluation::record itself (the controller's recorder, whose record of a
  // candidate holds its prompt and answer too).
  bool enabled = true;
  std::filesystem::path dir;                           // empty: archive::Archive::default_dir()
  std::string command = "check";                       // kept in the archive's run record
  std::vector<std::string> solutions;                  // for the run record
  nlohmann::json run_info = nlohmann::json::object();  // added to the run record
};

// One solution to evaluate, and what its evaluation changes of the invocation's request (the
// controller's: each candidate its own mode, seed, workloads and incumbent). with_candidate()
// applies the changes; the fields keep what the caller asked.
struct Candidate {
  std::filesystem::path solution;
  // The worker's GPU (one worker per GPU of --gpus; the worker sees only this one, and the
  // verdict's environment names it). nullopt: the first visible GPU. Parent-side only.
  std::optional<GpuInfo> gpu;
  // Kept in the candidate's record.json (score keeps the submission's place there). Parent-side.
  nlohmann::json extra = nlohmann::json::object();
  std::optional<Mode> mode;            // else the request's
  std::optional<std::uint64_t> seed;   // else the request's check.seed
  std::vector<std::string> workloads;  // uuids; empty: the request's check.workloads
  // A solution timed interleaved with the candidate as its baseline instead of the request's
  // (the controller's incumbent). The verdict cache keys it by its content, not its path.
  std::filesystem::path baseline;
};

// The baseline a candidate is timed against, as resolve_baseline chose it.
struct Baseline {
  enum class Kind { kNone, kSolution, kCublasLt };
  Kind kind = Kind::kNone;
  std::filesystem::path solution;  // kSolution: the baseline's solution, absolute
  // The operator's own (its baseline/ folder or its definition's "baseline"): one that does not
  // compile is kharness's failure (exit 4); the user's (--baseline) or the incumbent is bad input.
  bool from_operator = false;

  friend bool operator==(const Baseline& a, const Baseline& b) {
    return a.kind == b.kind && a.solution == b.solution && a.from_operator == b.from_operator;
  }
};

struct Request {
  // ---- Shared by every evaluation of one invocation ----
  // kCheck (correctness), kBench (timing, with timed outputs checked), kValidate (both) or
  // kCompile (compile and rules only: no GPU needed).
  Mode mode = Mode::kCheck;
  Target target;  // use_cache: the verdict cache too
  // The compile cache the parent compiled into and the worker reads (a private one under
  // --no-cache, so that an evaluation compiles once). Empty: the default cache when use_cache,
  // none otherwise. Set by the pipeline.
  std::filesystem::path compile_cache_dir;
  Timeouts timeouts;
  int sharing = 1;             // the most workers on one GPU: the worker's limit is that many times
  verify::CheckOptions check;  // trials, workloads, seed, tolerances
  bool seed_given = false;     // a verdict under a random seed stands for any seed in the cache
  // The timing options; bench.baseline and bench.baseline_solution are what was asked for (no
  // baseline, "cublaslt", a solution path, "" for the operator's), `baseline` below what it is.
  bench::BenchOptions bench;
  int holdout = 0;  // --holdout N: held-out shapes per definition (kharness/holdout.hpp)
  ArchiveSettings archive;

  // ---- This evaluation's (the pipeline fills them per candidate) ----
  Candidate candidate;
  Baseline baseline;  // resolve_baseline's choice; the worker times exactly this
  // The held-out workloads added to the operator's for this evaluation, as workload JSON;
  // checked and compiled against like the shipped ones.
  std::vector<nlohmann::json> holdout_workloads;
};

// `shared` for one candidate: the candidate, with its mode, seed, workloads and baseline in place
// of the shared ones.
Request with_candidate(Request shared, Candidate candidate);

// The one place a baseline is chosen, in this order: none under --no-baseline; the candidate's
// (the incumbent); --baseline cublaslt or --baseline PATH; the definition's "baseline":
// "cublaslt"; the operator's baseline solution; else none (no speedup).
Baseline resolve_baseline(const Request& request, const Operator& op);

// The whole worker's wall-clock limit: --timeout times the workers sharing its GPU.
double worker_timeout_seconds(const Request& request);

// The request on its way to the worker ("schema": "kharness.request/1"): every field but the
// parent's own (archive, candidate.gpu, candidate.extra), with the candidate's changes already
// applied by with_candidate. request_from_json throws std::runtime_error or nlohmann::json's
// errors for a request it cannot read.
nlohmann::json request_json(const Request& request);
Request request_from_json(const nlohmann::json& j);

// The request's compile options; the compile limit is never above the worker's limit.
CompileOptions compile_options(const Request& request);
// The candidate, the reference and the operator of the request, compiled.
verify::Loaded load_request(const Request& request);

}  // namespace kharness::pipeline
