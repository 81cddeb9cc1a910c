#include "controller/evaluator.hpp"

#include <chrono>

#include "kharness/error.hpp"
#include "kharness/profile.hpp"
#include "kharness/verify.hpp"
#include "pipeline/evaluation.hpp"

namespace kharness::controller {

Verdict StageEvaluator::evaluate(const EvaluationRequest& request) {
  CheckRequest req;
  req.gpu = request.gpu;
  req.solution = request.solution;
  req.operator_name = settings_.operator_name;
  req.operators_dirs = settings_.operators_dirs;
  req.arch = settings_.arch;
  req.use_cache = settings_.use_cache;
  req.timeout_seconds = settings_.eval_timeout;
  req.launch_timeout_seconds = settings_.launch_timeout;
  req.options.seed = request.seed;
  req.options.workloads = request.workloads;
  req.mode = request.mode;
  req.bench = settings_.bench;
  // The incumbent as the bench stage's baseline: timed interleaved with the candidate.
  if (!request.incumbent.empty())
    req.bench["baseline_solution"] = std::filesystem::absolute(request.incumbent).string();
  try {
    return check_solution(req);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;  // no GPU, a broken reference: the run cannot go on
    // A malformed candidate is that candidate's failure.
    return pipeline::bad_input_verdict(request.solution.string(), settings_.operator_name, e);
  }
}

std::string StageEvaluator::diagnose(const DiagnosisRequest& request) {
  ProfileRequest req;
  req.solution = request.solution;
  req.operator_name = settings_.operator_name;
  req.operators_dirs = settings_.operators_dirs;
  req.workload = request.workload;
  req.arch = settings_.arch;
  req.use_cache = settings_.use_cache;
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
