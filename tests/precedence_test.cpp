// The correctness and timing stages' decisions, apart from the device work that feeds them:
// which failure a workload and a verdict report, when a workload or a verdict stops, how a
// sampling workload's input sets are spread over its trials, and how long a timing batch is.
#include "verify/precedence.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "bench/benchmark.hpp"

namespace kharness::verify {
namespace {

TrialResult trial(std::uint64_t seed, Status status = Status::kPassed, const char* kind = "") {
  TrialResult t;
  t.seed = seed;
  t.status = status;
  if (status != Status::kPassed) t.failure = Failure{kind, kind, nlohmann::json::object()};
  return t;
}

WorkloadVerdict workload(const std::string& uuid, Status status = Status::kPassed,
                         const char* kind = "") {
  WorkloadVerdict w;
  w.uuid = uuid;
  w.status = status;
  if (status != Status::kPassed) w.failure = Failure{kind, kind, nlohmann::json::object()};
  return w;
}

TEST(Precedence, FirstFailingTrialDecidesTheWorkloadAndEndsIt) {
  WorkloadVerdict w;
  EXPECT_FALSE(add_trial(w, trial(11)));
  EXPECT_EQ(w.status, Status::kPassed);
  EXPECT_TRUE(add_trial(w, trial(12, Status::kIncorrectNumerical, "tolerance")));
  EXPECT_EQ(w.status, Status::kIncorrectNumerical);
  ASSERT_TRUE(w.failure);
  EXPECT_EQ(w.failure->kind, "tolerance");
  EXPECT_EQ(w.failure->evidence["seed"], 12u);  // the trial to replay
  EXPECT_EQ(w.trials.size(), 2u);
  // Were another trial added (a caller that went on), the first failure still stands.
  EXPECT_TRUE(add_trial(w, trial(13, Status::kRuntimeError, "launch_failed")));
  EXPECT_EQ(w.failure->kind, "tolerance");
  EXPECT_EQ(w.status, Status::kIncorrectNumerical);
}

TEST(Precedence, FirstFailingWorkloadDecidesTheVerdictAndTheOthersStillRun) {
  Verdict v;
  EXPECT_FALSE(add_workload(v, workload("a"), false));
  EXPECT_FALSE(add_workload(v, workload("b", Status::kRuntimeError, "illegal_address"), false));
  EXPECT_FALSE(add_workload(v, workload("c", Status::kIncorrectNumerical, "tolerance"), false));
  EXPECT_EQ(v.status, Status::kRuntimeError);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(v.failure->kind, "illegal_address");
  EXPECT_EQ(v.failure->evidence["workload"], "b");
  ASSERT_EQ(v.workloads.size(), 3u);
  EXPECT_EQ(v.workloads[2].failure->kind, "tolerance");  // kept in its own workload
}

TEST(Precedence, ALostContextStopsTheVerdict) {
  Verdict v;
  EXPECT_TRUE(add_workload(v, workload("a", Status::kRuntimeError, "illegal_address"), true));
  EXPECT_EQ(v.workloads.size(), 1u);
  EXPECT_EQ(v.status, Status::kRuntimeError);
}

TEST(Precedence, SamplingJudgementOnlyForAWorkloadWhoseTrialsPassed) {
  WorkloadVerdict passed;
  add_trial(passed, trial(1));
  add_trial(passed, trial(2));
  add_sampling_failure(passed, Failure{"distribution", "argmax", nlohmann::json::object()});
  EXPECT_EQ(passed.status, Status::kIncorrectNumerical);
  EXPECT_EQ(passed.failure->evidence["trials"], 2u);

  WorkloadVerdict failed;
  add_trial(failed, trial(1, Status::kRuntimeError, "launch_failed"));
  add_sampling_failure(failed, Failure{"distribution", "argmax", nlohmann::json::object()});
  EXPECT_EQ(failed.failure->kind, "launch_failed");
  EXPECT_EQ(failed.status, Status::kRuntimeError);
}

TEST(Precedence, SamplingBudgetSpreadsEverySetOverTheTrials) {
  for (std::uint64_t total : {1ull, 2ull, 3ull, 7ull, 64ull, 1000ull}) {
    for (int trials : {1, 2, 3, 5}) {
      SamplingBudget budget(total, trials);
      std::vector<std::uint64_t> sets;
      for (int t = 0; t < trials; ++t) sets.push_back(budget.next_trial());
      SCOPED_TRACE(testing::Message() << total << " sets, " << trials << " trials");
      for (std::uint64_t s : sets) EXPECT_GE(s, 1u);  // every trial has its own set
      const std::uint64_t sum = std::accumulate(sets.begin(), sets.end(), std::uint64_t{0});
      EXPECT_EQ(sum, std::max<std::uint64_t>(total, static_cast<std::uint64_t>(trials)));
      // Earlier trials take the remainder: a workload decided early has drawn most.
      for (std::size_t i = 1; i < sets.size(); ++i) EXPECT_GE(sets[i - 1], sets[i]);
    }
  }
  SamplingBudget none(0, 3);  // not a sampling workload: one set a trial
  EXPECT_EQ(none.next_trial(), 1u);
}

}  // namespace
}  // namespace kharness::verify

namespace kharness::bench {
namespace {

TEST(Batching, LengthIsRandomWithinTheBoundsTheRoundDurationAllows) {
  std::set<std::size_t> first;
  for (std::uint64_t r = 0; r < 200; ++r) {
    const std::size_t n = batch_length(0, r * 2654435761u);
    EXPECT_GE(n, kMinBatch);
    EXPECT_LE(n, kFirstMaxBatch);
    first.insert(n);
  }
  EXPECT_GT(first.size(), 4u);  // random: a kernel cannot predict the harvest
  // Fast rounds: long batches up to kMaxBatch; a vanishing round time never overflows.
  for (double round : {1e-6, 1e-12, 1e-300}) {
    EXPECT_EQ(batch_length(round, kMaxBatch - kMinBatch), kMaxBatch);
    EXPECT_LE(batch_length(round, 12345), kMaxBatch);
  }
  // Slow rounds (longer than the batch budget): the shortest batches.
  for (std::uint64_t r = 0; r < 50; ++r) EXPECT_EQ(batch_length(1.0, r), kMinBatch);
  // About kBatchSeconds of rounds: 3 ms rounds give at most 10.
  for (std::uint64_t r = 0; r < 50; ++r) EXPECT_LE(batch_length(0.003, r), 10u);
}

}  // namespace
}  // namespace kharness::bench
