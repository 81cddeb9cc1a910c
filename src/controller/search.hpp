// The optimisation loop of `kharness run` (docs/controller.md): from the operator's seed, ask a
// provider for better kernels, evaluate each through the pipeline (an Evaluator), feed back what it
// found, keep a few elites, restart from the best with half of the history masked when progress
// stalls (optimisation dropout), and promote a candidate only when it passes every workload and
// beats the incumbent by more than the measured noise in an interleaved re-timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/evaluator.hpp"
#include "controller/recorder.hpp"
#include "kharness/bench.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/target.hpp"
#include "kharness/verdict.hpp"
#include "llm/provider.hpp"
#include "pipeline/request.hpp"

namespace kharness::controller {

// What every evaluation of a run shares, before the command line: mode validate (each candidate
// says compile under --compile-only), a 300 s limit per evaluation, and no archiving by the
// pipeline (the run's recorder archives every candidate, with its prompt and answer).
pipeline::Request run_request();

struct SearchOptions {
  // The run's evaluations: the Target (operator, arch, caches), the limits and the timing
  // options; each candidate adds its own seed, workloads and incumbent (EvaluationRequest).
  pipeline::Request evaluation = run_request();
  std::string provider;  // name, for records and prices
  std::string model;
  nlohmann::json prices = nlohmann::json::object();  // the providers config
  int budget = 10;                                   // candidates
  std::int64_t max_tokens = 0;                       // input + output; 0: no limit
  double max_cost = 0.0;                             // US dollars; 0: no limit
  double max_time = 0.0;                             // seconds; 0: no limit
  int patience = 4;  // steps without promotion before a dropout restart
  // Promotion needs a gain over the incumbent above both the measured noise of the interleaved
  // re-timing and this floor. The noise (the median's standard error) misses what moves between
  // processes: one kernel and a restatement of it can score about 1% apart from one process to
  // the next while the noise of each reads under 0.7%.
  double min_gain = 0.02;
  int samples = 1;  // candidates asked for per step, in parallel
  // The pool's workers (--gpus): a step's candidates evaluate on them at once, one per worker;
  // the seed and re-timings on the first. Empty: one worker on the first visible GPU.
  std::vector<std::optional<GpuInfo>> gpus;
  int elites = 3;
  std::size_t prompt_tokens = 12000;
  std::int64_t max_output_tokens = 16384;
  std::string reasoning_effort;
  double request_timeout = 900;
  std::vector<std::string> hints;
  std::string diagnosis;  // a person's (or an earlier profile's) diagnosis text (optional)
  // Profile the best kernel (the seed, then every promoted one) on the largest representative
  // shape and put the counters' diagnosis into the prompts (needs a GPU and counter access).
  bool profile = true;
  bool compile_only = false;
  // Evaluate a candidate on the representatives of the workloads' size buckets first, and on
  // every workload only when it passes there at about the incumbent's score or better.
  bool cascade = true;
  std::uint64_t seed = 0;  // base seed for checks and the search's own choices
  std::filesystem::path skills_dir;
  std::filesystem::path work_dir;  // the run folder: candidate files are evaluated from here
  std::filesystem::path out;       // the best kernel is written here at the end (optional)
  // In-model validation (`--model`): a candidate its kernel verdict would promote is promoted
  // only when the model's layers pass model-check with it substituted (and, with --objective
  // layer, it speeds the layer up); the seeds' layer is checked and timed once at the start.
  ModelGate in_model;
};

// The settings of the real pipeline (StageEvaluator) for a run with these options.
StageSettings stage_settings(const SearchOptions& options);

// Shape cascade: the representatives of the workloads' size buckets (smallest, middle, largest
// third by the product of their var axes); all workloads when there are 3 or fewer.
std::vector<std::string> bucket_representatives(const Operator& op);

struct Progress {
  int candidates = 0;
  int budget = 0;
  std::string last_id, last_status;
  double best_score = 0.0;
  std::string best_id;
  std::int64_t tokens = 0;
  double cost = 0.0;
  double elapsed = 0.0;
  bool promoted = false;
};

struct SearchResult {
  std::vector<CandidateRecord> candidates;  // in order, the seed first
  std::string best_id;
  std::string best_source;
  double best_score = 0.0;
  double seed_score = 0.0;
  std::string stop_reason;  // "budget", "tokens", "cost", "time", "interrupted", "exhausted", ...
  std::optional<Error> fatal;  // a provider failure that stopped the run (bad key, quota)
  std::int64_t tokens = 0;
  double cost = 0.0;
  double seconds = 0.0;
  int dropouts = 0;
  // With --model: the model-checks run (the seeds' layer at the start included), and how many
  // of them failed.
  int model_checks = 0, model_failures = 0;
  nlohmann::json summary;    // machine-readable
  std::string summary_text;  // the table printed at the end
};

class Search {
 public:
  // Evaluates through `evaluator`, asks `provider`, records to `recorder`; stops when `*stop`
  // turns true; times with `clock`. All outlive the Search.
  Search(SearchOptions options, Evaluator& evaluator, llm::Provider& provider,
         RunRecorder& recorder, const std::atomic<bool>* stop = nullptr,
         const Clock& clock = steady_clock());
  // Carries on from what the recorder holds (--resume): the best kernel, the elites, the history,
  // the stall count and the dropouts (with the same records masked) as the earlier session left
  // them.
  void resume(const std::vector<CandidateRecord>& earlier);
  // Runs to a stop condition. Throws Error only for bad input (unknown operator, broken seed) and
  // environment failures before the first candidate (no GPU); a provider failure mid-run ends the
  // run with `fatal` set, everything recorded.
  SearchResult run(const std::function<void(const Progress&)>& on_progress = {});

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// What an interleaved timing against the incumbent says: per-workload speedups over it, the
// change they make to the definition score, and the combined relative noise of the latencies.
//
// The score is the mean over workloads of the speedup over the operator's baseline, so a candidate
// changes it by the per-workload ratios weighted by the incumbent's speedups there:
// score_ratio = sum(s_w * r_w) / sum(s_w). Promotion and the cascade judge by it. An unweighted
// mean of the ratios could promote a candidate that lowers the score: faster where the baseline
// is fast, slower where it is slow, it can beat the incumbent by 3% on the unweighted mean and
// still lower the score.
struct Comparison {
  std::map<std::string, double> ratio;  // uuid -> incumbent latency / candidate latency
  double score_ratio = 0.0;             // the candidate's definition score over the incumbent's
  double noise = 0.0;                   // relative, weighted the same way
  bool complete = false;                // every evaluated workload has a ratio
};

// `v`: a validation timed against the incumbent (each workload's timing.speedup is the ratio);
// `weight`: the incumbent's speedup over the operator's baseline per workload uuid (1 where
// unknown).
Comparison compare_with_incumbent(const Verdict& v, const std::map<std::string, double>& weight);

// Why `v` may not become the best (nor an elite, nor the seed of a run): it failed, or it PASSED
// but was timed faster than light (docs/verdicts.md#suspect-verdicts: never promoted). "" when it
// may.
std::string promotion_refusal(const Verdict& v);

// The score ratio a complete comparison must exceed for a promotion: 1 + max(min_gain, noise).
double promotion_threshold(const Comparison& c, double min_gain);

}  // namespace kharness::controller
