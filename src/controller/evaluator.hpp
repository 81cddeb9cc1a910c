// What the optimisation loop (controller/search.hpp) needs from outside itself, each behind a
// small interface so that its decisions — promotion, the cascade, elites, dropout, budgets,
// resume — are tested on the CPU with fakes (tests/search_test.cpp), as ninja tests its build
// logic against a fake disk:
// - Evaluator: one candidate file through the pipeline to a verdict, the profile stage's
//   diagnosis of a kernel, and a model-check with a kernel substituted in the run's model
//   (`run --model`). StageEvaluator is the real one (pipeline::Evaluator, which keeps the
//   verdict cache, profile_solution and model::check_model).
// - Clock: monotonic seconds, for the wall-time budget and the cascade's accounting.
// The run's records go through RunRecorder (controller/recorder.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/model_gate.hpp"
#include "kharness/archive.hpp"
#include "kharness/bench.hpp"
#include "kharness/device.hpp"
#include "kharness/target.hpp"
#include "kharness/verdict.hpp"
#include "pipeline/request.hpp"

namespace kharness::pipeline {
class Evaluator;
}  // namespace kharness::pipeline

namespace kharness::controller {

// One candidate file to evaluate: the pipeline's Candidate. The search sets its mode (kValidate:
// check, then time; or kCompile), its workloads (uuids; empty: all of the operator's), its seed
// (inputs, trial order), the pool worker's GPU, and as its baseline the incumbent, timed
// interleaved with it so that each workload's timing.speedup is incumbent latency / candidate
// latency (empty: the operator's own baseline).
using EvaluationRequest = pipeline::Candidate;

struct DiagnosisRequest {
  std::filesystem::path solution;
  std::string workload;  // uuid; empty: the operator's first
  std::uint64_t seed = 0;
};

// A verdict and what the verdict cache says of it: the run's records keep both, so that the
// archive finds this verdict for the same kernel, incumbent and options again (a second run).
struct Evaluated {
  Evaluated() = default;
  Evaluated(Verdict v) : verdict(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  Verdict verdict;
  std::string cache_key;    // "" when not keyed
  std::string cached_from;  // the archived candidate whose verdict this is; "" when evaluated
  // The pipeline's archive record of the evaluation (sources, compile log, PTX, cubin, verdict):
  // the run's recorder archives it with the candidate's prompt and answer. Null: none (a fake
  // evaluator, a malformed candidate).
  std::shared_ptr<const archive::CandidateRecord> record;
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // A verdict for every candidate, a malformed one included (REJECTED). Throws Error only for what
  // ends the run: no GPU, a broken reference, an internal failure. Called from several threads
  // at once (one per pool worker).
  virtual Evaluated evaluate(const EvaluationRequest& request) = 0;
  // The counters' diagnosis of a kernel (kharness/profile.hpp's diagnosis_text). Throws Error
  // when it cannot profile (exit 3: counters not permitted; 1: the kernel fails there).
  virtual std::string diagnose(const DiagnosisRequest& request) = 0;
  // The run's model-check (`run --model`: StageSettings::model) with request.solution substituted
  // for every node of the operator, its layer timed against the seeds' layer. A candidate that
  // fails there is a verdict (passed false), not an exception; throws Error only for what ends
  // the run (no GPU, a reference that fails). The default: an evaluator with no model to check
  // against (exit 4).
  virtual ModelVerdict model_check(const ModelCheckRequest& request);
};

// The pipeline for verdicts (pipeline::Evaluator: one load, one compile, the verdict cache; the
// run's recorder archives), profile_solution for the diagnosis, with the run's fixed settings.
struct StageSettings {
  // What every evaluation of the run shares (the pipeline::Evaluator is made with it): for a run,
  // mode validate and archive.enabled false (stage_settings); its target and launch timeout serve
  // the profiles and model-checks too.
  pipeline::Request request;
  ModelGate model;  // in-model validation (`run --model`); disabled without a file
};

class StageEvaluator : public Evaluator {
 public:
  // `pipeline`: made with settings.request (its archive off: the recorder archives).
  // With settings.model enabled, loads the model file (throws Error, exit 2, for a bad one).
  StageEvaluator(StageSettings settings, pipeline::Evaluator& pipeline);
  Evaluated evaluate(const EvaluationRequest& request) override;
  std::string diagnose(const DiagnosisRequest& request) override;
  ModelVerdict model_check(const ModelCheckRequest& request) override;

 private:
  StageSettings settings_;
  pipeline::Evaluator& pipeline_;
  std::optional<model::Model> model_;  // with settings_.model enabled
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double seconds() const = 0;  // monotonic, from an arbitrary origin
};

// std::chrono::steady_clock; one for the process.
const Clock& steady_clock();

}  // namespace kharness::controller
