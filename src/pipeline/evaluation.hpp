// One evaluation, from a solution's path to its archived verdict (docs/pipeline.md): the module
// that owns it. An Evaluator serves one invocation (`check`, `bench`, `validate`, `score`): for
// each solution it loads the candidate, its operator and the reference once, looks the verdict up
// in the archive's verdict cache, on a miss compiles once (the worker's compiles are hits of the
// same compile cache: a private one under --no-cache) and runs the worker (verify, then time),
// and archives the candidate with the artifacts of that one compile. A malformed solution
// becomes a REJECTED verdict here, once. Data flows one way: Request (pipeline/request.hpp) ->
// Evaluation.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/archive.hpp"
#include "kharness/bench.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/holdout.hpp"
#include "kharness/target.hpp"
#include "kharness/verdict.hpp"
#include "kharness/verify.hpp"
#include "pipeline/request.hpp"
#include "verify/load.hpp"

namespace kharness::pipeline {

struct Evaluation {
  Verdict verdict;
  std::string candidate_id;  // "" when not archived
  std::string cached_from;   // the candidate whose verdict was reused; "" when evaluated
  std::string cache_key;     // the verdict cache's key of this evaluation; "" when not keyed
  // This evaluation's request as the pipeline completed it (the candidate's changes applied, the
  // held-out workloads drawn, the baseline resolved): what the worker was sent, or would have been.
  Request request;
  // The archive's record of this evaluation, as the pipeline builds it for every command:
  // sources, plan, compile summary and log, PTX, cubin, verdict, cache key (a verdict-cache hit:
  // the stored candidate's artifacts). Null for a malformed solution. Under archive.enabled the
  // pipeline archives it; otherwise the caller does, with what it adds (the controller: prompt,
  // answer, usage, parent and step).
  std::shared_ptr<const archive::CandidateRecord> record;
  // A malformed solution (bad input, exit 2 for a lone `check`): the verdict is REJECTED
  // "bad_input" with the error's message, and `error` holds the error for a caller that stops.
  bool bad_input = false;
  std::exception_ptr error;
  // This evaluation in this process: solution files parsed, and NVRTC compiles of the candidate
  // (a compile cache hit is none).
  int loads = 0;
  int compiles = 0;
};

// What a verdict's speedups are over, as its score names it (score.speedups_over): "" for the
// operator's own baseline (or none), else the chosen baseline's file name or "cublaslt".
std::string speedups_over(const Baseline& baseline);

// The speedup over the operator's baseline that a verdict measured: set when it was timed against
// the operator's own baseline; none otherwise (a run estimates its candidates', controller/).
std::optional<archive::OperatorSpeedup> measured_operator_speedup(const Baseline& baseline,
                                                                  const Verdict& verdict);

// The verdict of a solution that could not be evaluated because it is malformed (an Error of exit
// code 2): REJECTED, failure "bad_input" with the error's message. The pipeline and the
// controller's evaluator both give a malformed candidate this verdict.
Verdict bad_input_verdict(const std::string& path, const std::string& definition,
                          const Error& error);

// evaluate() may be called from several threads at once (the pool's workers): the archive
// connection and the environment probe are behind one mutex, evaluations run unlocked. An
// archive that cannot be opened (read-only folder) costs the cache and the record, not the
// evaluation: a warning.
class Evaluator {
 public:
  // `shared`: what every evaluation of the invocation shares (its per-evaluation part is ignored).
  explicit Evaluator(Request shared);
  Evaluator(const Evaluator&) = delete;  // finishes its run once
  Evaluator& operator=(const Evaluator&) = delete;
  ~Evaluator();

  const std::string& run_id() const { return run_id_; }
  // Marks the archive's run finished (else the destructor marks it failed).
  void finish();

  // `gpu`: the worker's GPU (nullopt: the first visible one); `extra`: kept in the candidate's
  // record.json (score keeps the submission's place in the sorted list there). Throws only what
  // no verdict can stand for: no GPU (exit 3), a kharness failure such as a reference that does
  // not compile (exit 4).
  Evaluation evaluate(const std::string& path, const std::optional<GpuInfo>& gpu = std::nullopt,
                      const nlohmann::json& extra = nlohmann::json::object());
  // The candidate under the shared request (with_candidate), its held-out workloads and its
  // baseline (resolve_baseline: the one place it is chosen).
  Evaluation evaluate(Candidate candidate);
  // A submission refused before it is read (score's walk found a symlink): its REJECTED verdict,
  // archived like any malformed submission's.
  Evaluation reject(const std::string& path, const Error& error,
                    const nlohmann::json& extra = nlohmann::json::object());

 private:
  Evaluation bad_input(Evaluation result, const std::string& path, const std::string& op_name,
                       const Error& e, const nlohmann::json& extra);
  std::optional<archive::StoredCandidate> cached(const std::string& key, const std::string& path);
  const HoldoutDraw* holdout_for(const std::string& op_name) const;
  void record_holdout(const Request& request, const std::string& op_name, Verdict& v) const;
  Request make_request(Candidate candidate, const std::string& op_name) const;
  nlohmann::json cache_options(const Request& request) const;
  std::string cache_key(const Request& request, const verify::Loaded& loaded);
  EnvironmentReport environment();
  std::string archive(const archive::CandidateRecord& record);
  void archive_failure(const std::string& path, const Verdict& v, const nlohmann::json& extra);

  Request shared_;
  std::optional<archive::Archive> archive_;
  std::string run_id_;
  std::optional<EnvironmentReport> env_;
  bool finished_ = false;
  std::filesystem::path private_compile_cache_;  // under --no-cache; removed by the destructor
  HoldoutSeed holdout_seed_;
  mutable std::mutex draws_mutex_;                    // draws_, from the pool's workers
  mutable std::map<std::string, HoldoutDraw> draws_;  // by operator name
  std::mutex mutex_;                                  // archive_ and env_
};

}  // namespace kharness::pipeline
