#include "controller/evaluator.hpp"

#include <chrono>

#include "controller/archive_recorder.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "kharness/operators.hpp"
#include "kharness/profile.hpp"
#include "pipeline/evaluation.hpp"

namespace kharness::controller {

pipeline::EvaluationOptions pipeline_options(const StageSettings& settings) {
  pipeline::EvaluationOptions o;
  o.command = "run";
  o.mode = Mode::kValidate;
  o.target = settings.target;
  o.timeout_seconds = settings.eval_timeout;
  o.launch_timeout_seconds = settings.launch_timeout;
  o.bench = settings.bench;
  o.archive = false;  // the run's recorder archives every candidate, with its prompt and answer
  return o;
}

StageEvaluator::StageEvaluator(StageSettings settings, pipeline::Evaluator& pipeline)
    : settings_(std::move(settings)), pipeline_(pipeline) {
  if (settings_.model.enabled()) {
    model_ = model::load_model(settings_.model.file,
                               OperatorRegistry::from_environment(settings_.target.operators_dirs));
  }
}

ModelVerdict Evaluator::model_check(const ModelCheckRequest& /*request*/) {
  throw Error(ExitCode::kInternal, "run", "this evaluator has no model to check against");
}

ModelVerdict StageEvaluator::model_check(const ModelCheckRequest& request) {
  if (!model_) return Evaluator::model_check(request);
  const ModelGate& gate = settings_.model;
  model::CheckOptions o;
  o.phase = gate.phase;
  o.layers = gate.layers;
  if (!request.solution.empty())
    o.use[settings_.target.operator_name] = std::filesystem::absolute(request.solution);
  o.compile = make_compile_options(settings_.target.arch, settings_.target.use_cache);
  o.time = true;
  o.timed_passes = gate.timed_passes;
  o.timeout_seconds = gate.timeout;
  o.launch_timeout_seconds = settings_.launch_timeout;
  o.gpu = request.gpu;
  o.operators_dirs = settings_.target.operators_dirs;
  return model_verdict(model::check_model(*model_, o), settings_.target.operator_name);
}

Evaluated StageEvaluator::evaluate(const EvaluationRequest& request) {
  pipeline::EvaluationRequest in;
  in.path = request.solution.string();
  in.gpu = request.gpu;
  in.mode = request.mode;
  in.seed = request.seed;
  in.workloads = request.workloads;
  // The incumbent as the bench stage's baseline: timed interleaved with the candidate.
  if (!request.incumbent.empty())
    in.baseline_solution = std::filesystem::absolute(request.incumbent).string();
  pipeline::Evaluation e = pipeline_.evaluate(in);
  Evaluated out;
  out.verdict = std::move(e.verdict);
  out.cache_key = std::move(e.cache_key);
  out.cached_from = std::move(e.cached_from);
  out.record = std::move(e.record);
  // A verdict from the cache is archived as the run's recorder archives it (its score over the
  // operator's baseline, estimated through the incumbent): the verdict as evaluated again.
  if (!out.cached_from.empty()) out.verdict = as_evaluated(std::move(out.verdict));
  return out;
}

std::string StageEvaluator::diagnose(const DiagnosisRequest& request) {
  ProfileRequest req;
  req.solution = request.solution;
  req.target = settings_.target;
  req.workload = request.workload;
  req.seed = request.seed;
  req.launch_timeout_seconds = settings_.launch_timeout;
  return diagnosis_text(profile_solution(req));
}

namespace {

class SteadyClock : public Clock {
 public:
  double seconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace kharness::controller
