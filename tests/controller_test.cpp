// The controller's pure parts: answers to solutions (and failed candidates), the bounded prompt,
// skills and the shape cascade's representatives.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "controller/answer.hpp"
#include "controller/archive_recorder.hpp"
#include "controller/model_gate.hpp"
#include "controller/prompt.hpp"
#include "controller/search.hpp"
#include "kharness/model.hpp"
#include "kharness/model_check.hpp"
#include "kharness/operators.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using controller::extract_solution;

std::string seed_text() {
  return read_file((testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string());
}

llm::Answer answer(const std::string& text, bool truncated = false) {
  llm::Answer a;
  a.text = text;
  a.truncated = truncated;
  a.stop_reason = truncated ? "max_tokens" : "end_turn";
  return a;
}

TEST(Answer, TakesTheCudaBlockWithThePlan) {
  std::string text = "Idea: fewer threads.\n\n```cuda\n" + seed_text() + "```\nDone.\n";
  auto code = extract_solution(answer(text));
  ASSERT_TRUE(code.ok) << code.reason;
  EXPECT_EQ(code.source, seed_text());
}

TEST(Answer, IgnoresSnippetsWithoutAPlanBesideTheSolution) {
  std::string text =
      "Change this:\n```cuda\nsum += x;\n```\nFull file:\n```cuda\n" + seed_text() + "```\n";
  auto code = extract_solution(answer(text));
  ASSERT_TRUE(code.ok) << code.reason;
}

TEST(Answer, NoCode) {
  auto code = extract_solution(answer("I would not change anything."));
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "NO_CODE");
  EXPECT_EQ(extract_solution(answer("")).status.name(), "NO_CODE");
}

TEST(Answer, TwoConflictingBlocks) {
  std::string other = seed_text();
  other += "// a different kernel\n";
  std::string text = "```cuda\n" + seed_text() + "```\nor\n```cuda\n" + other + "```\n";
  auto code = extract_solution(answer(text));
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "CONFLICTING_CODE");
  // The same block twice is no conflict.
  std::string twice = "```cuda\n" + seed_text() + "```\nagain\n```cuda\n" + seed_text() + "```\n";
  EXPECT_TRUE(extract_solution(answer(twice)).ok);
}

TEST(Answer, BrokenPlan) {
  std::string broken = seed_text();
  broken.replace(broken.find("\"launches\""), 10, "\"launches\" oops");
  auto code = extract_solution(answer("```cuda\n" + broken + "```\n"));
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "BAD_PLAN");
  EXPECT_FALSE(code.reason.empty());
  auto noplan = extract_solution(answer("```cuda\n__global__ void k() {}\n```\n"));
  EXPECT_FALSE(noplan.ok);
  EXPECT_EQ(noplan.status.name(), "BAD_PLAN");
}

TEST(Answer, TruncatedBlock) {
  std::string text = "```cuda\n" + seed_text().substr(0, 900);
  auto code = extract_solution(answer(text, true));
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "TRUNCATED");
  // Not closed even without the output limit: still a truncated block.
  EXPECT_EQ(extract_solution(answer(text, false)).status.name(), "TRUNCATED");
  EXPECT_EQ(extract_solution(answer("Let me think", true)).status.name(), "TRUNCATED");
}

Operator rmsnorm() { return OperatorRegistry::from_environment({}).load("rmsnorm_h4096"); }

TEST(Prompt, StaysWithinItsBoundWithLongCompileLogs) {
  Operator op = rmsnorm();
  controller::PromptParts parts;
  parts.task = controller::render_task(op, "sm_90a");
  parts.best = controller::render_best("c0000", seed_text(), nullptr);
  Verdict v;
  v.status = Status::kCompileError;
  v.compile["diagnostics"] = nlohmann::json::array();
  for (int i = 0; i < 500; ++i) {
    v.compile["diagnostics"].push_back({{"severity", "error"},
                                        {"file", "candidate.cu"},
                                        {"line", i},
                                        {"message", std::string(300, 'e')}});
  }
  v.failure = Failure{"compile_error", std::string(20000, 'x'), nlohmann::json::object()};
  for (int i = 0; i < 20; ++i) {
    parts.feedback.push_back(controller::render_feedback("c" + std::to_string(i), "COMPILE_ERROR",
                                                         std::string(5000, 'r'), &v, ""));
  }
  parts.diagnosis = std::string(30000, 'd');
  parts.hints = {std::string(20000, 'h')};
  parts.skills = controller::load_skills(testing::source_dir() / "skills", op, "sm_90a");
  ASSERT_FALSE(parts.skills.empty());
  for (std::size_t bound : {2000u, 4000u, 12000u}) {
    controller::Prompt p = controller::build_prompt(parts, bound);
    EXPECT_LE(p.estimated_tokens, bound) << bound;
    EXPECT_LE(p.system.size() + p.user.size(), bound * controller::kCharsPerToken);
    EXPECT_FALSE(p.cuts.empty());
    EXPECT_NE(p.user.find("did not fit the prompt bound"), std::string::npos)
        << "a cut must be visible in the prompt";
    EXPECT_NE(p.user.find("# Task: rmsnorm_h4096"), std::string::npos);
  }
  // Compile errors are trimmed to the first few.
  std::string fb = controller::render_feedback("c1", "COMPILE_ERROR", "", &v, "");
  EXPECT_NE(fb.find("more compile errors not shown"), std::string::npos);
  EXPECT_LT(fb.size(), 3000u);
}

TEST(Prompt, EverythingFitsWhenSmall) {
  Operator op = rmsnorm();
  controller::PromptParts parts;
  parts.task = controller::render_task(op, "sm_90a");
  parts.best = controller::render_best("c0000", seed_text(), nullptr);
  parts.hints = {"use 128 threads per row"};
  parts.diagnosis = "memory-bound: DRAM throughput 62% of peak";
  parts.skills = controller::load_skills(testing::source_dir() / "skills", op, "sm_90a");
  controller::Prompt p = controller::build_prompt(parts, 12000);
  EXPECT_TRUE(p.cuts.empty()) << join(p.cuts, "\n");
  for (const char* want : {"hidden_states", "bfloat16", "Tolerance", "use 128 threads per row",
                           "memory-bound", "rmsnorm.md", "/* kharness", "rmsnorm_kernel"}) {
    EXPECT_NE(p.user.find(want), std::string::npos) << want;
  }
  EXPECT_NE(p.system.find("Device code only"), std::string::npos);
}

// With `run --model`, the operator in the model: its share of the seeds' layer time and what a
// promotion needs there; the paragraph survives a tight bound whole, as the instructions do.
TEST(Prompt, TheModelParagraphGivesTheOperatorsShareOfTheLayer) {
  controller::ModelGate gate;
  gate.name = "llama-3.1-8b";
  gate.phase = "prefill";
  gate.layers = 2;
  controller::ModelVerdict seeds;
  seeds.nodes = {"qkv"};
  seeds.share = 0.215;
  seeds.share_min = 0.18;
  seeds.share_max = 0.25;
  std::string text = controller::render_model(gate, seeds, "c0000", 1.0);
  EXPECT_NE(text.find("This operator runs as node qkv of llama-3.1-8b's prefill layer. With the "
                      "shipped seeds it takes 21.5% of the layer time (18.0% to 25.0% by shape), "
                      "so making it 2x faster saves about 10.8% of the layer"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("promoted only if 2 layers with it substituted"), std::string::npos) << text;
  EXPECT_EQ(text.find("--objective layer"), std::string::npos) << text;
  gate.objective = controller::Objective::kLayer;
  text = controller::render_model(gate, seeds, "c0007", 1.0123);
  EXPECT_NE(text.find("the best so far, c0007, gives 1.0123x"), std::string::npos) << text;

  Operator op = rmsnorm();
  controller::PromptParts parts;
  parts.task = controller::render_task(op, "sm_90a");
  parts.best = controller::render_best("c0000", seed_text(), nullptr);
  parts.diagnosis = std::string(30000, 'd');
  parts.model = text;
  for (std::size_t bound : {4000u, 12000u}) {
    controller::Prompt p = controller::build_prompt(parts, bound);
    EXPECT_LE(p.estimated_tokens, bound) << bound;
    EXPECT_NE(p.user.find(text), std::string::npos) << bound;
    // After the task, before the best kernel.
    EXPECT_LT(p.user.find("# Task: rmsnorm_h4096"), p.user.find("# In the model"));
  }
}

// What the run keeps of a model-check: the operator's share summed over its nodes and averaged
// over the timed shapes, the mean layer speedup and noise, the first failure's reason.
TEST(ModelGate, AModelCheckIsSummarizedForTheRunsOperator) {
  model::CheckResult r;
  r.model = "m";
  r.phase = "decode";
  r.layers = 2;
  r.passed = true;
  auto shape = [](double speedup, double norm_a, double norm_b) {
    model::ShapeResult s;
    s.passed = true;
    model::LayerTiming t;
    t.speedup = speedup;
    t.noise = 0.002;
    t.nodes = {{"norm_a", "rmsnorm_h4096", false, 0, 0, 1, norm_a, 0},
               {"proj", "gemm_n4096_k4096", false, 0, 0, 1, 0.9, 0},
               {"norm_b", "rmsnorm_h4096", false, 0, 0, 1, norm_b, 0}};
    s.timing = t;
    return s;
  };
  r.shapes = {shape(1.01, 0.02, 0.03), shape(1.03, 0.01, 0.02)};
  controller::ModelVerdict v = controller::model_verdict(r, "rmsnorm_h4096");
  EXPECT_TRUE(v.passed);
  EXPECT_EQ(v.status, "PASSED");
  EXPECT_EQ(v.nodes, (std::vector<std::string>{"norm_a", "norm_b"}));
  ASSERT_TRUE(v.share.has_value());
  EXPECT_NEAR(*v.share, 0.04, 1e-12);
  EXPECT_NEAR(v.share_min, 0.03, 1e-12);
  EXPECT_NEAR(v.share_max, 0.05, 1e-12);
  ASSERT_TRUE(v.layer_speedup.has_value());
  EXPECT_NEAR(*v.layer_speedup, 1.02, 1e-12);
  EXPECT_NEAR(v.layer_noise, 0.002, 1e-12);
  EXPECT_EQ(v.verdict["model"], "m");
  // Its JSON round-trips (the run's record keeps it; the whole verdict goes beside it).
  controller::ModelVerdict back =
      controller::model_verdict_from_json(controller::to_json(v), "record.json");
  EXPECT_EQ(controller::to_json(back), controller::to_json(v));
  EXPECT_TRUE(back.verdict.is_null());

  // A failed one: the first failing shape's reason, and no speedup where nothing was timed.
  r.passed = false;
  r.status = Status::kIncorrectNumerical;
  r.shapes = {shape(1.0, 0.02, 0.02)};
  r.shapes[0].timing.reset();
  r.shapes[0].passed = false;
  r.shapes[0].label = "decode batch=1 kv=1024";
  r.shapes[0].reason = "hidden state after layer 1: bias +0.004";
  v = controller::model_verdict(r, "rmsnorm_h4096");
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.status, "INCORRECT_NUMERICAL");
  EXPECT_EQ(v.reason, "decode batch=1 kv=1024: hidden state after layer 1: bias +0.004");
  EXPECT_FALSE(v.layer_speedup.has_value());
  EXPECT_FALSE(v.share.has_value());
}

TEST(ModelGate, TheOperatorMustBeANodeOfTheLayer) {
  const model::Model m =
      model::load_model(model::find_model("llama-3.1-8b"), OperatorRegistry::from_environment({}));
  EXPECT_EQ(controller::model_nodes_of(m, "decode", "rmsnorm_h4096"),
            std::vector<std::string>{"attn_norm"});
  EXPECT_EQ(controller::model_nodes_of(m, "prefill", "gqa_paged_prefill_causal_h32_kv8_d128_ps1"),
            std::vector<std::string>{"attn"});
  testing::expect_input_error([&] { controller::model_nodes_of(m, "decode", "rmsnorm_h2048"); },
                              "--operator",
                              "rmsnorm_h2048 is no node of llama-3.1-8b's decode layer (its "
                              "operators: rmsnorm_h4096, gemm_n6144_k4096");
  testing::expect_input_error(
      [&] { controller::model_nodes_of(m, "decode", "gqa_paged_prefill_causal_h32_kv8_d128_ps1"); },
      "--operator", "is no node of llama-3.1-8b's decode layer");
  testing::expect_input_error([&] { controller::model_nodes_of(m, "train", "rmsnorm_h4096"); },
                              "--phase", "llama-3.1-8b has no phase 'train'");
  EXPECT_EQ(controller::parse_objective("layer"), controller::Objective::kLayer);
  EXPECT_EQ(controller::parse_objective("kernel"), controller::Objective::kKernel);
  EXPECT_FALSE(controller::parse_objective("Layer").has_value());
}

// A model can only use shape dispatch if the prompt teaches it: the plan reference of the task
// shows "variants" with its rules, and the general skills layer explains when and how to split.
TEST(Prompt, TeachesShapeDispatch) {
  Operator op = rmsnorm();
  const std::string task = controller::render_task(op, "sm_90a");
  for (const char* want : {"\"variants\"", "\"when\": \"M <= 64\"", "the last has no \"when\"",
                           "first whose \"when\" holds runs", "extern \"C\""}) {
    EXPECT_NE(task.find(want), std::string::npos) << want << "\n" << task;
  }
  controller::PromptParts parts;
  parts.task = task;
  parts.best = controller::render_best("c0000", seed_text(), nullptr);
  parts.skills = controller::load_skills(testing::source_dir() / "skills", op, "sm_90a");
  controller::Prompt p = controller::build_prompt(parts, 12000);
  EXPECT_NE(p.user.find("Dispatch by shape (plan variants)"), std::string::npos);
  EXPECT_NE(p.user.find("general.md"), std::string::npos);
  // The GEMM skills say where their workloads split.
  Operator gemm = OperatorRegistry::from_environment({}).load("gemm_fp8");
  bool gemm_dispatch = false;
  for (const auto& s : controller::load_skills(testing::source_dir() / "skills", gemm, "sm_90a"))
    gemm_dispatch = gemm_dispatch ||
                    (s.file == "gemm_fp8.md" && s.text.find("\"variants\"") != std::string::npos);
  EXPECT_TRUE(gemm_dispatch);
  // A dispatching kernel's results table names the variant per workload.
  Verdict v;
  WorkloadVerdict w;
  w.uuid = "abcdef0123";
  w.axes = {{"batch_size", 4}};
  w.variant = "0 (batch_size <= 8)";
  w.timing.candidate = ContenderTiming{};
  w.timing.candidate->latency = 2e-6;
  v.workloads.push_back(w);
  const std::string best = controller::render_best("c0001", "// k", &v);
  EXPECT_NE(best.find("| variant |"), std::string::npos) << best;
  EXPECT_NE(best.find("| 0 (batch_size <= 8) |"), std::string::npos) << best;
}

TEST(Prompt, SkillsMatchTheOperatorAndRotateOnDropout) {
  Operator op = rmsnorm();
  auto skills = controller::load_skills(testing::source_dir() / "skills", op, "sm_90a");
  bool operator_seen = false;
  for (const auto& s : skills) {
    EXPECT_TRUE(s.file == "rmsnorm.md" || s.file == "profiling.md" || s.file == "general.md")
        << s.file << ": only the operator's own skills and the general layers apply";
    if (s.file == "rmsnorm.md") operator_seen = true;
    if (s.layer == "profiling") EXPECT_TRUE(operator_seen) << "layers in order";
  }
  EXPECT_TRUE(operator_seen);
  auto a = controller::order_skills(skills, "", 0);
  auto b = controller::order_skills(skills, "", 1);
  ASSERT_GT(a.size(), 1u);
  EXPECT_NE(a[0].heading, b[0].heading) << "a dropout restart leads with another direction";
}

// Every skills file is named after a family (a page-size variant shares its family's), an op_type
// or an operator, so that some prompt loads it: mla_paged_decode.md serves both MLA decode
// families, dsa_paged.md the two DSA definitions (op_type dsa_paged).
TEST(Prompt, SkillsOfTheMlaDecodeAndDsaFamiliesLoad) {
  auto files_for = [](const Operator& op) {
    std::set<std::string> files;
    for (const auto& s : controller::load_skills(testing::source_dir() / "skills", op, "sm_90a"))
      files.insert(s.file);
    return files;
  };
  const OperatorRegistry registry = OperatorRegistry::from_environment({});
  EXPECT_TRUE(files_for(registry.load("mla_paged_decode_h16_ckv512_kpe64_ps1"))
                  .count("mla_paged_decode.md"));
  Operator ps64;
  ps64.definition.name = "mla_paged_decode_h16_ckv512_kpe64_ps64";
  ps64.definition.op_type = "mla_paged";
  ps64.definition.kharness.family = "mla_paged_decode_ps64";
  EXPECT_TRUE(files_for(ps64).count("mla_paged_decode.md"));
  for (const char* dsa : {"dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
                          "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"}) {
    EXPECT_TRUE(files_for(registry.load(dsa)).count("dsa_paged.md")) << dsa;
  }
}

// A run times each candidate against its incumbent: the archive keeps that verdict as measured
// and ranks by the run's estimate of the speedup over the operator's baseline, kept beside it.
TEST(ArchiveRecord, VerdictAsMeasuredAndTheOperatorSpeedupEstimated) {
  Verdict v;
  v.status = Status::kPassed;
  v.solution = "c0001";
  v.definition = "rmsnorm_h4096";
  v.score = score_from_json(
      {{"mean_speedup", 1.004}, {"geomean_speedup", 1.002}, {"speedups_over", "c0000.cu"}});
  controller::CandidateRecord c;
  c.id = "c0001";
  c.verdict = to_json(v);
  c.score = 3.258;
  c.speedup_vs_incumbent = 1.004;
  archive::CandidateRecord a = controller::to_archive_record(c, "rmsnorm_h4096", "");
  ASSERT_TRUE(a.verdict);
  EXPECT_EQ(to_json(a.verdict->score), to_json(v.score));
  ASSERT_TRUE(a.operator_speedup);
  EXPECT_TRUE(a.operator_speedup->estimated);
  EXPECT_DOUBLE_EQ(a.operator_speedup->mean, 3.258);
  EXPECT_NEAR(a.operator_speedup->geomean, 1.002 * 3.258 / 1.004, 1e-12);
  // The seed (no incumbent) has no estimate; its measured figure comes from the pipeline's record.
  controller::CandidateRecord seed = c;
  seed.speedup_vs_incumbent = 0.0;
  EXPECT_FALSE(controller::to_archive_record(seed, "rmsnorm_h4096", "").operator_speedup);
  archive::CandidateRecord measured;
  measured.operator_speedup = archive::OperatorSpeedup{1.004, 1.002, false};
  seed.evaluated = std::make_shared<const archive::CandidateRecord>(measured);
  archive::CandidateRecord b = controller::to_archive_record(seed, "rmsnorm_h4096", "");
  ASSERT_TRUE(b.operator_speedup);
  EXPECT_FALSE(b.operator_speedup->estimated);
  EXPECT_DOUBLE_EQ(b.operator_speedup->mean, 1.004);
}

// Promotion judges by the definition score (the mean speedup over the baseline), not by the plain
// mean of the ratios over the incumbent: faster by 20% where the incumbent is 1x the baseline but
// slower by 5% where it is 10x lowers the score though the ratios average 1.075.
TEST(Promotion, ScoreRatioWeightsEachWorkloadByTheIncumbentsSpeedup) {
  auto workload = [](const std::string& uuid, double ratio, double noise) {
    WorkloadVerdict w;
    w.uuid = uuid;
    w.timing = timing_from_json(
        {{"speedup", ratio}, {"candidate", {{"noise", noise}}}, {"baseline", {{"noise", noise}}}});
    return w;
  };
  Verdict v;
  v.workloads = {workload("a", 0.95, 0.003), workload("b", 1.20, 0.004)};
  controller::Comparison c = controller::compare_with_incumbent(v, {{"a", 10.0}, {"b", 1.0}});
  EXPECT_NEAR(c.score_ratio, (10 * 0.95 + 1 * 1.20) / 11.0, 1e-12);
  EXPECT_LT(c.score_ratio, 1.0);
  EXPECT_NEAR(c.noise, (10 * 0.003 * std::sqrt(2.0) + 0.004 * std::sqrt(2.0)) / 11.0, 1e-12);
  EXPECT_TRUE(c.complete);
  EXPECT_DOUBLE_EQ(c.ratio.at("b"), 1.20);
  // Unknown weights count 1: the plain mean.
  c = controller::compare_with_incumbent(v, {});
  EXPECT_NEAR(c.score_ratio, 1.075, 1e-12);
  // A workload without a ratio (failed, or not timed) leaves the comparison incomplete.
  v.workloads.push_back(WorkloadVerdict{});
  EXPECT_FALSE(controller::compare_with_incumbent(v, {}).complete);
}

// Promotion needs more than the measured noise and more than the least gain: the rmsnorm seed and
// a restatement of it scored 1.009x one another on the H200 with a noise of 0.68%.
TEST(Promotion, ThresholdIsTheLargerOfNoiseAndLeastGain) {
  controller::Comparison c;
  c.noise = 0.0068;
  EXPECT_DOUBLE_EQ(controller::promotion_threshold(c, 0.02), 1.02);
  EXPECT_DOUBLE_EQ(controller::promotion_threshold(c, 0.0), 1.0068);
  c.noise = 0.035;  // a noisy timing raises the bar above the floor
  EXPECT_DOUBLE_EQ(controller::promotion_threshold(c, 0.02), 1.035);
  EXPECT_LT(1.009, controller::promotion_threshold(controller::Comparison{},
                                                   controller::SearchOptions{}.min_gain))
      << "the default floor must keep an A/A difference of 0.9% from promoting";
}

// A run folder read back for --resume keeps what the summary needs: a tune candidate's
// configuration (its raw answer), the verdicts, the source.
TEST(RunFolder, ResumedTuneCandidatesKeepTheirConfiguration) {
  testing::TempDir tmp;
  controller::FileRecorder rec(tmp.path());
  controller::CandidateRecord r;
  r.id = "c0007";
  r.provider = "tune";
  r.status = controller::CandidateStatus::of(Status::kPassed);
  r.source = "// kernel\n";
  r.answer.text = "tune: configuration 3 of 19";
  r.answer.raw = R"({"THREADS":128,"VEC":8})";
  r.verdict = {{"status", "PASSED"}};
  rec.record(r);
  controller::CandidateRecord other = r;
  other.id = "c0008";
  other.provider = "anthropic";
  other.answer.raw = R"({"content": "a large HTTP body"})";
  rec.record(other);
  auto back = rec.load_candidates();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].id, "c0007");
  EXPECT_EQ(back[0].answer.raw, r.answer.raw);
  EXPECT_EQ(back[0].source, r.source);
  EXPECT_EQ(back[0].verdict["status"], "PASSED");
  EXPECT_TRUE(back[1].answer.raw.empty()) << "only the tune provider's raw answers are read back";
}

TEST(Cascade, RepresentativesOfSizeBuckets) {
  Operator op = rmsnorm();
  auto reps = controller::bucket_representatives(op);
  ASSERT_EQ(reps.size(), 3u);
  std::set<std::string> unique(reps.begin(), reps.end());
  EXPECT_EQ(unique.size(), 3u);
  op.workloads.resize(2);
  EXPECT_EQ(controller::bucket_representatives(op).size(), 2u);
}

}  // namespace
}  // namespace kharness
