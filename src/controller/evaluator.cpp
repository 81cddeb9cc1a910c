#include "controller/evaluator.hpp"

#include <chrono>

#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "kharness/operators.hpp"
#include "kharness/profile.hpp"
#include "pipeline/evaluation.hpp"

namespace kharness::controller {

StageEvaluator::StageEvaluator(StageSettings settings, pipeline::Evaluator& pipeline)
    : settings_(std::move(settings)), pipeline_(pipeline) {
  if (settings_.model.enabled()) {
    model_ = model::load_model(settings_.model.file, OperatorRegistry::from_environment(
                                                         settings_.request.target.operators_dirs));
  }
}

ModelVerdict Evaluator::model_check(const ModelCheckRequest& /*request*/) {
  throw Error(ExitCode::kInternal, "run", "this evaluator has no model to check against");
}

ModelVerdict StageEvaluator::model_check(const ModelCheckRequest& request) {
  if (!model_) return Evaluator::model_check(request);
  const ModelGate& gate = settings_.model;
  const Target& target = settings_.request.target;
  model::CheckOptions o;
  o.phase = gate.phase;
  o.layers = gate.layers;
  if (!request.solution.empty())
    o.use[target.operator_name] = std::filesystem::absolute(request.solution);
  o.compile = make_compile_options(target.arch, target.use_cache);
  o.time = true;
  o.timed_passes = gate.timed_passes;
  o.timeout_seconds = gate.timeout;
  o.launch_timeout_seconds = settings_.request.timeouts.launch_seconds;
  o.gpu = request.gpu;
  o.operators_dirs = target.operators_dirs;
  return model_verdict(model::check_model(*model_, o), target.operator_name);
}

Evaluated StageEvaluator::evaluate(const EvaluationRequest& request) {
  // The incumbent (request.baseline) is the bench stage's baseline: timed interleaved with the
  // candidate.
  pipeline::Evaluation e = pipeline_.evaluate(request);
  Evaluated out;
  out.verdict = std::move(e.verdict);
  out.cache_key = std::move(e.cache_key);
  out.cached_from = std::move(e.cached_from);
  out.record = std::move(e.record);
  return out;
}

std::string StageEvaluator::diagnose(const DiagnosisRequest& request) {
  ProfileRequest req;
  req.solution = request.solution;
  req.target = settings_.request.target;
  req.workload = request.workload;
  req.seed = request.seed;
  req.launch_timeout_seconds = settings_.request.timeouts.launch_seconds;
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
