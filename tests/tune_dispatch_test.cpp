// The tune provider's dispatching candidates inside the optimisation loop, on the CPU: the real
// controller::Search and tune::TuneProvider on rmsnorm_h4096, with a fake pipeline whose
// latencies depend on the launch each workload runs (for a plan with variants, the variant its
// shape chooses). Each shape bucket has a different best block size, so the composition of the
// buckets' bests beats every single configuration: it is proposed, promoted, and the run
// summary says which configuration serves which shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "controller/evaluator.hpp"
#include "controller/recorder.hpp"
#include "controller/search.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"
#include "tune/tune_provider.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// Fastest at 1024 threads a row up to batch 8, at 256 up to batch 256, at 64 above.
double latency_of(std::int64_t batch_size, std::int64_t threads) {
  const std::int64_t best = batch_size <= 8 ? 1024 : batch_size <= 256 ? 256 : 64;
  return (1.0 + 0.001 * static_cast<double>(batch_size)) *
         (1.0 + 0.2 * std::abs(std::log2(static_cast<double>(threads) / best)));
}

class FixedClock : public controller::Clock {
 public:
  double seconds() const override { return 1000.0; }
};

// Times each workload by the block size of the launch its shape runs; against the incumbent's
// when one is given (speedup = incumbent latency / candidate latency), else against 2.0.
class ShapeEvaluator : public controller::Evaluator {
 public:
  explicit ShapeEvaluator(const Operator& op) : op_(op) {}

  controller::Evaluated evaluate(const controller::EvaluationRequest& q) override {
    const Solution candidate = load_solution(q.solution);
    std::optional<Solution> incumbent;
    if (!q.baseline.empty()) incumbent = load_solution(q.baseline);
    Verdict v;
    v.definition = op_.definition.name;
    v.source = q.solution.string();
    if (candidate.plan.has_variants()) {
      std::lock_guard<std::mutex> lock(mutex_);
      dispatching_.push_back(q.solution.stem().string());
    }
    double sum = 0;
    for (const auto& w : op_.workloads) {
      if (!q.workloads.empty() &&
          std::find(q.workloads.begin(), q.workloads.end(), w.uuid) == q.workloads.end())
        continue;
      const Bindings axes = w.bindings(op_.definition);
      WorkloadVerdict wv;
      wv.uuid = w.uuid;
      wv.axes = {{"batch_size", w.axes.at("batch_size")}};
      wv.variant = candidate.plan.variant_label(candidate.plan.variant_for(axes));
      const double mine = latency(candidate, axes);
      const double base = incumbent ? latency(*incumbent, axes) : 2.0;
      wv.timing =
          timing_from_json({{"speedup", base / mine},
                            {"candidate", {{"median", mine}, {"latency", mine}, {"noise", 0.001}}},
                            {"baseline", {{"median", base}, {"latency", base}, {"noise", 0.001}}}});
      sum += base / mine;
      v.workloads.push_back(std::move(wv));
    }
    if (!incumbent)
      v.score = score_from_json({{"mean_speedup", sum / static_cast<double>(v.workloads.size())}});
    return v;
  }
  std::string diagnose(const controller::DiagnosisRequest&) override { return ""; }

  std::vector<std::string> dispatching() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dispatching_;
  }

 private:
  static double latency(const Solution& s, const Bindings& axes) {
    const Launch& launch = s.plan.launches_for(axes).at(0);
    return latency_of(axes.at("batch_size"), launch.block[0].eval(axes));
  }

  const Operator& op_;
  mutable std::mutex mutex_;
  std::vector<std::string> dispatching_;  // candidates whose plan has variants
};

TEST(TuneDispatch, TheRunPromotesTheCompositionOfEachBucketsBest) {
  testing::TempDir dir;
  Operator op = OperatorRegistry::from_environment({}).load("rmsnorm_h4096");
  ShapeEvaluator evaluator(op);
  FixedClock clock;
  controller::SearchOptions options;
  options.evaluation.target.operator_name = "rmsnorm_h4096";
  options.evaluation.target.arch = "sm_90a";
  options.provider = "tune";
  options.budget = 24;
  options.patience = 0;
  options.profile = false;
  options.seed = 3;
  options.skills_dir = testing::source_dir() / "skills";
  options.work_dir = dir.path() / "run";
  tune::TuneProvider provider;
  controller::FileRecorder recorder(options.work_dir);
  recorder.begin(json::object());
  controller::Search search(options, evaluator, provider, recorder, nullptr, clock);
  controller::SearchResult result = search.run();

  ASSERT_FALSE(evaluator.dispatching().empty()) << result.summary_text;
  // The best is a composition: its plan dispatches by the buckets' conditions.
  Solution best = parse_single_file_solution(result.best_source, "best.cu");
  ASSERT_TRUE(best.plan.has_variants()) << result.summary_text;
  ASSERT_EQ(best.plan.variants.size(), 3u);
  EXPECT_EQ(best.plan.variants[0].when->text(), "batch_size <= 8");
  EXPECT_EQ(best.plan.variants[1].when->text(), "batch_size <= 256");
  EXPECT_FALSE(best.plan.variants[2].when.has_value());
  EXPECT_EQ(best.plan.variants[0].launches[0].block[0].text(), "1024");
  EXPECT_EQ(best.plan.variants[1].launches[0].block[0].text(), "256");
  EXPECT_EQ(best.plan.variants[2].launches[0].block[0].text(), "64");
  EXPECT_GT(result.best_score, result.seed_score * 1.1);
  // The summary says which configuration serves which shapes.
  const std::string& text = result.summary_text;
  EXPECT_NE(text.find("Best configuration: dispatched by shape"), std::string::npos) << text;
  EXPECT_NE(text.find("batch_size <= 8: {\"THREADS\":1024"), std::string::npos) << text;
  EXPECT_NE(text.find("batch_size=1 batch_size=2 batch_size=4 batch_size=7 batch_size=8"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("otherwise: {\"THREADS\":64"), std::string::npos) << text;
  ASSERT_TRUE(result.summary["best_configuration"].contains("dispatch"));
  EXPECT_EQ(result.summary["best_configuration"]["dispatch"].size(), 3u);
  // The verdict of the best names the variant each workload ran.
  for (const auto& r : result.candidates) {
    if (r.id != result.best_id) continue;
    Verdict v = verdict_from_json(r.verdict);
    ASSERT_EQ(v.workloads.size(), op.workloads.size());
    for (const auto& w : v.workloads) {
      const std::int64_t b = w.axes["batch_size"];
      const char* expected = b <= 8     ? "0 (batch_size <= 8)"
                             : b <= 256 ? "1 (batch_size <= 256)"
                                        : "2 (otherwise)";
      EXPECT_EQ(w.variant, expected) << b;
    }
  }
}

}  // namespace
}  // namespace kharness
