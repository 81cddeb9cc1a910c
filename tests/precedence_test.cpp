// The correctness and timing stages' decisions, apart from the device work that feeds them:
// which failure a workload and a verdict report, when a workload or a verdict stops, how a
// sampling workload's input sets are spread over its trials, which failure a trial reports when
// several rules break at once (memory rules, sealed copies, records, outputs, the determinism
// rerun), how a timed iteration's check reads, and how long a timing batch is.
#include "verify/precedence.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "bench/benchmark.hpp"
#include "kharness/error.hpp"
#include "verify/evaluate.hpp"  // status_of_kind

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

TEST(Precedence, SamplingBudgetEdgeCases) {
  // Fewer sets than trials: every trial still has its own set.
  SamplingBudget few(2, 4);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(few.next_trial(), 1u);
  // An even split leaves no remainder; an uneven one goes to the earliest trials.
  SamplingBudget even(9, 3);
  EXPECT_EQ(even.next_trial(), 3u);
  EXPECT_EQ(even.next_trial(), 3u);
  EXPECT_EQ(even.next_trial(), 3u);
  SamplingBudget uneven(10, 4);
  EXPECT_EQ(uneven.next_trial(), 3u);
  EXPECT_EQ(uneven.next_trial(), 3u);
  EXPECT_EQ(uneven.next_trial(), 2u);
  EXPECT_EQ(uneven.next_trial(), 2u);
  // Asked past its trials, it hands out what is left, then one set a call.
  SamplingBudget over(5, 1);
  EXPECT_EQ(over.next_trial(), 5u);
  EXPECT_EQ(over.next_trial(), 1u);
  // A zero budget over zero trials still gives one set.
  SamplingBudget none(0, 0);
  EXPECT_EQ(none.next_trial(), 1u);
}

TEST(Precedence, TrialsAllRunWhenTheyPassEachWithOneSet) {
  WorkloadVerdict w;
  std::vector<std::uint64_t> sets;
  run_trials(w, 3, 0, [&](int t, std::uint64_t n) {
    sets.push_back(n);
    return trial(100 + static_cast<std::uint64_t>(t));
  });
  EXPECT_EQ(sets, (std::vector<std::uint64_t>{1, 1, 1}));
  EXPECT_EQ(w.status, Status::kPassed);
  EXPECT_FALSE(w.failure);
  ASSERT_EQ(w.trials.size(), 3u);
  EXPECT_EQ(w.trials[2].seed, 102u);
}

TEST(Precedence, TheFirstFailingTrialStopsTheTrials) {
  WorkloadVerdict w;
  int ran = 0;
  run_trials(w, 5, 0, [&](int t, std::uint64_t) {
    ++ran;
    return t == 1 ? trial(7, Status::kIncorrectNumerical, "nondeterministic") : trial(6);
  });
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(w.trials.size(), 2u);
  EXPECT_EQ(w.status, Status::kIncorrectNumerical);
  EXPECT_EQ(w.failure->kind, "nondeterministic");
  EXPECT_EQ(w.failure->evidence["seed"], 7u);
}

TEST(Precedence, SamplingTrialsDrawTheBudgetUntilOneFails) {
  WorkloadVerdict all;
  std::vector<std::uint64_t> sets;
  run_trials(all, 3, 7, [&](int, std::uint64_t n) {
    sets.push_back(n);
    return trial(1);
  });
  EXPECT_EQ(sets, (std::vector<std::uint64_t>{3, 2, 2}));
  // A failure in the first trial leaves the rest of the budget undrawn.
  WorkloadVerdict first;
  sets.clear();
  run_trials(first, 3, 7, [&](int, std::uint64_t n) {
    sets.push_back(n);
    return trial(1, Status::kIncorrectNumerical, "outside_support");
  });
  EXPECT_EQ(sets, (std::vector<std::uint64_t>{3}));
  // No trials: nothing runs.
  WorkloadVerdict zero;
  run_trials(zero, 0, 7, [&](int, std::uint64_t) -> TrialResult {
    ADD_FAILURE() << "no trial should run";
    return trial(0);
  });
  EXPECT_TRUE(zero.trials.empty());
  EXPECT_EQ(zero.status, Status::kPassed);
}

TEST(Precedence, ALaunchErrorGivesItsKind) {
  device::LaunchOutcome o;
  o.ok = false;
  o.launch_index = 1;
  o.kernel = "k";
  o.message = "boom";
  auto kind_of = [&](const char* error) {
    o.error_name = error;
    return launch_failure(o, "candidate").kind;
  };
  EXPECT_EQ(kind_of("CUDA_ERROR_ILLEGAL_ADDRESS"), "illegal_address");
  EXPECT_EQ(kind_of("CUDA_ERROR_LAUNCH_TIMEOUT"), "launch_timeout");
  EXPECT_EQ(kind_of("PLAN_ERROR"), "launch_failed");
  EXPECT_EQ(kind_of("CUDA_ERROR_INVALID_VALUE"), "launch_failed");
  EXPECT_EQ(kind_of("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), "launch_failed");
  EXPECT_EQ(kind_of("COOPERATIVE_NOT_RESIDENT"), "cooperative_not_resident");
  EXPECT_EQ(status_of_kind("cooperative_not_resident"), Status::kRejected);
  EXPECT_EQ(status_of_kind("illegal_address"), Status::kRuntimeError);
  o.error_name = "CUDA_ERROR_ILLEGAL_ADDRESS";
  const Failure f = launch_failure(o, "candidate (rerun)");
  EXPECT_EQ(f.message, "candidate (rerun): boom");
  EXPECT_EQ(f.evidence["launch"], 1);
  EXPECT_EQ(f.evidence["kernel"], "k");
  EXPECT_EQ(f.evidence["cuda_error"], "CUDA_ERROR_ILLEGAL_ADDRESS");
}

PatternCheck damaged(std::size_t first) {
  PatternCheck c;
  c.mismatches = 1;
  c.first_mismatch_byte = first;
  return c;
}

TEST(Precedence, GuardDamageIsAnOffsetFromTheData) {
  const std::size_t guard = 65536;
  EXPECT_FALSE(guard_damage({}, {}, 100, guard));
  EXPECT_EQ(guard_damage(damaged(0), {}, 100, guard), -65536);      // the zone's first byte
  EXPECT_EQ(guard_damage(damaged(guard - 1), {}, 100, guard), -1);  // just before the data
  EXPECT_EQ(guard_damage({}, damaged(0), 100, guard), 100);         // just past its end
  EXPECT_EQ(guard_damage({}, damaged(5), 0, guard), 5);             // an empty buffer
  // Both zones changed: the zone before is reported.
  EXPECT_EQ(guard_damage(damaged(guard - 8), damaged(3), 100, guard), -8);
}

TEST(Precedence, AGuardBeatsAnInputAndTheFirstBufferWins) {
  EXPECT_FALSE(memory_failure({{"x", 16, std::nullopt}}, {{"x", 5, 5}}));
  const std::vector<GuardState> guards = {
      {"x", 16, std::nullopt}, {"out", 64, std::int64_t{-3}}, {"workspace", 8, std::int64_t{9}}};
  const std::vector<InputState> inputs = {{"x", 1, 2}};
  auto f = memory_failure(guards, inputs);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "out_of_bounds_write");
  EXPECT_EQ(f->evidence["tensor"], "out");
  EXPECT_EQ(f->evidence["guard_offset"], -3);
  EXPECT_EQ(f->message,
            "a write landed outside out (64 bytes), at byte offset -3 before its start");
  f = memory_failure({{"workspace", 8, std::int64_t{9}}}, {});
  EXPECT_EQ(f->message,
            "a write landed outside workspace (8 bytes), at byte offset 9 from its start");
  // Guards intact: the first changed input, in the order given.
  f = memory_failure({{"x", 16, std::nullopt}}, {{"a", 1, 1}, {"b", 2, 3}, {"c", 4, 5}});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "input_modified");
  EXPECT_EQ(f->evidence["tensor"], "b");
  EXPECT_EQ(status_of_kind(f->kind), Status::kIncorrectNumerical);
}

TEST(Precedence, ASealedCopyThatChangedIsHarnessMemoryModified) {
  const std::vector<std::string> tensors = {"out", "lse"};
  EXPECT_FALSE(sealed_copy_failure({1, 2}, {1, 2}, tensors, "the reference"));
  EXPECT_FALSE(sealed_copy_failure({}, {}, {}, "the reference"));
  auto f = sealed_copy_failure({1, 2}, {9, 8}, tensors, "the first run");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "harness_memory_modified");
  EXPECT_EQ(f->evidence["tensor"], "out");  // the first copy that changed
  EXPECT_EQ(f->evidence["copy"], "the first run");
  EXPECT_EQ(status_of_kind(f->kind), Status::kRuntimeError);
  f = sealed_copy_failure({1, 2}, {1, 8}, tensors, "the reference");
  EXPECT_EQ(f->evidence["tensor"], "lse");
}

TEST(Precedence, ARecordCountsOnlyWhenItIsTheOneAskedFor) {
  CompareRecord r;
  r.stream = 4;
  r.nonce = 9;
  r.totals.elements = 128;
  EXPECT_TRUE(record_is_for(r, 4, 9, 128));
  EXPECT_FALSE(record_is_for(std::nullopt, 4, 9, 128));  // did not authenticate
  EXPECT_FALSE(record_is_for(r, 5, 9, 128));             // another copy's record
  EXPECT_FALSE(record_is_for(r, 4, 8, 128));             // an earlier comparison's, replayed
  EXPECT_FALSE(record_is_for(r, 4, 9, 127));             // not this output's size
  EXPECT_EQ(forged_record("out").kind, "harness_memory_modified");
  EXPECT_EQ(forged_record("out").evidence["tensor"], "out");

  CheckRecord c;
  c.iteration = 12;
  c.tensor = 1;
  c.stream = timed_stream_id(2, 1);
  EXPECT_TRUE(check_record_is_for(c, 12, 1, timed_stream_id(2, 1)));
  EXPECT_FALSE(check_record_is_for(std::nullopt, 12, 1, timed_stream_id(2, 1)));
  EXPECT_FALSE(check_record_is_for(c, 11, 1, timed_stream_id(2, 1)));
  EXPECT_FALSE(check_record_is_for(c, 12, 0, timed_stream_id(2, 1)));
  EXPECT_FALSE(check_record_is_for(c, 12, 1, timed_stream_id(1, 1)));
  // Every set and output has its own keystream.
  std::set<std::uint64_t> ids;
  for (int set = 0; set < 4; ++set) {
    for (std::size_t t = 0; t < 3; ++t) ids.insert(timed_stream_id(set, t));
  }
  EXPECT_EQ(ids.size(), 12u);
}

OutputCheck check_of(const char* tensor, std::uint64_t elements, std::uint64_t mismatches) {
  OutputCheck c;
  c.comparison.tensor = tensor;
  c.comparison.elements = elements;
  c.comparison.mismatches = mismatches;
  c.comparison.matched_ratio =
      1.0 - static_cast<double>(mismatches) / static_cast<double>(elements);
  return c;
}

TEST(Precedence, AnOutputsComparisonIsKeptAndJudged) {
  Tolerance tol;
  TrialResult t;
  EXPECT_FALSE(judge_output("a", check_of("a", 10, 0), tol, t));
  OutputCheck bad = check_of("b", 4, 1);
  bad.nonfinite = 2;
  bad.poison_left = 3;
  auto f = judge_output("b", bad, tol, t);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "output_not_written");  // before nan_or_inf and tolerance
  ASSERT_EQ(t.comparisons.size(), 2u);       // a failing output's statistics are kept too
  EXPECT_EQ(t.comparisons[1].tensor, "b");
  bad.poison_left = 0;
  EXPECT_EQ(judge_output("b", bad, tol, t)->kind, "nan_or_inf");
  bad.nonfinite = 0;
  EXPECT_EQ(judge_output("b", bad, tol, t)->kind, "tolerance");
  // The matched ratio at the threshold passes.
  tol.required_matched_ratio = 0.75;
  EXPECT_FALSE(judge_output("b", bad, tol, t));
  // A reference that left elements unwritten is the harness's error, not the candidate's.
  OutputCheck broken = check_of("c", 10, 0);
  broken.reference_unwritten = 1;
  try {
    judge_output("c", broken, tol, t);
    ADD_FAILURE() << "expected an internal error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
  }
}

// judge_rerun with judges that record their calls and fail where asked.
struct FakeJudges {
  bool reference_fails = false;
  std::set<std::size_t> first_fails;
  std::vector<std::string> calls;
  RerunJudges judges() {
    RerunJudges j;
    j.against_reference = [this]() -> std::optional<Failure> {
      calls.emplace_back("reference");
      if (!reference_fails) return std::nullopt;
      return Failure{"tolerance", "off", {{"tensor", "out"}}};
    };
    j.against_first = [this](std::size_t i) -> std::optional<Failure> {
      calls.push_back("first " + std::to_string(i));
      if (!first_fails.count(i)) return std::nullopt;
      return Failure{"tolerance", "drift", {{"tensor", i}}};
    };
    return j;
  }
};

TEST(Precedence, ABitwiseEqualRerunPassesWithoutComparisons) {
  FakeJudges fake;
  TrialResult t;
  EXPECT_FALSE(judge_rerun({0, 0}, {"out", "lse"}, fake.judges(), t));
  EXPECT_TRUE(t.bitwise_deterministic);
  EXPECT_TRUE(fake.calls.empty());
}

TEST(Precedence, ADifferingRerunIsHeldToTheReferenceOnceThenToTheFirstRun) {
  FakeJudges fake;
  TrialResult t;
  EXPECT_FALSE(judge_rerun({0, 5, 2}, {"a", "b", "c"}, fake.judges(), t));
  EXPECT_FALSE(t.bitwise_deterministic);  // within tolerance, but not bit for bit
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"reference", "first 1", "first 2"}));
}

TEST(Precedence, TheReferenceBeatsTheFirstRunOnARerun) {
  FakeJudges fake;
  fake.reference_fails = true;
  fake.first_fails = {0};
  TrialResult t;
  auto f = judge_rerun({1}, {"out"}, fake.judges(), t);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "tolerance");
  EXPECT_EQ(f->evidence["rerun"], true);
  EXPECT_EQ(f->message, "on a rerun with the same inputs: off");
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"reference"}));
}

TEST(Precedence, TheFirstDifferingOutputBeyondToleranceIsNondeterministic) {
  FakeJudges fake;
  fake.first_fails = {1, 2};
  TrialResult t;
  auto f = judge_rerun({3, 1, 1}, {"a", "b", "c"}, fake.judges(), t);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "nondeterministic");
  EXPECT_EQ(f->message, "b: a rerun on the same inputs differs beyond tolerance (drift)");
  EXPECT_EQ(f->evidence["tensor"], 1);  // the comparison's own evidence
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"reference", "first 0", "first 1"}));
  EXPECT_EQ(status_of_kind(f->kind), Status::kIncorrectNumerical);
}

TEST(Precedence, ATimedIterationsInputsAreHeldToWhatTheyLastHeld) {
  std::map<std::string, std::uint64_t> known = {{"a", 1}, {"b", 2}};
  // No refresh: held to the known values.
  EXPECT_FALSE(changed_input(known, {}, {{"a", 1}, {"b", 2}}));
  EXPECT_EQ(changed_input(known, {}, {{"a", 1}, {"b", 3}}), "b");
  // A refresh sets what the launch must leave, and is remembered for the next iterations.
  EXPECT_FALSE(changed_input(known, {{"a", 10}, {"b", 20}}, {{"a", 10}, {"b", 20}}));
  EXPECT_EQ(known.at("a"), 10u);
  EXPECT_EQ(changed_input(known, {}, {{"a", 1}, {"b", 20}}), "a");
  // Several changed: the first by name.
  EXPECT_EQ(changed_input(known, {}, {{"a", 0}, {"b", 0}}), "a");
}

CheckRecord record(std::uint64_t elements, std::uint64_t unwritten, std::uint64_t nonfinite,
                   std::uint64_t mismatches) {
  CheckRecord r;
  r.elements = elements;
  r.unwritten = unwritten;
  r.nonfinite = nonfinite;
  r.mismatches = mismatches;
  r.first_index = 3;
  const float expected = 1.5f, got = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&r.expected_bits, &expected, 4);
  std::memcpy(&r.got_bits, &got, 4);
  return r;
}

TEST(Precedence, ATimedRecordsFailureFollowsTheComparatorsOrder) {
  TensorSpec t;
  t.name = "out";
  t.dtype = DType::kFloat32;
  Tolerance tol;
  EXPECT_FALSE(record_failure(record(100, 0, 0, 0), t, tol));
  EXPECT_FALSE(record_failure(record(0, 0, 0, 0), t, tol));  // no elements: matched 1
  auto f = record_failure(record(100, 1, 1, 1), t, tol);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "output_not_written");
  EXPECT_EQ(record_failure(record(100, 0, 1, 1), t, tol)->kind, "nan_or_inf");
  f = record_failure(record(100, 0, 0, 1), t, tol);
  EXPECT_EQ(f->kind, "tolerance");
  EXPECT_EQ(f->evidence["expected"], 1.5);
  EXPECT_EQ(f->evidence["got"], "nan");
  EXPECT_EQ(f->evidence["first_bad_index"], 3u);
  // A matched ratio equal to the threshold passes; just under it fails.
  tol.required_matched_ratio = 0.75;
  EXPECT_FALSE(record_failure(record(4, 0, 0, 1), t, tol));
  EXPECT_EQ(record_failure(record(4, 0, 0, 2), t, tol)->kind, "tolerance");

  const Failure s = stale(*f, 41, 2);
  EXPECT_EQ(s.kind, "stale_output");
  EXPECT_EQ(s.evidence["iteration"], 41u);
  EXPECT_EQ(s.evidence["input_set"], 2);
  EXPECT_EQ(s.evidence["cause"], "tolerance");
  EXPECT_EQ(s.message.rfind("timed iteration 41 (input set 2): out: ", 0), 0u);
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
