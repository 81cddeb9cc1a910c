// The one evaluation request (src/pipeline/request.hpp): its way to the worker and back as JSON,
// every field that travels; what stays in the parent; a candidate's changes to the shared request;
// and the baseline, resolved once in the pipeline and read as it is by the worker.
#include "pipeline/request.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "kharness/operators.hpp"
#include "pipeline/evaluation.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pipeline::Baseline;
using pipeline::Request;

// A request with every field away from its default.
Request full_request() {
  Request r;
  r.mode = Mode::kBench;
  r.target.operator_name = "rmsnorm_h4096";
  r.target.operators_dirs = {"/catalogue/a", "/catalogue/b"};
  r.target.arch = "sm_100a";
  r.target.use_cache = false;
  r.compile_cache_dir = "/tmp/kharness-compile-x";
  r.timeouts.seconds = 42;
  r.timeouts.launch_seconds = 3.5;
  r.sharing = 2;
  r.check.workloads = {"082f6370", "holdout-"};
  r.check.trials = 7;
  r.check.seed = 0xfeedfacecafebeefull;
  r.check.atol = 0.25;
  r.check.rtol = 0.125;
  r.check.required_matched_ratio = 0.75;
  r.check.determinism = false;
  r.seed_given = true;
  r.bench.protocol = Protocol::kOfficial;
  r.bench.timer = Timer::kEvents;
  r.bench.warmup = 4;
  r.bench.warmup_seconds = 0.5;
  r.bench.iterations = 9;
  r.bench.trials = 5;
  r.bench.max_noise = 0.01;
  r.bench.max_seconds = 6;
  r.bench.min_samples = 12;
  r.bench.input_sets = 4;
  r.bench.state_reset = StateReset::kReload;
  r.bench.baseline = true;
  r.bench.baseline_solution = "/runs/r1/c0003.cu";
  r.bench.sol = SolSource::kMeasured;
  r.holdout = 3;
  r.candidate.solution = "/runs/r1/c0007.cu";
  r.baseline = {Baseline::Kind::kSolution, "/runs/r1/c0003.cu", false};
  r.holdout_workloads = {json{{"uuid", "holdout-1"}, {"axes", {{"M", 17}}}}};
  return r;
}

TEST(Request, EveryFieldThatTravelsComesBackFromTheWorkersJson) {
  const Request sent = full_request();
  // Through text, as the worker reads its stdin.
  const Request got = pipeline::request_from_json(json::parse(pipeline::request_json(sent).dump()));
  EXPECT_EQ(got.mode, sent.mode);
  EXPECT_EQ(got.target.operator_name, sent.target.operator_name);
  EXPECT_EQ(got.target.operators_dirs, sent.target.operators_dirs);
  EXPECT_EQ(got.target.arch, sent.target.arch);
  EXPECT_EQ(got.target.use_cache, sent.target.use_cache);
  EXPECT_EQ(got.compile_cache_dir, sent.compile_cache_dir);
  EXPECT_EQ(got.timeouts.seconds, sent.timeouts.seconds);
  EXPECT_EQ(got.timeouts.launch_seconds, sent.timeouts.launch_seconds);
  EXPECT_EQ(got.sharing, sent.sharing);
  EXPECT_EQ(got.check.to_json(), sent.check.to_json());
  EXPECT_EQ(got.check.seed, sent.check.seed);  // all 64 bits
  EXPECT_EQ(got.check.atol, sent.check.atol);
  EXPECT_EQ(got.check.determinism, sent.check.determinism);
  EXPECT_EQ(got.seed_given, sent.seed_given);
  EXPECT_EQ(got.bench.to_json(), sent.bench.to_json());
  EXPECT_EQ(got.holdout, sent.holdout);
  EXPECT_EQ(got.candidate.solution, sent.candidate.solution);
  EXPECT_EQ(got.baseline, sent.baseline);
  EXPECT_EQ(got.holdout_workloads, sent.holdout_workloads);
  // And the same JSON again: nothing is lost or added on the way.
  EXPECT_EQ(pipeline::request_json(got), pipeline::request_json(sent));
}

TEST(Request, TheJsonNamesItsSchemaAndTask) {
  const json j = pipeline::request_json(full_request());
  EXPECT_EQ(j["schema"], "kharness.request/1");
  EXPECT_EQ(j["task"], "evaluate");
  EXPECT_EQ(j["mode"], "bench");
  EXPECT_EQ(
      j["baseline"],
      (json{{"kind", "solution"}, {"solution", "/runs/r1/c0003.cu"}, {"from_operator", false}}));
}

TEST(Request, EveryBaselineKindTravels) {
  for (const Baseline& b : {Baseline{}, Baseline{Baseline::Kind::kCublasLt, {}, true},
                            Baseline{Baseline::Kind::kSolution, "/ops/x/baseline", true}}) {
    Request r = full_request();
    r.baseline = b;
    EXPECT_EQ(pipeline::request_from_json(pipeline::request_json(r)).baseline, b);
  }
}

// The archive's settings, the candidate's GPU and its record extras are the parent's: a score's
// list of every submission does not ride along with each request.
TEST(Request, TheParentsOwnFieldsStayInTheParent) {
  Request r = full_request();
  r.archive.solutions = {"a.cu", "b.cu"};
  r.archive.run_info = {{"submissions", 2}};
  r.archive.dir = "/archive";
  r.candidate.gpu = GpuInfo{};
  r.candidate.gpu->uuid = "GPU-1234";
  r.candidate.extra = {{"score_index", 5}};
  const json j = pipeline::request_json(r);
  EXPECT_FALSE(j.contains("archive"));
  EXPECT_EQ(j["candidate"], (json{{"solution", "/runs/r1/c0007.cu"}}));
  const std::string text = j.dump();
  EXPECT_EQ(text.find("GPU-1234"), std::string::npos);
  EXPECT_EQ(text.find("score_index"), std::string::npos);
  EXPECT_EQ(text.find("/archive"), std::string::npos);
}

TEST(Request, ARequestItCannotReadIsAnError) {
  json j = pipeline::request_json(full_request());
  json wrong_mode = j;
  wrong_mode["mode"] = "fast";
  try {
    pipeline::request_from_json(wrong_mode);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "unknown mode 'fast'");
  }
  json other_schema = j;
  other_schema["schema"] = "kharness.request/0";
  EXPECT_THROW(pipeline::request_from_json(other_schema), std::runtime_error);
  json wrong_kind = j;
  wrong_kind["baseline"]["kind"] = "vendor";
  EXPECT_THROW(pipeline::request_from_json(wrong_kind), std::runtime_error);
  json no_candidate = j;
  no_candidate.erase("candidate");
  EXPECT_ANY_THROW(pipeline::request_from_json(no_candidate));
}

TEST(Request, ACandidateChangesOnlyWhatItSays) {
  Request shared;
  shared.mode = Mode::kValidate;
  shared.check.seed = 1;
  shared.check.workloads = {"aaaa"};
  shared.bench.baseline_solution = "cublaslt";
  pipeline::Candidate plain;
  plain.solution = "k.cu";
  Request r = pipeline::with_candidate(shared, plain);
  EXPECT_EQ(r.mode, Mode::kValidate);
  EXPECT_EQ(r.check.seed, 1u);
  EXPECT_EQ(r.check.workloads, std::vector<std::string>{"aaaa"});
  EXPECT_EQ(r.bench.baseline_solution, "cublaslt");
  EXPECT_EQ(r.candidate.solution, "k.cu");

  pipeline::Candidate own = plain;
  own.mode = Mode::kCompile;
  own.seed = 9;
  own.workloads = {"bbbb", "cccc"};
  own.baseline = "incumbent.cu";
  r = pipeline::with_candidate(shared, own);
  EXPECT_EQ(r.mode, Mode::kCompile);
  EXPECT_EQ(r.check.seed, 9u);
  EXPECT_EQ(r.check.workloads, (std::vector<std::string>{"bbbb", "cccc"}));
  EXPECT_EQ(r.bench.baseline_solution, fs::absolute("incumbent.cu").string());
}

TEST(Request, TheWorkersLimitIsTheTimeoutTimesTheWorkersOnItsGpu) {
  Request r;
  r.timeouts.seconds = 300;
  EXPECT_EQ(pipeline::worker_timeout_seconds(r), 300);
  r.sharing = 3;
  EXPECT_EQ(pipeline::worker_timeout_seconds(r), 900);
  // The compile inside it never takes longer than the worker may.
  r.timeouts.seconds = 10;
  r.sharing = 1;
  EXPECT_EQ(pipeline::compile_options(r).limits.timeout_seconds, 10);
}

// ---- resolve_baseline: the one choice ----

Operator operator_with(const std::string& definition_baseline,
                       std::optional<fs::path> baseline_solution) {
  Operator op;
  op.definition.kharness.baseline = definition_baseline;
  op.baseline = std::move(baseline_solution);
  return op;
}

TEST(ResolveBaseline, InTheDocumentedOrder) {
  const Operator own = operator_with("baseline", fs::path("/ops/rms/baseline"));
  const Operator vendor = operator_with("cublaslt", std::nullopt);
  const Operator none = operator_with("", std::nullopt);
  Request r;
  // The operator's own solution, then its definition's cuBLASLt, then none.
  EXPECT_EQ(pipeline::resolve_baseline(r, own),
            (Baseline{Baseline::Kind::kSolution, "/ops/rms/baseline", true}));
  EXPECT_EQ(pipeline::resolve_baseline(r, vendor), (Baseline{Baseline::Kind::kCublasLt, {}, true}));
  EXPECT_EQ(pipeline::resolve_baseline(r, none), Baseline{});
  // --baseline cublaslt and --baseline PATH (made absolute) win over the operator's.
  r.bench.baseline_solution = "cublaslt";
  EXPECT_EQ(pipeline::resolve_baseline(r, own), (Baseline{Baseline::Kind::kCublasLt, {}, false}));
  r.bench.baseline_solution = "mine.cu";
  EXPECT_EQ(pipeline::resolve_baseline(r, vendor),
            (Baseline{Baseline::Kind::kSolution, fs::absolute("mine.cu"), false}));
  // The incumbent, through with_candidate, wins over --baseline.
  pipeline::Candidate c;
  c.baseline = "incumbent.cu";
  EXPECT_EQ(pipeline::resolve_baseline(pipeline::with_candidate(r, c), own),
            (Baseline{Baseline::Kind::kSolution, fs::absolute("incumbent.cu"), false}));
  // --no-baseline: none, whatever else is asked or offered.
  r.bench.baseline = false;
  EXPECT_EQ(pipeline::resolve_baseline(r, own), Baseline{});
  EXPECT_EQ(pipeline::resolve_baseline(pipeline::with_candidate(r, c), vendor), Baseline{});
}

// A verdict names what its speedups are over when it is not the operator's own baseline, and only
// a verdict timed against the operator's baseline gives the archive its operator speedup.
TEST(ResolveBaseline, TheVerdictSaysWhatItsSpeedupsAreOver) {
  const Baseline own{Baseline::Kind::kSolution, "/ops/rms/baseline/solution.json", true};
  const Baseline vendor{Baseline::Kind::kCublasLt, {}, true};
  const Baseline incumbent{Baseline::Kind::kSolution, "/runs/r1/c0003.cu", false};
  const Baseline asked_vendor{Baseline::Kind::kCublasLt, {}, false};
  EXPECT_EQ(pipeline::speedups_over(own), "");
  EXPECT_EQ(pipeline::speedups_over(vendor), "");
  EXPECT_EQ(pipeline::speedups_over(Baseline{}), "");
  EXPECT_EQ(pipeline::speedups_over(incumbent), "c0003.cu");
  EXPECT_EQ(pipeline::speedups_over(asked_vendor), "cublaslt");

  Verdict timed;
  timed.score.mean_speedup = 1.8;
  timed.score.geomean_speedup = 1.7;
  const auto measured = pipeline::measured_operator_speedup(own, timed);
  ASSERT_TRUE(measured);
  EXPECT_DOUBLE_EQ(measured->mean, 1.8);
  EXPECT_DOUBLE_EQ(measured->geomean, 1.7);
  EXPECT_FALSE(measured->estimated);
  EXPECT_TRUE(pipeline::measured_operator_speedup(vendor, timed));
  EXPECT_FALSE(pipeline::measured_operator_speedup(incumbent, timed));
  EXPECT_FALSE(pipeline::measured_operator_speedup(asked_vendor, timed));
  EXPECT_FALSE(pipeline::measured_operator_speedup(own, Verdict{}));  // not timed
}

// The worker does not choose again: what the pipeline resolved is what it reads, even where the
// options it also receives would have led elsewhere (an operator whose definition names cuBLASLt).
TEST(ResolveBaseline, TheWorkerReadsTheResolvedBaselineAsItIs) {
  Request r = full_request();
  r.bench.baseline_solution = "";
  r.baseline = Baseline{};
  const Request got = pipeline::request_from_json(pipeline::request_json(r));
  EXPECT_EQ(got.baseline.kind, Baseline::Kind::kNone);
}

// The pipeline resolves the baseline once per evaluation, after the operator is loaded, and the
// request it completes (the worker's) carries it: the shipped rmsnorm's own baseline folder, or
// the caller's file.
TEST(ResolveBaseline, ThePipelineResolvesItIntoTheEvaluationsRequest) {
  testing::TempDir dir;
  ::setenv("KHARNESS_CACHE", (dir.path() / "compile-cache").string().c_str(), 1);
  Request shared;
  shared.mode = Mode::kCompile;
  shared.target.operator_name = "rmsnorm_h4096";
  shared.target.operators_dirs = {testing::source_dir() / "operators"};
  shared.target.arch = "sm_90a";
  shared.archive.dir = dir.path() / "archive";
  pipeline::Evaluator evaluator(shared);
  const std::string good = testing::fixture("good/rmsnorm_simple.cu").string();
  pipeline::Evaluation e = evaluator.evaluate(good);
  EXPECT_EQ(e.request.baseline.kind, Baseline::Kind::kSolution);
  EXPECT_TRUE(e.request.baseline.from_operator);
  EXPECT_EQ(e.request.baseline.solution.parent_path().filename(), "baseline");
  EXPECT_TRUE(e.request.baseline.solution.is_absolute());
  EXPECT_EQ(e.request.candidate.solution, good);

  pipeline::Candidate c;
  c.solution = good;
  c.baseline = good;  // timed against itself, as a run times a candidate against its incumbent
  e = evaluator.evaluate(c);
  EXPECT_EQ(e.request.baseline, (Baseline{Baseline::Kind::kSolution, fs::absolute(good), false}));
  evaluator.finish();
  ::unsetenv("KHARNESS_CACHE");
}

}  // namespace
}  // namespace kharness
