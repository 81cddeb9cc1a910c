// The optimisation loop's decisions (controller/search.hpp) on the CPU: a fake pipeline that
// times kernels by a marker in their source (latency, noise, failures, faster than light), a
// scripted provider and a fake clock stand in for the GPU, the model and the wall clock, so that
// promotion, the cascade, elites, dropout, the budgets, stop reasons and resume are each checked
// by what Search decides, not by what a GPU happened to measure.
#include "controller/search.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "controller/archive_recorder.hpp"
#include "controller/evaluator.hpp"
#include "controller/recorder.hpp"
#include "kharness/archive.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "pipeline/evaluation.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using controller::Clock;
using controller::DiagnosisRequest;
using controller::EvaluationRequest;
using controller::FileRecorder;
using controller::Search;
using controller::SearchOptions;
using controller::SearchResult;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kOperator = "rmsnorm_h4096";  // 16 workloads: 3 representatives
constexpr double kBaselineLatency = 2.0;            // the operator's baseline, every workload
constexpr double kSecondsPerWorkload = 1.0;         // what an evaluation costs on the fake clock

// What the fake pipeline reads from a kernel's source: a line `// fake: key=value ...`.
//   latency  per workload, the seed's being 1 (default 1)
//   noise    the relative noise of its timings (default 0.002)
//   status   of the workloads it fails on (default INCORRECT_NUMERICAL when `fail` is set)
//   fail     reps | rest | all: the workloads it fails on (the cascade's representatives, the
//            others, every one); COMPILE_ERROR and REJECTED fail before any workload
//   suspect  1: timed faster than light
//   untimed  1: one workload outside the representatives has no timing
//   model    fail: fails model-check (run --model); pass (default) passes it
//   layer    its layer speedup over the seeds' layer in model-check (default 1)
struct FakeKernel {
  double latency = 1.0;
  double noise = 0.002;
  std::string status = "PASSED";
  std::string fail;
  bool suspect = false;
  bool untimed = false;
  std::string model = "pass";
  double layer = 1.0;
};

FakeKernel parse_kernel(const std::string& source) {
  FakeKernel k;
  const auto at = source.find("// fake:");
  if (at == std::string::npos) return k;
  std::istringstream in(source.substr(at + 8, source.find('\n', at) - at - 8));
  std::string item;
  while (in >> item) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "latency") k.latency = std::stod(value);
    if (key == "noise") k.noise = std::stod(value);
    if (key == "status") k.status = value;
    if (key == "fail") k.fail = value;
    if (key == "suspect") k.suspect = value == "1";
    if (key == "untimed") k.untimed = value == "1";
    if (key == "model") k.model = value;
    if (key == "layer") k.layer = std::stod(value);
  }
  if (!k.fail.empty() && k.status == "PASSED") k.status = "INCORRECT_NUMERICAL";
  return k;
}

std::string id_of(const std::filesystem::path& file) { return file.stem().string(); }

class FakeClock : public Clock {
 public:
  double seconds() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return now_;
  }
  void advance(double s) {
    std::lock_guard<std::mutex> lock(mutex_);
    now_ += s;
  }

 private:
  mutable std::mutex mutex_;
  double now_ = 1000.0;
};

// The pipeline: a verdict from the kernels' markers, timed against the incumbent's (or the
// operator's baseline), and a canned diagnosis. Safe on the pool's threads.
class FakeEvaluator : public controller::Evaluator {
 public:
  FakeEvaluator(const Operator& op, FakeClock& clock)
      : op_(op), reps_(controller::bucket_representatives(op)), clock_(clock) {}

  // A kernel's marker by candidate id, over its source's (the seed has none).
  std::map<std::string, std::string> overrides;
  // Called with every request before it is answered: may throw (no GPU).
  std::function<void(const EvaluationRequest&)> before;
  bool diagnosis_fails = false;
  // model-check (run --model): the seeds' layer passes unless told; the operator's share of it.
  bool seeds_fail_model = false;
  double share = 0.012;

  controller::Evaluated evaluate(const EvaluationRequest& q) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.push_back(q);
    }
    if (before) before(q);
    const FakeKernel k = kernel(q.solution);
    Verdict v;
    v.definition = op_.definition.name;
    v.source = q.solution.string();
    v.seed = q.seed.value_or(0);
    if (k.status == "COMPILE_ERROR" || k.status == "REJECTED") {
      v.status = *parse_status(k.status);
      v.failure = Failure{k.status == "REJECTED" ? "bad_input" : "compile", "it does not build",
                          json::object()};
      return v;
    }
    if (q.mode == Mode::kCompile) return v;
    std::vector<std::string> uuids = q.workloads;
    if (uuids.empty()) {
      for (const auto& w : op_.workloads) uuids.push_back(w.uuid);
    }
    const FakeKernel incumbent = q.baseline.empty() ? FakeKernel{} : kernel(q.baseline);
    bool untimed_left = k.untimed;
    double sum = 0;
    for (const auto& uuid : uuids) {
      WorkloadVerdict w;
      w.uuid = uuid;
      const bool rep = std::count(reps_.begin(), reps_.end(), uuid) > 0;
      if (k.fail == "all" || (k.fail == "reps" && rep) || (k.fail == "rest" && !rep)) {
        w.status = *parse_status(k.status);
        w.failure =
            Failure{k.status == "TIMEOUT" ? "timeout" : "tolerance", "wrong", json::object()};
        if (v.passed()) {
          v.status = w.status;
          v.failure = w.failure;
        }
      } else if (untimed_left && !rep) {
        untimed_left = false;  // checked, but no timing
      } else {
        const double base = q.baseline.empty() ? kBaselineLatency : incumbent.latency;
        const double speedup = base / k.latency;
        w.timing = timing_from_json({{"speedup", speedup},
                                     {"candidate", {{"median", k.latency}, {"noise", k.noise}}},
                                     {"baseline", {{"median", base}, {"noise", incumbent.noise}}}});
        sum += speedup;
      }
      v.workloads.push_back(std::move(w));
    }
    if (k.suspect && v.passed()) {
      v.suspect = kFasterThanLight;
      v.workloads[0].suspect = Failure{kFasterThanLight, "below the bound", json::object()};
    }
    if (q.baseline.empty() && v.passed())
      v.score = score_from_json({{"mean_speedup", sum / static_cast<double>(uuids.size())}});
    clock_.advance(kSecondsPerWorkload * static_cast<double>(uuids.size()));
    return v;
  }

  std::string diagnose(const DiagnosisRequest& q) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      diagnosed_.push_back(id_of(q.solution));
    }
    if (diagnosis_fails) throw Error(ExitCode::kEnvironment, "", "counters not permitted");
    return "memory-bound: DRAM throughput 91% of peak (" + id_of(q.solution) + ")";
  }

  // The seeds' layer (no solution) as told; a kernel by its `model` and `layer` markers.
  controller::ModelVerdict model_check(const controller::ModelCheckRequest& q) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      model_checked_.push_back(q.solution.empty() ? std::string("seeds") : id_of(q.solution));
    }
    controller::ModelVerdict m;
    m.model = "llama-3.1-8b";
    m.phase = "decode";
    m.layers = 4;
    m.nodes = {"attn_norm"};
    m.share = share;
    m.share_min = share / 2;
    m.share_max = share * 2;
    m.layer_noise = 0.001;
    const FakeKernel k = q.solution.empty() ? FakeKernel{} : kernel(q.solution);
    m.passed = q.solution.empty() ? !seeds_fail_model : k.model != "fail";
    m.status = m.passed ? "PASSED" : "INCORRECT_NUMERICAL";
    if (!m.passed)
      m.reason = "decode batch=16 kv=4096: hidden state after layer 2: bias +0.004 (max 0.0005)";
    else
      m.layer_speedup = q.solution.empty() ? 1.0003 : k.layer;
    m.verdict = {{"model", "llama-3.1-8b"}, {"passed", m.passed}};
    return m;
  }
  // The model-checks asked for: "seeds" for the seeds' layer, else the candidate's id.
  std::vector<std::string> model_checked() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return model_checked_;
  }

  std::vector<EvaluationRequest> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  // The evaluations of one kernel, in order.
  std::vector<EvaluationRequest> calls_of(const std::string& id) const {
    std::vector<EvaluationRequest> out;
    for (const auto& c : calls())
      if (id_of(c.solution) == id) out.push_back(c);
    return out;
  }
  std::vector<std::string> diagnosed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return diagnosed_;
  }
  const std::vector<std::string>& reps() const { return reps_; }

 private:
  FakeKernel kernel(const std::filesystem::path& file) const {
    auto o = overrides.find(id_of(file));
    return parse_kernel(o != overrides.end() ? "// fake: " + o->second + "\n"
                                             : read_file(file.string()));
  }

  const Operator& op_;
  std::vector<std::string> reps_;
  FakeClock& clock_;
  mutable std::mutex mutex_;
  std::vector<EvaluationRequest> calls_;
  std::vector<std::string> diagnosed_;
  std::vector<std::string> model_checked_;
};

// Answers in request order (Request::context.request_index), each the operator's seed with a
// fake marker; "" answers without code. Records what it was asked and told.
class ScriptedProvider : public llm::Provider {
 public:
  ScriptedProvider(std::vector<std::string> specs, std::string seed_source)
      : specs_(std::move(specs)), seed_(std::move(seed_source)) {}

  bool finite = false;  // has_more() is false once every answer was given
  std::int64_t input_tokens = 1000, output_tokens = 100;
  std::function<void(std::size_t)> before;  // called with each request's index: may throw

  std::string name() const override { return "fake"; }
  llm::Answer complete(const llm::Request& request) override {
    const auto i = request.context.value("request_index", std::size_t{0});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_[i] = request;
    }
    if (before) before(i);
    llm::Answer a;
    if (i >= specs_.size()) {
      a.stop_reason = "replay_exhausted";
      return a;
    }
    a.stop_reason = "end_turn";
    a.usage.input_tokens = input_tokens;
    a.usage.output_tokens = output_tokens;
    a.text = specs_[i].empty() ? "I would keep the kernel as it is."
                               : "```cuda\n" + seed_ + "// fake: " + specs_[i] + "\n```\n";
    return a;
  }
  void observe(const llm::Outcome& outcome) override {
    std::lock_guard<std::mutex> lock(mutex_);
    outcomes_.push_back(outcome);
  }
  bool has_more() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return !finite || requests_.size() < specs_.size();
  }

  std::map<std::size_t, llm::Request> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::vector<llm::Outcome> outcomes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return outcomes_;
  }

 private:
  std::vector<std::string> specs_;
  std::string seed_;
  mutable std::mutex mutex_;
  std::map<std::size_t, llm::Request> requests_;
  std::vector<llm::Outcome> outcomes_;
};

// The earlier candidates' feedback a prompt shows ("## c0003: PASSED").
std::set<std::string> feedback_ids(const std::string& prompt) {
  std::set<std::string> ids;
  for (std::size_t at = prompt.find("## c"); at != std::string::npos;
       at = prompt.find("## c", at + 1)) {
    if (prompt.compare(at + 8, 1, ":") == 0) ids.insert(prompt.substr(at + 3, 5));
  }
  return ids;
}

const controller::CandidateRecord& record(const SearchResult& r, const std::string& id) {
  for (const auto& c : r.candidates)
    if (c.id == id) return c;
  throw std::runtime_error("no candidate " + id);
}

class SearchTest : public ::testing::Test {
 protected:
  SearchTest()
      : op_(OperatorRegistry::from_environment({}).load(kOperator)),
        seed_source_(read_file(seed_for(op_, "sm_90a")->string())),
        pipeline_(op_, clock_) {
    options_.evaluation.target.operator_name = kOperator;
    options_.evaluation.target.arch = "sm_90a";
    options_.provider = "fake";
    options_.model = "m";
    options_.budget = 1;
    options_.patience = 0;
    options_.skills_dir = testing::source_dir() / "skills";
    options_.seed = 7;
  }

  // A run of the search in `folder` (under the test's temp dir), records in its run folder.
  SearchResult run(ScriptedProvider& provider, const std::string& folder = "run",
                   const std::atomic<bool>* stop = nullptr, bool resume = false) {
    options_.work_dir = dir_.path() / folder;
    FileRecorder recorder(options_.work_dir);
    if (!resume) recorder.begin(json::object());
    Search search(options_, pipeline_, provider, recorder, stop, clock_);
    if (resume) search.resume(recorder.load_candidates());
    return search.run();
  }
  ScriptedProvider provider(std::vector<std::string> specs) {
    return ScriptedProvider(std::move(specs), seed_source_);
  }

  testing::TempDir dir_;
  Operator op_;
  std::string seed_source_;
  FakeClock clock_;
  FakeEvaluator pipeline_;
  SearchOptions options_;
};

// ---- the seed ----

TEST_F(SearchTest, TheSeedIsValidatedOnEveryWorkloadAgainstTheOperatorsBaseline) {
  options_.budget = 0;
  auto p = provider({});
  SearchResult r = run(p);
  EXPECT_EQ(r.stop_reason, "budget");
  ASSERT_EQ(r.candidates.size(), 1u);
  EXPECT_EQ(r.best_id, "c0000");
  EXPECT_DOUBLE_EQ(r.seed_score, kBaselineLatency);  // baseline 2, seed 1
  EXPECT_DOUBLE_EQ(r.best_score, kBaselineLatency);
  auto calls = pipeline_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].mode, Mode::kValidate);
  EXPECT_TRUE(calls[0].workloads.empty());  // all of them
  EXPECT_TRUE(calls[0].baseline.empty());   // against the operator's baseline
  EXPECT_EQ(calls[0].seed, options_.seed + 7919);
  // The best kernel is profiled, the seed first: its diagnosis goes into the prompts.
  EXPECT_EQ(pipeline_.diagnosed(), std::vector<std::string>{"c0000"});
  EXPECT_NE(r.candidates[0].diagnosis.find("memory-bound"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(options_.work_dir / "summary.json"));
}

TEST_F(SearchTest, ASeedThatFailsOrIsSuspectCannotStartARun) {
  for (const std::string spec : {"fail=all", "suspect=1"}) {
    pipeline_.overrides["c0000"] = spec;
    auto p = provider({});
    try {
      run(p, "run-" + spec.substr(0, 4));
      ADD_FAILURE() << spec << ": the run started";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kFailed) << spec;
      EXPECT_NE(e.message().find("the seed cannot start a run"), std::string::npos) << e.message();
    }
  }
}

// The gemm family has a CuTe variant of its sm_90a seed: where a CUTLASS root is found, the run
// evaluates it as c0001 against the seed and starts from it when it is faster; without a root it
// is not offered.
TEST(SearchCuteSeed, OfferedBesideTheSeedWhereACutlassRootIsFound) {
  testing::TempDir dir;
  const fs::path root = dir.path() / "cutlass";
  for (const auto& [file, text] :
       {std::pair<std::string, std::string>{"cutlass/version.h",
                                            "#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n"
                                            "#define CUTLASS_PATCH 0\n"},
        {"cute/config.hpp", "#pragma once\n"}}) {
    fs::create_directories((root / file).parent_path());
    write_file_atomic((root / file).string(), text);
  }
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_n6144_k4096");
  ASSERT_TRUE(cute_seed_for(op, "sm_90a"));
  EXPECT_FALSE(op.arch_seeds.count("cute.sm_90a"));
  EXPECT_FALSE(cute_seed_for(op, "sm_100a"));
  auto run = [&](const std::string& folder, const std::optional<std::string>& cutlass,
                 const std::string& cute_marker) {
    testing::ScopedEnv env("KHARNESS_CUTLASS", cutlass);
    FakeClock clock;
    FakeEvaluator pipeline(op, clock);
    pipeline.overrides["c0001"] = cute_marker;
    SearchOptions options;
    options.evaluation.target.operator_name = "gemm_n6144_k4096";
    options.evaluation.target.arch = "sm_90a";
    options.provider = "fake";
    options.budget = 1;
    options.patience = 0;
    options.skills_dir = testing::source_dir() / "skills";
    options.work_dir = dir.path() / folder;
    FileRecorder recorder(options.work_dir);
    recorder.begin(json::object());
    ScriptedProvider provider({}, "");
    provider.finite = true;
    Search search(options, pipeline, provider, recorder, nullptr, clock);
    return search.run();
  };

  SearchResult faster = run("faster", root.string(), "latency=0.8");
  ASSERT_EQ(faster.candidates.size(), 2u);  // the budget of 1 is the CuTe seed
  const auto& c = record(faster, "c0001");
  EXPECT_EQ(c.provider, "seed");
  EXPECT_EQ(c.parent, "c0000");
  EXPECT_NE(c.source.find("cute"), std::string::npos);
  EXPECT_NE(c.note.find("seed.cute.sm_90a.cu"), std::string::npos) << c.note;
  EXPECT_TRUE(c.promoted);
  EXPECT_EQ(faster.best_id, "c0001");

  SearchResult slower = run("slower", root.string(), "latency=1.1");
  EXPECT_FALSE(record(slower, "c0001").promoted);
  EXPECT_EQ(slower.best_id, "c0000");

  SearchResult none = run("none", std::string("none"), "latency=0.8");
  EXPECT_EQ(none.candidates.size(), 1u);  // only the seed: the provider had nothing to say
}

// ---- promotion ----

TEST_F(SearchTest, AFasterCandidateIsPromotedAfterTheCascadeAndAFullValidation) {
  auto p = provider({"latency=0.8"});
  options_.out = dir_.path() / "best.cu";
  SearchResult r = run(p);
  EXPECT_EQ(r.stop_reason, "budget");
  EXPECT_EQ(r.best_id, "c0001");
  EXPECT_NEAR(r.best_score, kBaselineLatency * 1.25, 1e-9);
  const auto& c = record(r, "c0001");
  EXPECT_TRUE(c.promoted);
  EXPECT_EQ(c.status.name(), "PASSED");
  EXPECT_EQ(c.stage, "full");
  EXPECT_EQ(c.parent, "c0000");
  EXPECT_NEAR(c.speedup_vs_incumbent, 1.25, 1e-9);
  EXPECT_NE(c.note.find("promoted"), std::string::npos);
  // The verdict the prompt shows: speedups over the operator's baseline, through the seed's.
  EXPECT_NEAR(c.best_verdict["workloads"][0]["timing"]["speedup"].get<double>(), 2.5, 1e-9);
  EXPECT_NEAR(c.best_verdict["workloads"][0]["timing"]["speedup_vs_incumbent"].get<double>(), 1.25,
              1e-9);
  // The cascade (the representatives), then every workload; both against the incumbent.
  auto calls = pipeline_.calls_of("c0001");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].workloads, pipeline_.reps());
  EXPECT_TRUE(calls[1].workloads.empty());
  for (const auto& call : calls) {
    EXPECT_EQ(call.mode, Mode::kValidate);
    EXPECT_EQ(id_of(call.baseline), "c0000");
  }
  // The new best is profiled; the run's best kernel is written out.
  EXPECT_EQ(pipeline_.diagnosed(), (std::vector<std::string>{"c0000", "c0001"}));
  EXPECT_NE(c.diagnosis.find("c0001"), std::string::npos);
  EXPECT_NE(read_file(options_.out.string()).find("latency=0.8"), std::string::npos);
  // The provider hears the outcome.
  auto outcomes = p.outcomes();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status, "PASSED");
  EXPECT_NEAR(outcomes[0].score, 2.5, 1e-9);
}

TEST_F(SearchTest, NoPromotionWithinTheNoiseOrTheLeastGain) {
  // 1.015x with little noise: under the 2% least gain. 1.031x with 5% noise: under the noise.
  // 1.031x with little noise: promoted.
  options_.budget = 3;
  auto p = provider({"latency=0.985", "latency=0.97 noise=0.05", "latency=0.97"});
  SearchResult r = run(p);
  EXPECT_FALSE(record(r, "c0001").promoted);
  EXPECT_NE(record(r, "c0001").note.find("not promoted"), std::string::npos);
  EXPECT_NE(record(r, "c0001").note.find("least gain 2%"), std::string::npos);
  EXPECT_FALSE(record(r, "c0002").promoted);
  EXPECT_GT(record(r, "c0002").noise, 0.05);
  EXPECT_NEAR(record(r, "c0002").speedup_vs_incumbent, 1 / 0.97, 1e-9);
  EXPECT_TRUE(record(r, "c0003").promoted);
  EXPECT_EQ(r.best_id, "c0003");
  // Every one was validated in full (promising on the representatives) against the seed.
  for (const char* id : {"c0001", "c0002", "c0003"}) {
    EXPECT_EQ(record(r, id).stage, "full") << id;
    EXPECT_EQ(id_of(pipeline_.calls_of(id).back().baseline), "c0000") << id;
  }
}

TEST_F(SearchTest, WithoutALeastGainTheMeasuredNoiseDecides) {
  options_.min_gain = 0;
  auto p = provider({"latency=0.985"});
  SearchResult r = run(p);
  EXPECT_TRUE(record(r, "c0001").promoted);  // 1.015x > 1 + 0.28% noise
}

TEST_F(SearchTest, PromotionNeedsATimingOnEveryWorkload) {
  auto p = provider({"latency=0.5 untimed=1"});
  SearchResult r = run(p);
  const auto& c = record(r, "c0001");
  EXPECT_EQ(c.status.name(), "PASSED");
  EXPECT_FALSE(c.promoted);
  EXPECT_EQ(r.best_id, "c0000");
}

TEST_F(SearchTest, AFasterThanLightCandidateIsNeverPromotedNorAnElite) {
  options_.cascade = false;
  options_.budget = 4;
  options_.samples = 2;
  auto p =
      provider({"latency=0.5 suspect=1", "latency=1.0 fail=all", "latency=0.9", "latency=0.95"});
  SearchResult r = run(p);
  const auto& c = record(r, "c0001");
  EXPECT_EQ(c.status.name(), "SUSPECT");
  EXPECT_FALSE(c.promoted);
  EXPECT_NE(c.reason.find("faster_than_light"), std::string::npos);
  EXPECT_EQ(record(r, "c0002").status.name(), "INCORRECT_NUMERICAL");
  // Neither the suspect nor the failure is an elite: the second sample refines the best too.
  auto requests = p.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests.at(3).context["parent_id"], "c0000");
  EXPECT_TRUE(record(r, "c0003").promoted);
  EXPECT_EQ(r.best_id, "c0003");
}

// ---- the cascade ----

TEST_F(SearchTest, TheCascadeStopsASlowerCandidateOnTheRepresentatives) {
  options_.budget = 2;
  auto p = provider({"latency=1.25", "latency=1.005"});
  SearchResult r = run(p);
  const auto& slow = record(r, "c0001");
  EXPECT_EQ(slow.stage, "representatives");
  EXPECT_EQ(slow.status.name(), "PASSED");
  EXPECT_EQ(slow.workloads_evaluated, 3);
  EXPECT_FALSE(slow.promoted);
  EXPECT_NE(slow.note.find("not promising"), std::string::npos);
  EXPECT_NEAR(slow.score, kBaselineLatency * 0.8, 1e-9);  // estimated through the incumbent
  // The seed's full validation took 16 s on the fake clock for 16 workloads: 13 s saved.
  EXPECT_NEAR(slow.saved_seconds, 13 * kSecondsPerWorkload, 1e-9);
  EXPECT_EQ(pipeline_.calls_of("c0001").size(), 1u);
  // Half a percent slower is within what the representatives can tell: validated in full.
  EXPECT_EQ(record(r, "c0002").stage, "full");
  EXPECT_EQ(pipeline_.calls_of("c0002").size(), 2u);
  EXPECT_EQ(r.summary["cascade"]["stopped_early"], 1);
  EXPECT_NEAR(r.summary["cascade"]["saved_seconds"].get<double>(), 13.0, 1e-9);
}

TEST_F(SearchTest, TheCascadeStagesFailuresWhereTheyHappen) {
  options_.budget = 4;
  auto p = provider(
      {"fail=reps", "fail=rest latency=0.5", "status=COMPILE_ERROR", "fail=reps status=TIMEOUT"});
  SearchResult r = run(p);
  EXPECT_EQ(record(r, "c0001").status.name(), "INCORRECT_NUMERICAL");
  EXPECT_EQ(record(r, "c0001").stage, "representatives");
  EXPECT_EQ(pipeline_.calls_of("c0001").size(), 1u);
  // Correct on the representatives, wrong elsewhere: the full validation finds it.
  EXPECT_EQ(record(r, "c0002").status.name(), "INCORRECT_NUMERICAL");
  EXPECT_EQ(record(r, "c0002").stage, "full");
  EXPECT_FALSE(record(r, "c0002").promoted);
  // Stopped by the compiler, not by the cascade: nothing saved.
  EXPECT_EQ(record(r, "c0003").status.name(), "COMPILE_ERROR");
  EXPECT_EQ(record(r, "c0003").stage, "compile");
  EXPECT_EQ(record(r, "c0003").saved_seconds, 0.0);
  EXPECT_EQ(record(r, "c0004").status.name(), "TIMEOUT");
  EXPECT_EQ(r.best_id, "c0000");
}

TEST_F(SearchTest, WithoutTheCascadeEveryCandidateIsValidatedInFull) {
  options_.cascade = false;
  auto p = provider({"latency=1.25"});
  SearchResult r = run(p);
  EXPECT_EQ(record(r, "c0001").stage, "full");
  auto calls = pipeline_.calls_of("c0001");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].workloads.empty());
}

TEST_F(SearchTest, CompileOnlyRunsCompileEveryCandidateAndProfileNothing) {
  options_.compile_only = true;
  options_.budget = 2;
  auto p = provider({"latency=0.5", "status=COMPILE_ERROR"});
  SearchResult r = run(p);
  EXPECT_EQ(record(r, "c0000").status.name(), "COMPILED");
  EXPECT_EQ(record(r, "c0001").status.name(), "COMPILED");
  EXPECT_EQ(record(r, "c0001").stage, "compile");
  EXPECT_EQ(record(r, "c0002").status.name(), "COMPILE_ERROR");
  for (const auto& c : pipeline_.calls()) EXPECT_EQ(c.mode, Mode::kCompile);
  EXPECT_TRUE(pipeline_.diagnosed().empty());
  EXPECT_EQ(r.best_id, "c0000");
}

// ---- samples, elites and the pool ----

TEST_F(SearchTest, TheOtherSamplesOfAStepRefineTheElites) {
  // c0001 scores 1.01x the seed (within the least gain): an elite ranked above the best, c0000.
  // The second sample of the next step refines it, not the best a second time.
  options_.samples = 2;
  options_.budget = 4;
  auto p = provider({"latency=0.99", "latency=1.25", "latency=0.9", "latency=0.95"});
  SearchResult r = run(p);
  auto requests = p.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests.at(0).context["parent_id"], "c0000");
  EXPECT_EQ(requests.at(1).context["parent_id"], "c0000");  // no other elite yet
  EXPECT_EQ(requests.at(2).context["parent_id"], "c0000");  // the best
  EXPECT_EQ(requests.at(3).context["parent_id"], "c0001");  // the elite, not c0002 (cascaded)
  EXPECT_NE(requests.at(3).user.find("one of the elite kernels"), std::string::npos);
  EXPECT_EQ(record(r, "c0004").parent, "c0001");
}

TEST_F(SearchTest, ACandidateTimedAgainstAReplacedIncumbentIsTimedAgain) {
  // Two samples on two workers: both beat the seed; the first is promoted, so the second is
  // timed again against it before it may be promoted in turn.
  options_.samples = 2;
  options_.budget = 2;
  options_.gpus = {std::nullopt, std::nullopt};
  auto p = provider({"latency=0.8", "latency=0.7"});
  SearchResult r = run(p);
  EXPECT_TRUE(record(r, "c0001").promoted);
  EXPECT_TRUE(record(r, "c0002").promoted);
  EXPECT_EQ(r.best_id, "c0002");
  auto calls = pipeline_.calls_of("c0002");
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(id_of(calls[1].baseline), "c0000");
  EXPECT_EQ(id_of(calls[2].baseline), "c0001");
  EXPECT_NEAR(record(r, "c0002").speedup_vs_incumbent, 0.8 / 0.7, 1e-9);
  EXPECT_NEAR(r.best_score, kBaselineLatency / 0.7, 1e-9);
  // Every evaluation of the run has its own seed.
  std::set<std::uint64_t> seeds;
  for (const auto& c : pipeline_.calls()) seeds.insert(c.seed.value());
  EXPECT_EQ(seeds.size(), pipeline_.calls().size());
}

// ---- dropout ----

TEST_F(SearchTest, ADropoutRestartMasksHalfOfTheHistoryAfterPatienceSteps) {
  options_.patience = 2;
  options_.budget = 4;
  auto p = provider({"latency=1.2", "latency=1.3", "latency=1.4", "latency=1.5"});
  SearchResult r = run(p);
  EXPECT_EQ(r.dropouts, 1);
  EXPECT_TRUE(record(r, "c0002").restart.empty());
  EXPECT_NE(record(r, "c0003").restart.find("dropout restart from c0000"), std::string::npos);
  EXPECT_TRUE(record(r, "c0004").restart.empty());
  auto requests = p.requests();
  EXPECT_EQ(feedback_ids(requests.at(1).user), (std::set<std::string>{"c0001"}));
  // c0003's prompt shows one of the two earlier candidates; c0004's that one and c0003.
  std::set<std::string> after = feedback_ids(requests.at(2).user);
  ASSERT_EQ(after.size(), 1u);
  std::set<std::string> next = feedback_ids(requests.at(3).user);
  EXPECT_EQ(next.size(), 2u);
  EXPECT_TRUE(next.count("c0003"));
  EXPECT_TRUE(next.count(*after.begin()));
  EXPECT_EQ(r.summary["dropouts"], 1);
}

TEST_F(SearchTest, APromotionResetsThePatience) {
  options_.patience = 2;
  options_.budget = 4;
  auto p = provider({"latency=1.2", "latency=0.8", "latency=1.2", "latency=1.3"});
  SearchResult r = run(p);
  EXPECT_EQ(r.dropouts, 0);
  for (const auto& c : r.candidates) EXPECT_TRUE(c.restart.empty()) << c.id;
}

// ---- the budget and the stop reasons ----

TEST_F(SearchTest, TheBudgetCountsEveryAnsweredCandidate) {
  // Two samples a step; an answer without code and a duplicate count as candidates. The last step
  // asks for one.
  options_.samples = 2;
  options_.budget = 5;
  auto p = provider({"latency=1.2", "", "latency=1.2", "latency=1.3", "latency=1.4", "x=6"});
  SearchResult r = run(p);
  EXPECT_EQ(r.stop_reason, "budget");
  ASSERT_EQ(r.candidates.size(), 6u);
  EXPECT_EQ(p.requests().size(), 5u);
  EXPECT_EQ(record(r, "c0002").status.name(), "NO_CODE");
  EXPECT_EQ(record(r, "c0003").status.name(), "DUPLICATE");
  EXPECT_NE(record(r, "c0003").reason.find("c0001"), std::string::npos);
  EXPECT_TRUE(pipeline_.calls_of("c0003").empty());
  EXPECT_EQ(r.tokens, 5 * 1100);
  EXPECT_NE(r.summary_text.find("Candidates: 5 of a budget of 5; stopped: budget"),
            std::string::npos);
}

TEST_F(SearchTest, TokenCostAndTimeLimitsStopTheRun) {
  std::vector<std::string> slow(10);
  for (std::size_t i = 0; i < slow.size(); ++i) slow[i] = "latency=1." + std::to_string(i + 2);
  options_.budget = 10;
  {
    options_.max_tokens = 2500;  // 1100 an answer
    auto p = provider(slow);
    SearchResult r = run(p, "tokens");
    EXPECT_EQ(r.stop_reason, "tokens");
    EXPECT_EQ(r.candidates.size(), 4u);
    options_.max_tokens = 0;
  }
  {
    options_.prices =
        json::parse(R"({"providers": {"fake": {"models": {"m": {"input_per_mtok": 1000}}}}})");
    options_.max_cost = 2.5;  // $1 an answer
    auto p = provider(slow);
    SearchResult r = run(p, "cost");
    EXPECT_EQ(r.stop_reason, "cost");
    EXPECT_EQ(r.candidates.size(), 4u);
    EXPECT_NEAR(r.cost, 3.0, 1e-9);
    options_.max_cost = 0;
  }
  {
    // The seed's validation takes 16 s, a cascade stop 3 s.
    options_.max_time = 16 + 3 * 3;
    auto p = provider(slow);
    SearchResult r = run(p, "time");
    EXPECT_EQ(r.stop_reason, "time");
    EXPECT_EQ(r.candidates.size(), 4u);
  }
}

TEST_F(SearchTest, AnExhaustedOrInterruptedProviderStopsTheRun) {
  options_.budget = 10;
  {
    auto p = provider({"latency=1.2", "latency=1.3"});
    p.finite = true;
    SearchResult r = run(p, "exhausted");
    EXPECT_EQ(r.stop_reason, "exhausted");
    EXPECT_EQ(r.candidates.size(), 3u);
  }
  {
    std::atomic<bool> stop{false};
    auto p = provider({"latency=1.2", "latency=1.3", "latency=1.4"});
    p.before = [&](std::size_t i) {
      if (i == 1) stop = true;  // Ctrl-C while the second answer is on its way
    };
    SearchResult r = run(p, "interrupted", &stop);
    EXPECT_EQ(r.stop_reason, "interrupted");
    EXPECT_EQ(r.candidates.size(), 3u);  // the answer in flight is recorded
  }
}

TEST_F(SearchTest, AProviderFailureStopsTheRunWithEveryAnsweredCandidateRecorded) {
  // Three samples; the third request fails (a bad key): the other two are still recorded.
  options_.samples = 3;
  options_.budget = 6;
  auto p = provider({"latency=1.2", "latency=0.8", "latency=1.4"});
  p.before = [](std::size_t i) {
    if (i == 2) throw Error(ExitCode::kEnvironment, "anthropic", "401: invalid x-api-key");
  };
  SearchResult r = run(p);
  EXPECT_EQ(r.stop_reason, "error");
  ASSERT_TRUE(r.fatal);
  EXPECT_NE(r.fatal->message().find("401"), std::string::npos);
  ASSERT_EQ(r.candidates.size(), 3u);
  EXPECT_EQ(record(r, "c0001").stage, "representatives");
  EXPECT_TRUE(record(r, "c0002").promoted);
  EXPECT_EQ(r.best_id, "c0002");
  auto loaded = FileRecorder(options_.work_dir).load_candidates();
  EXPECT_EQ(loaded.size(), 3u);
}

TEST_F(SearchTest, AnEvaluationThatCannotRunStopsTheRun) {
  options_.budget = 5;
  pipeline_.before = [](const EvaluationRequest& q) {
    if (id_of(q.solution) == "c0002") throw Error(ExitCode::kEnvironment, "", "no CUDA device");
  };
  auto p = provider({"latency=1.2", "latency=1.3", "latency=1.4"});
  SearchResult r = run(p);
  EXPECT_EQ(r.stop_reason, "error");
  ASSERT_EQ(r.candidates.size(), 3u);
  EXPECT_EQ(record(r, "c0002").status.name(), "NOT_EVALUATED");
  EXPECT_NE(record(r, "c0002").reason.find("no CUDA device"), std::string::npos);
}

TEST_F(SearchTest, ProfilingStopsAfterItsFirstEnvironmentFailure) {
  pipeline_.diagnosis_fails = true;
  options_.budget = 2;
  auto p = provider({"latency=0.8", "latency=0.6"});
  SearchResult r = run(p);
  EXPECT_EQ(r.best_id, "c0002");
  EXPECT_EQ(pipeline_.diagnosed().size(), 1u);  // the seed's, then no more
  EXPECT_TRUE(record(r, "c0002").diagnosis.empty());
}

// ---- resume ----

TEST_F(SearchTest, ResumeCarriesOnFromTheRunFolder) {
  auto p = provider({"latency=0.8", "latency=1.2", "latency=0.7", "latency=1.2 x=2"});
  options_.budget = 2;
  SearchResult first = run(p);
  ASSERT_EQ(first.best_id, "c0001");
  const std::size_t before = pipeline_.calls().size();
  options_.budget = 4;
  SearchResult second = run(p, "run", nullptr, /*resume=*/true);
  EXPECT_EQ(second.stop_reason, "budget");
  ASSERT_EQ(second.candidates.size(), 5u);
  EXPECT_EQ(second.candidates[3].id, "c0003");
  // The seed is not evaluated again; the next candidate is timed against the restored best.
  auto calls = pipeline_.calls();
  for (std::size_t i = before; i < calls.size(); ++i) EXPECT_NE(id_of(calls[i].solution), "c0000");
  EXPECT_EQ(id_of(pipeline_.calls_of("c0003").front().baseline), "c0001");
  EXPECT_EQ(second.best_id, "c0003");
  EXPECT_EQ(second.tokens, 4 * 1100);  // the earlier session's usage counts
  EXPECT_EQ(FileRecorder(options_.work_dir).load_candidates().size(), 5u);
}

TEST_F(SearchTest, AResumedRunDecidesAsTheUninterruptedRunWould) {
  // Patience 2 over slow candidates: a dropout restart at step 3. Interrupted after step 3, the
  // resumed run must not restart again at step 4 (two stalled steps before the restart are not
  // stalled steps after it), must mask the same history, draw the same evaluation seeds and
  // refine the same elites.
  options_.patience = 2;
  options_.samples = 1;
  std::vector<std::string> script = {"latency=1.2", "latency=0.99", "latency=1.3", "latency=0.8",
                                     "latency=1.4", "latency=1.5",  "latency=1.6"};
  options_.budget = 7;
  auto whole = provider(script);
  SearchResult uninterrupted = run(whole, "whole");
  auto seeds_of = [&](const std::string& id) {
    std::vector<std::uint64_t> seeds;
    for (const auto& c : pipeline_.calls_of(id)) seeds.push_back(c.seed.value());
    return seeds;
  };
  std::map<std::string, std::vector<std::uint64_t>> whole_seeds;
  for (const auto& c : uninterrupted.candidates) {
    whole_seeds[c.id] = seeds_of(c.id);
  }
  ASSERT_EQ(uninterrupted.dropouts, 2);  // before c0003 and before c0007

  // The same run in two sessions, through a pipeline of its own.
  FakeEvaluator fresh(op_, clock_);
  auto split = provider(script);
  options_.budget = 3;
  {
    options_.work_dir = dir_.path() / "split";
    FileRecorder recorder(options_.work_dir);
    recorder.begin(json::object());
    Search(options_, fresh, split, recorder, nullptr, clock_).run();
  }
  options_.budget = 7;
  SearchResult resumed;
  {
    FileRecorder recorder(options_.work_dir);
    Search search(options_, fresh, split, recorder, nullptr, clock_);
    search.resume(recorder.load_candidates());
    resumed = search.run();
  }
  ASSERT_EQ(resumed.candidates.size(), uninterrupted.candidates.size());
  EXPECT_EQ(resumed.dropouts, uninterrupted.dropouts);
  auto whole_requests = whole.requests(), split_requests = split.requests();
  for (std::size_t i = 0; i < uninterrupted.candidates.size(); ++i) {
    const auto& a = uninterrupted.candidates[i];
    const auto& b = resumed.candidates[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.status, b.status) << a.id;
    EXPECT_EQ(a.promoted, b.promoted) << a.id;
    EXPECT_EQ(a.parent, b.parent) << a.id;
    EXPECT_EQ(a.restart, b.restart) << a.id;
    EXPECT_NEAR(a.score, b.score, 1e-12) << a.id;
    if (i == 0) continue;
    std::vector<std::uint64_t> seeds;
    for (const auto& c : fresh.calls_of(b.id)) seeds.push_back(c.seed.value());
    EXPECT_EQ(seeds, whole_seeds[a.id]) << a.id;
    EXPECT_EQ(feedback_ids(whole_requests.at(i - 1).user),
              feedback_ids(split_requests.at(i - 1).user))
        << a.id;
    EXPECT_EQ(whole_requests.at(i - 1).context["parent_id"],
              split_requests.at(i - 1).context["parent_id"])
        << a.id;
  }
  EXPECT_EQ(resumed.best_id, uninterrupted.best_id);
}

// ---- the real pipeline behind the interface ----

// ---- in-model validation (run --model) ----

// The run's model: Llama's decode layer, 4 layers a model-check, ranked by `objective`.
void validate_in_llama(SearchOptions& o,
                       controller::Objective objective = controller::Objective::kKernel) {
  o.in_model.file = testing::source_dir() / "models" / "llama-3.1-8b.json";
  o.in_model.name = "llama-3.1-8b";
  o.in_model.phase = "decode";
  o.in_model.layers = 4;
  o.in_model.objective = objective;
}

// A candidate its kernel verdict would promote is promoted only when model-check passes with it;
// only those candidates (and the seeds' layer, once) get a model-check; the record and the summary
// say the model verdict.
TEST_F(SearchTest, OnlyCandidatesThatPassModelCheckArePromoted) {
  validate_in_llama(options_);
  options_.budget = 3;
  // c0001: faster, but wrong in the model; c0002: slower (stopped by the cascade, never
  // model-checked); c0003: faster and right in the model.
  auto p = provider({"latency=0.8 model=fail", "latency=1.2", "latency=0.8 layer=1.004"});
  SearchResult r = run(p);
  EXPECT_EQ(pipeline_.model_checked(), (std::vector<std::string>{"seeds", "c0001", "c0003"}));
  const auto& failed = record(r, "c0001");
  EXPECT_FALSE(failed.promoted);
  EXPECT_EQ(failed.status.name(), "PASSED");  // its own kernel verdict
  ASSERT_TRUE(failed.model_check.is_object());
  EXPECT_FALSE(failed.model_check["passed"].get<bool>());
  EXPECT_EQ(failed.model_check["status"], "INCORRECT_NUMERICAL");
  EXPECT_NE(failed.note.find("not promoted: scores 1.250x the incumbent c0000"), std::string::npos)
      << failed.note;
  EXPECT_NE(failed.note.find("fails model-check (llama-3.1-8b decode, 4 layers): decode batch=16"),
            std::string::npos)
      << failed.note;
  EXPECT_TRUE(record(r, "c0002").model_check.is_null());
  const auto& promoted = record(r, "c0003");
  EXPECT_TRUE(promoted.promoted);
  EXPECT_EQ(promoted.parent, "c0000");  // not the failed c0001: it is no elite
  EXPECT_NE(promoted.note.find("passes model-check (llama-3.1-8b decode, 4 layers), layer "
                               "speedup 1.0040x"),
            std::string::npos)
      << promoted.note;
  EXPECT_DOUBLE_EQ(promoted.model_check["layer_speedup"].get<double>(), 1.004);
  EXPECT_EQ(r.best_id, "c0003");
  EXPECT_EQ(r.model_checks, 3);
  EXPECT_EQ(r.model_failures, 1);
  // The seeds' layer: its speedup is 1 by definition, its share kept for the prompts.
  const auto& seed = record(r, "c0000");
  EXPECT_DOUBLE_EQ(seed.model_check["layer_speedup"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(seed.model_check["share"].get<double>(), 0.012);
  // The whole model verdict beside the record; the model's column and line in the summary.
  EXPECT_TRUE(
      std::filesystem::exists(options_.work_dir / "candidates" / "c0001" / "model_check.json"));
  EXPECT_NE(r.summary_text.find("| score | model | tokens |"), std::string::npos) << r.summary_text;
  EXPECT_NE(r.summary_text.find("| INCORRECT_NUMERICAL |"), std::string::npos) << r.summary_text;
  EXPECT_NE(r.summary_text.find("| ok 1.0040x |"), std::string::npos) << r.summary_text;
  EXPECT_NE(r.summary_text.find("In the model (llama-3.1-8b decode, 4 layers, objective kernel): "
                                "the operator takes 1.2% of the seeds' layer time; the best "
                                "gives the layer 1.0040x over the seeds'; 3 model-checks, 1 "
                                "failed"),
            std::string::npos)
      << r.summary_text;
  EXPECT_DOUBLE_EQ(r.summary["in_model"]["best_layer_speedup"].get<double>(), 1.004);
  EXPECT_EQ(r.summary["in_model"]["objective"], "kernel");
}

TEST_F(SearchTest, WithoutAModelNothingIsModelChecked) {
  options_.budget = 1;
  auto p = provider({"latency=0.8"});
  SearchResult r = run(p);
  EXPECT_TRUE(pipeline_.model_checked().empty());
  EXPECT_TRUE(record(r, "c0001").promoted);
  EXPECT_TRUE(r.summary["in_model"].is_null());
  EXPECT_EQ(r.summary_text.find("| model |"), std::string::npos);
  EXPECT_EQ(p.requests().at(0).user.find("# In the model"), std::string::npos);
}

// The prompts get the operator's share of the layer time, from the seeds' layer timed once.
TEST_F(SearchTest, ThePromptsGiveTheOperatorsShareOfTheLayerTime) {
  validate_in_llama(options_);
  auto p = provider({"latency=0.9"});
  run(p);
  const std::string prompt = p.requests().at(0).user;
  EXPECT_NE(prompt.find("# In the model\nThis operator runs as node attn_norm of llama-3.1-8b's "
                        "decode layer."),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("it takes 1.2% of the layer time (0.6% to 2.4% by shape), so making it "
                        "2x faster saves about 0.6% of the layer"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("promoted only if 4 layers with it substituted still match"),
            std::string::npos)
      << prompt;
  EXPECT_EQ(prompt.find("--objective layer"), std::string::npos) << prompt;
}

// --objective layer: a candidate its kernel verdict would promote must also beat the best's layer
// speedup by more than the combined noise of the two model-checks.
TEST_F(SearchTest, WithTheLayerObjectivePromotionNeedsALayerSpeedup) {
  validate_in_llama(options_, controller::Objective::kLayer);
  options_.budget = 2;
  // Both beat the seed's kernel by 25%; c0001 gains 0.1% in the layer, within the noise (0.1% of
  // each check: 0.14%); c0002 gains 1%.
  auto p = provider({"latency=0.8 layer=1.001", "latency=0.8 layer=1.01"});
  SearchResult r = run(p);
  const auto& within = record(r, "c0001");
  EXPECT_FALSE(within.promoted);
  EXPECT_NE(within.note.find("passes model-check, but its layer speedup 1.0010x does not beat "
                             "the best c0000's 1.0000x by more than the noise (0.14%)"),
            std::string::npos)
      << within.note;
  EXPECT_TRUE(record(r, "c0002").promoted);
  EXPECT_EQ(r.best_id, "c0002");
  const std::string prompt = p.requests().at(1).user;
  EXPECT_NE(prompt.find("ranked by the layer speedup over the seeds' layer (--objective layer); "
                        "the best so far, c0000, gives 1.0000x"),
            std::string::npos)
      << prompt;
  EXPECT_EQ(r.summary["in_model"]["objective"], "layer");
}

TEST_F(SearchTest, ASeedsLayerThatFailsModelCheckCannotStartARun) {
  validate_in_llama(options_);
  pipeline_.seeds_fail_model = true;
  auto p = provider({});
  try {
    run(p);
    ADD_FAILURE() << "the run started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kFailed);
    EXPECT_NE(e.message().find("the seed cannot start a run: the seeds' layer fails model-check "
                               "(llama-3.1-8b decode, 4 layers)"),
              std::string::npos)
        << e.message();
  }
}

// A resumed run compares layer speedups with the best's as the first session left it, and its
// prompts still show the share.
TEST_F(SearchTest, AResumedRunKeepsTheModelVerdicts) {
  validate_in_llama(options_, controller::Objective::kLayer);
  options_.budget = 1;
  auto first = provider({"latency=0.8 layer=1.02"});
  SearchResult r = run(first, "resumed");
  ASSERT_EQ(r.best_id, "c0001");
  options_.budget = 2;
  // Faster still as a kernel, but its layer gains less than the best c0001's.
  auto second = provider({"", "latency=0.6 layer=1.015"});
  r = run(second, "resumed", nullptr, true);
  EXPECT_FALSE(record(r, "c0002").promoted);
  EXPECT_NE(record(r, "c0002").note.find("does not beat the best c0001's 1.0200x"),
            std::string::npos)
      << record(r, "c0002").note;
  EXPECT_EQ(r.best_id, "c0001");
  // The seeds' layer is not checked again.
  EXPECT_EQ(pipeline_.model_checked(), (std::vector<std::string>{"seeds", "c0001", "c0002"}));
  EXPECT_EQ(r.model_checks, 3);
  EXPECT_NE(second.requests().at(1).user.find("1.2% of the layer time"), std::string::npos);
}

TEST(StageEvaluator, AMalformedCandidateIsARejectedVerdictNotAnError) {
  testing::TempDir dir;
  const auto file = dir.path() / "broken.cu";
  write_file_atomic(file.string(),
                    "/* kharness\n{\"definition\": \"rmsnorm_h4096\", \"launches\": oops}\n*/\n");
  controller::StageSettings settings;
  settings.request = controller::run_request();
  settings.request.target.operator_name = kOperator;
  settings.request.archive.dir = dir.path() / "archive";
  pipeline::Evaluator pipeline(settings.request);
  controller::StageEvaluator evaluator(settings, pipeline);
  EvaluationRequest q;
  q.solution = file;
  q.mode = Mode::kCompile;
  Verdict v = evaluator.evaluate(q).verdict;
  EXPECT_EQ(v.status, Status::kRejected);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(v.failure->kind, "bad_input");
  EXPECT_EQ(v.source, file.string());
}

// The run's verdict cache: an evaluation is keyed; once the recorder has archived the candidate
// with that key (to_archive_record), the same kernel evaluated again (a second run, another file
// and seed) is answered from the archive.
TEST(StageEvaluator, AnArchivedCandidateAnswersTheSameKernelAgain) {
  testing::TempDir dir;
  const std::string seed =
      read_file((testing::source_dir() / "operators" / kOperator / "seed.cu").string());
  write_file_atomic((dir.path() / "c0001.cu").string(), seed);
  std::filesystem::create_directories(dir.path() / "second");
  write_file_atomic((dir.path() / "second" / "c0001.cu").string(), seed);  // another run's file
  controller::StageSettings settings;
  settings.request = controller::run_request();
  settings.request.target.operator_name = kOperator;
  settings.request.target.arch = "sm_90a";
  settings.request.archive.dir = dir.path() / "archive";
  pipeline::Evaluator pipeline(settings.request);
  controller::StageEvaluator evaluator(settings, pipeline);
  EvaluationRequest q;
  q.solution = dir.path() / "c0001.cu";
  q.mode = Mode::kCompile;
  q.seed = 11;
  controller::Evaluated first = evaluator.evaluate(q);
  ASSERT_EQ(first.verdict.status, Status::kPassed) << to_json(first.verdict).dump();
  ASSERT_FALSE(first.cache_key.empty());
  EXPECT_TRUE(first.cached_from.empty());
  // The pipeline archived nothing (the recorder does): still a miss.
  EXPECT_TRUE(evaluator.evaluate(q).cached_from.empty());

  archive::Archive store(dir.path() / "archive");
  const std::string run = store.begin_run({{"command", "run"}});
  controller::CandidateRecord r;
  r.id = "c0001";
  r.source = seed;
  r.status = {controller::Outcome::kCompiled};
  r.verdict = to_json(first.verdict);
  r.cache_key = first.cache_key;
  const std::string id = store.add_candidate(run, controller::to_archive_record(r, kOperator, ""));

  q.solution = dir.path() / "second" / "c0001.cu";
  q.seed = 12;  // each candidate of a run has its own seed: a verdict under any stands for it
  controller::Evaluated again = evaluator.evaluate(q);
  EXPECT_EQ(again.cached_from, id);
  EXPECT_EQ(again.cache_key, first.cache_key);
  EXPECT_EQ(again.verdict.status, Status::kPassed);
  EXPECT_EQ(again.verdict.source, q.solution.string());
}

// A candidate timed against its incumbent is archived with the run's estimate of its speedup over
// the operator's baseline beside its verdict (to_archive_record); it must still answer the same
// kernel again, with the verdict as it was timed (an H200 run's second pass once missed exactly
// these: PASSED candidates timed against the incumbent).
TEST(StageEvaluator, AnArchivedCandidateTimedAgainstTheIncumbentAnswersAgain) {
  testing::TempDir dir;
  const std::string seed =
      read_file((testing::source_dir() / "operators" / kOperator / "seed.cu").string());
  write_file_atomic((dir.path() / "c0001.cu").string(), seed);
  controller::StageSettings settings;
  settings.request = controller::run_request();
  settings.request.target.operator_name = kOperator;
  settings.request.target.arch = "sm_90a";
  settings.request.archive.dir = dir.path() / "archive";
  pipeline::Evaluator pipeline(settings.request);
  controller::StageEvaluator evaluator(settings, pipeline);
  EvaluationRequest q;
  q.solution = dir.path() / "c0001.cu";
  q.mode = Mode::kCompile;
  controller::Evaluated first = evaluator.evaluate(q);
  ASSERT_FALSE(first.cache_key.empty());
  Verdict timed = first.verdict;
  timed.score = score_from_json({{"mean_speedup", 1.25}, {"geomean_speedup", 1.2}});
  archive::Archive store(dir.path() / "archive");
  const std::string run = store.begin_run({{"command", "run"}});
  controller::CandidateRecord r;
  r.id = "c0001";
  r.source = seed;
  r.status = controller::CandidateStatus::of(Status::kPassed);
  r.verdict = to_json(timed);
  r.cache_key = first.cache_key;
  r.score = 2.5;
  r.speedup_vs_incumbent = 1.25;
  archive::CandidateRecord a = controller::to_archive_record(r, kOperator, "");
  ASSERT_TRUE(a.verdict);
  const std::string id = store.add_candidate(run, a);
  controller::Evaluated again = evaluator.evaluate(q);
  EXPECT_EQ(again.cache_key, first.cache_key);
  EXPECT_EQ(again.cached_from, id);
  EXPECT_EQ(to_json(again.verdict.score), to_json(timed.score));
}

}  // namespace
}  // namespace kharness
