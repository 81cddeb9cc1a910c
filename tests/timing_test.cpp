// The typed results of the timing stage (kharness/timing.hpp) and the timing options
// (kharness/bench.hpp). Their JSON form is a contract (docs/verdicts.md#verdict-fields): a timing
// record, a score and a whole verdict as the worker writes them read back into the types and write
// again byte for byte, so that reports, archives and tools that read the JSON see the shape they
// always did.
#include "kharness/timing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/benchmark.hpp"
#include "kharness/bench.hpp"
#include "kharness/verdict.hpp"

namespace kharness {
namespace {

using nlohmann::json;

// A workload's timing as the timing stage writes it (adaptive protocol, the cuBLASLt baseline with
// too few samples for a noise figure, SOL and the physical lower bound).
const char* const kAdaptiveTiming = R"json({
  "protocol": "adaptive", "timer": "cupti", "input_sets": 3,
  "candidate": {"count": 120, "median": 2.5e-06, "mean": 2.61e-06, "min": 2.4e-06,
                "max": 4.125e-06, "p10": 2.45e-06, "p90": 2.9e-06, "stdev": 2.1e-07,
                "cv": 0.0804, "noise": 0.0041, "noise_met": true, "latency": 2.5e-06,
                "stop_reason": "noise_met", "clock_flagged_samples": 0, "kernels": "k1;k2",
                "integrity": {"checked_iterations": 130, "check": "device", "module_globals": 2,
                              "state_reset": "globals restored"}},
  "baseline": {"count": 3, "median": 3.0e-06, "mean": 3.1e-06, "min": 2.9e-06, "max": 3.4e-06,
               "p10": 2.92e-06, "p90": 3.3e-06, "stdev": 2.6e-07, "cv": 0.0839, "noise": null,
               "noise_met": false, "latency": 3.0e-06, "stop_reason": "time_limit",
               "clock_flagged_samples": 2, "clock_note": "SM clock not readable",
               "kernels": "gemm", "solution": "cuBLASLt bf16",
               "integrity": {"checked_iterations": 13, "check": "host", "module_globals": 0,
                             "state_reset": "none needed"}},
  "speedup": 1.2,
  "phases": {"warmup_seconds": 0.012, "run_seconds": 0.21, "harvest_seconds": 0.05,
             "setup_seconds": 0.031, "harvests": 12, "rounds": 216},
  "seconds": 0.25,
  "sol": {"seconds": 1.0e-06, "bound": "memory", "fraction": 0.4, "gpu": "H200",
          "ceilings": "measured 2026-11-02T10:00:00Z"},
  "lower_bound": {"seconds": 9.0e-07, "term": "memory", "flops": 0.0}
})json";

// The official protocol, a candidate whose statistics could not be formed, and no baseline.
const char* const kOfficialTiming = R"json({
  "protocol": "official", "timer": "events", "input_sets": 2,
  "input_sets_note": "only 2 of 3 input sets fit in device memory (900 MiB each)",
                  "candidate" : {
                    "count" : 0,
                    "median" : null,
                    "mean" : null,
                    "min" : null,
                    "max" : null,
                    "p10" : null,
                    "p90" : null,
                    "stdev" : null,
                    "cv" : null,
                    "noise" : null,
                    "noise_met" : false,
                    "official_latency" : null,
                    "latency" : null,
                    "clock_flagged_samples" : 0,
                    "kernels" : "",
                    "integrity" : {
                      "checked_iterations" : 0,
                      "check" : "device",
                      "module_globals" : 0,
                      "state_reset" : "module reload"
                    }
                  },
                  "baseline_unavailable" : "cuBLASLt: M % 4 != 0",
                  "phases" : {
                    "warmup_seconds" : 0.0,
                    "run_seconds" : 0.5,
                    "harvest_seconds" : 0.1,
                    "setup_seconds" : 0.2,
                    "harvests" : 3,
                    "rounds" : 180
                  },
                  "seconds" : 0.7,
                  "sol" : {
  "seconds" : 2.0e-06,
      "bound" : "compute", "fraction" : 0.0, "gpu" : "H200", "ceilings" : "datasheet"
}
})json";

std::string round_trip(const json& j) { return to_json(timing_from_json(j)).dump(); }

TEST(TimingResult, AsTheTimingStageWritesItReadsBackAndWritesTheSame) {
  for (const char* text : {kAdaptiveTiming, kOfficialTiming}) {
    const json j = json::parse(text);
    EXPECT_EQ(round_trip(j), j.dump());
  }
  // Not timed ({}), and a timing that threw (its seconds only), stay as they were.
  EXPECT_EQ(round_trip(json::object()), "{}");
  EXPECT_EQ(round_trip({{"seconds", 0.5}}), R"({"seconds":0.5})");
  // The controller's estimate through its incumbent.
  EXPECT_EQ(round_trip({{"speedup", 2.5}, {"speedup_vs_incumbent", 1.25}}),
            R"({"speedup":2.5,"speedup_vs_incumbent":1.25})");
}

TEST(TimingResult, FieldsAreTyped) {
  const TimingResult t = timing_from_json(json::parse(kAdaptiveTiming));
  EXPECT_EQ(t.protocol, Protocol::kAdaptive);
  EXPECT_EQ(t.timer, Timer::kCupti);
  EXPECT_EQ(t.input_sets, 3);
  ASSERT_TRUE(t.timed());
  EXPECT_DOUBLE_EQ(t.candidate->latency, 2.5e-06);
  EXPECT_EQ(t.candidate->stats.count, 120u);
  EXPECT_EQ(t.candidate->stop_reason, StopReason::kNoiseMet);
  ASSERT_TRUE(t.candidate->integrity);
  EXPECT_EQ(t.candidate->integrity->checked_iterations, 130u);
  ASSERT_TRUE(t.baseline);
  EXPECT_TRUE(std::isnan(t.baseline->stats.noise)) << "null: too few samples";
  EXPECT_EQ(t.baseline->solution, "cuBLASLt bf16");
  EXPECT_DOUBLE_EQ(t.speedup.value_or(0), 1.2);
  ASSERT_TRUE(t.phases);
  EXPECT_EQ(t.phases->rounds, 216u);
  EXPECT_DOUBLE_EQ(t.phases->seconds.at("setup_seconds"), 0.031);
  ASSERT_TRUE(t.sol);
  EXPECT_EQ(t.sol->ceilings, SolSource::kMeasured);
  EXPECT_EQ(t.sol->measured_at, "2026-11-02T10:00:00Z");
  EXPECT_EQ(t.lower_bound["term"], "memory");

  const TimingResult none = timing_from_json(json::object());
  EXPECT_FALSE(none.timed());
  EXPECT_FALSE(none.speedup);
}

TEST(Score, AsTheStagesWriteItReadsBackAndWritesTheSame) {
  const json score = json::parse(R"json({
    "mean_speedup": 1.5, "geomean_speedup": 1.4,
    "fast_p": {"fast_1": 1.0, "fast_1.5": 0.5, "fast_2": 0.0},
    "mean_sol_fraction": 0.42, "workloads_timed": 14,
    "integrity": {"checked_iterations": 4000, "every_iteration_checked": true,
                  "fewest_input_sets": 3, "guarantees": "every timed and warmup iteration"},
    "speedups_over": "c0003.cu",
    "holdout": {
  "requested" : 2, "drawn" : 2, "workloads" : [ "holdout-1", "holdout-2" ]}
  })json");
  EXPECT_EQ(to_json(score_from_json(score)).dump(), score.dump());
  EXPECT_EQ(to_json(Score{}).dump(), "{}");
  const Score s = score_from_json(score);
  EXPECT_DOUBLE_EQ(s.mean_speedup.value_or(0), 1.5);
  EXPECT_EQ(s.workloads_timed, 14u);
  EXPECT_DOUBLE_EQ(s.fast_p->at("fast_1.5"), 0.5);
  EXPECT_EQ(s.holdout["drawn"], 2);
}

TEST(Score, AWholeVerdictKeepsItsShape) {
  json v = {{"schema", "kharness.verdict/1"},
            {"solution", "s"},
            {"source", "s.cu"},
            {"definition", "rmsnorm_h4096"},
            {"status", "PASSED"},
            {"failure", nullptr},
            {"suspect", nullptr},
            {"seed", 7},
            {"seconds", 1.5},
            {"workloads",
             {{{"uuid", "w1"},
               {"axes", {{"batch_size", 16}}},
               {"status", "PASSED"},
               {"failure", nullptr},
               {"suspect", nullptr},
               {"trials", json::array()},
               {"timing", json::parse(kAdaptiveTiming)}}}},
            {"worker_stderr", ""},
            {"worker_stderr_truncated", false},
            {"phases", {{"timing", 0.9}, {"worker_process", 1.4}}},
            {"score", {{"mean_speedup", 1.2}, {"geomean_speedup", 1.2}, {"workloads_timed", 1}}},
            {"compile", {{"status", "PASSED"}}},
            {"environment", {{"gpu", "NVIDIA H200"}}}};
  EXPECT_EQ(to_json(verdict_from_json(v)).dump(), v.dump());
}

TEST(Enums, NamesReadBack) {
  for (Mode m : {Mode::kCompile, Mode::kCheck, Mode::kBench, Mode::kValidate})
    EXPECT_EQ(parse_enum<Mode>(name_of(m)), m);
  for (StopReason r : {StopReason::kNotFinished, StopReason::kNoiseMet, StopReason::kTimeLimit,
                       StopReason::kSampleCount})
    EXPECT_EQ(parse_enum<StopReason>(name_of(r)), r);
  EXPECT_EQ(name_of(Protocol::kOfficial), "official");
  EXPECT_EQ(name_of(Timer::kEvents), "events");
  EXPECT_EQ(name_of(SolSource::kMeasured), "measured");
  EXPECT_EQ(name_of(StateReset::kReload), "reload");
  EXPECT_FALSE(parse_enum<Protocol>("fast"));
}

TEST(BenchOptions, JsonRoundTripAndDefaults) {
  bench::BenchOptions o;
  o.protocol = Protocol::kOfficial;
  o.timer = Timer::kEvents;
  o.sol = SolSource::kMeasured;
  o.state_reset = StateReset::kReload;
  o.baseline_solution = "cublaslt";
  o.max_noise = 0.01;
  const json j = o.to_json();
  EXPECT_EQ(j["protocol"], "official");
  EXPECT_EQ(j["sol"], "measured");
  EXPECT_EQ(bench::BenchOptions::from_json(j).to_json(), j);
  // Missing fields keep their defaults; an unknown name is refused.
  const bench::BenchOptions d = bench::BenchOptions::from_json({{"baseline", false}});
  EXPECT_EQ(d.protocol, Protocol::kAdaptive);
  EXPECT_EQ(d.timer, Timer::kCupti);
  EXPECT_FALSE(d.baseline);
  EXPECT_THROW(bench::BenchOptions::from_json({{"timer", "stopwatch"}}), std::runtime_error);
  EXPECT_DOUBLE_EQ(d.warmup_seconds, 0.05);
  o.warmup_seconds = 0.2;
  EXPECT_DOUBLE_EQ(bench::BenchOptions::from_json(o.to_json()).warmup_seconds, 0.2);
}

// The adaptive warmup: all ten rounds of a microsecond kernel; two of a 42 ms one (a slow run
// candidate at M = 16384: ten were 0.45 s of its 3.5 s verdict); never fewer than one.
TEST(BenchOptions, WarmupRoundsStopAtTheTimeBudget) {
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 3e-6), 10);
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 0.005), 10);
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 0.006), 9);
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 0.042), 2);
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 0.5), 1);
  EXPECT_EQ(bench::warmup_rounds(10, 0.0, 0.5), 10);  // no budget: the count alone
  EXPECT_EQ(bench::warmup_rounds(0, 0.05, 0.5), 0);
  EXPECT_EQ(bench::warmup_rounds(10, 0.05, 0.0), 10);  // not measured
}

}  // namespace
}  // namespace kharness
