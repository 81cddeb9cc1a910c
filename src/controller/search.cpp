#include "controller/search.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "controller/answer.hpp"
#include "controller/model_gate.hpp"
#include "controller/prompt.hpp"
#include "core/json_util.hpp"
#include "core/pool.hpp"
#include "kharness/compile.hpp"
#include "kharness/family_source.hpp"
#include "kharness/hash.hpp"
#include "kharness/text.hpp"
#include "llm/providers.hpp"

namespace kharness::controller {

using nlohmann::json;

std::vector<std::string> bucket_representatives(const Operator& op) {
  std::vector<std::pair<double, std::string>> sized;
  for (const auto& w : op.workloads) {
    double size = 1;
    for (const auto& [name, value] : w.axes)
      size *= static_cast<double>(std::max<std::int64_t>(1, value));
    sized.emplace_back(size, w.uuid);
  }
  std::vector<std::string> reps;
  if (sized.size() <= 3) {
    for (const auto& s : sized) reps.push_back(s.second);
    return reps;
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t n = sized.size();
  for (std::size_t b = 0; b < 3; ++b) {
    std::size_t lo = b * n / 3, hi = (b + 1) * n / 3;  // [lo, hi): one size bucket
    reps.push_back(sized[(lo + hi) / 2].second);
  }
  return reps;
}

pipeline::Request run_request() {
  pipeline::Request r;
  r.mode = Mode::kValidate;
  r.timeouts.seconds = 300;
  r.archive.command = "run";
  r.archive.enabled = false;
  return r;
}

StageSettings stage_settings(const SearchOptions& options) {
  return {options.evaluation, options.in_model};
}

Comparison compare_with_incumbent(const Verdict& v, const std::map<std::string, double>& weight) {
  Comparison c;
  double sum = 0, noise = 0, weights = 0;
  std::size_t timed = 0;
  for (const auto& w : v.workloads) {
    if (!w.timing.speedup || !std::isfinite(*w.timing.speedup)) continue;
    const double r = *w.timing.speedup;
    auto it = weight.find(w.uuid);
    const double s = it != weight.end() && it->second > 0 ? it->second : 1.0;
    c.ratio[w.uuid] = r;
    sum += s * r;
    weights += s;
    // A side's relative noise; 1% where it is unknown (written as null: too few samples).
    auto rel = [](const std::optional<ContenderTiming>& t) {
      return t && std::isfinite(t->stats.noise) ? t->stats.noise : 0.01;
    };
    const double cn = rel(w.timing.candidate), bn = rel(w.timing.baseline);
    noise += s * std::sqrt(cn * cn + bn * bn);
    ++timed;
  }
  if (timed > 0 && weights > 0) {
    c.score_ratio = sum / weights;
    c.noise = noise / weights;
  }
  c.complete = timed > 0 && timed == v.workloads.size();
  return c;
}

double promotion_threshold(const Comparison& c, double min_gain) {
  return 1.0 + std::max(min_gain, c.noise);
}

namespace {

// The model column of the summary table: "ok 1.0040x" (the layer speedup), the status of a
// failed model-check, or "-" where none ran.
std::string model_cell(const CandidateRecord& r) {
  if (!r.model_check.is_object()) return "-";
  if (!r.model_check.value("passed", false)) return r.model_check.value("status", "FAILED");
  const json speedup = r.model_check.value("layer_speedup", json());
  return speedup.is_number() ? fmt::format("ok {:.4f}x", speedup.get<double>()) : "ok";
}

// With --model, the summary's account of in-model validation: a line of text (empty without a
// model) and `json_out`, its JSON (null without).
std::string model_summary(const SearchResult& result, const SearchOptions& options,
                          json& json_out) {
  json_out = nullptr;
  const ModelGate& gate = options.in_model;
  if (!gate.enabled() || options.compile_only) return {};
  std::optional<ModelVerdict> seeds, best;
  for (const auto& r : result.candidates) {
    if (!r.model_check.is_object()) continue;
    try {
      if (r.id == "c0000") seeds = model_verdict_from_json(r.model_check, r.id);
      if (r.id == result.best_id) best = model_verdict_from_json(r.model_check, r.id);
    } catch (const Error&) {
      // a record edited by hand: the summary goes without it
    }
  }
  const std::optional<double> share = seeds ? seeds->share : std::nullopt;
  const std::optional<double> layer = best ? best->layer_speedup : std::nullopt;
  json_out = {{"model", gate.name},
              {"phase", gate.phase},
              {"layers", gate.layers},
              {"objective", std::string(objective_name(gate.objective))},
              {"operator_share", share ? json(*share) : json(nullptr)},
              {"best_layer_speedup", layer ? json(*layer) : json(nullptr)},
              {"model_checks", result.model_checks},
              {"model_failures", result.model_failures}};
  return fmt::format(
      "In the model ({}, objective {}): the operator takes {} of the seeds' layer time; the best "
      "gives the layer {} over the seeds'; {} model-checks, {} failed\n",
      model_label(gate), objective_name(gate.objective),
      share ? fmt::format("{:.1f}%", 100 * *share) : std::string("an unknown part"),
      layer ? fmt::format("{:.4f}x", *layer) : std::string("an unknown speedup"),
      result.model_checks, result.model_failures);
}

// The run's summary, from `result` once its candidates, best kernel, spending and stop reason are
// in: a table of every candidate, the best kernel and what it reached, the budget spent and the
// shape cascade's savings, as text (printed at the end) and JSON (machine-readable).
void write_summary(SearchResult& result, const SearchOptions& options, const Operator& op,
                   const std::vector<std::string>& reps, double seconds_per_workload) {
  int stopped = 0;
  double saved = 0, spent_reps = 0;
  json rows = json::array();
  // With --model, a column says each candidate's model-check.
  const bool model_column = options.in_model.enabled() && !options.compile_only;
  std::string table =
      model_column
          ? "| candidate | parent | status | stage | vs incumbent | score | model | tokens | cost "
            "| note |\n|---|---|---|---|---|---|---|---|---|---|\n"
          : "| candidate | parent | status | stage | vs incumbent | score | tokens | cost | note "
            "|\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : result.candidates) {
    rows.push_back(to_json(r));
    if (r.stage == "representatives") {
      ++stopped;
      saved += r.saved_seconds;
    } else if (r.stage == "full" && r.id != "c0000" && options.cascade &&
               reps.size() < op.workloads.size()) {
      spent_reps += seconds_per_workload * static_cast<double>(reps.size());
    }
    std::string note = r.note.empty() ? r.reason : r.note;
    if (note.size() > 90) note = note.substr(0, 89) + "…";
    for (auto& ch : note)
      if (ch == '|' || ch == '\n') ch = ' ';
    table += fmt::format(
        "| {}{} | {} | {} | {} | {} | {} | {}{} | ${:.4f} | {} |\n", r.id, r.promoted ? " *" : "",
        r.parent.empty() ? "-" : r.parent, r.status.name(), r.stage.empty() ? "-" : r.stage,
        r.speedup_vs_incumbent > 0 ? fmt::format("{:.3f}x", r.speedup_vs_incumbent) : "-",
        r.score > 0 ? fmt::format("{:.3f}x", r.score) : "-",
        model_column ? model_cell(r) + " | " : std::string(),
        r.answer.usage.input_tokens + r.answer.usage.output_tokens, r.cost_usd, note);
  }
  std::string text = fmt::format("# kharness run: {} on {} ({})\n\n", op.definition.name,
                                 options.evaluation.target.arch,
                                 options.compile_only ? "compile only" : "validated");
  text += table;
  // The best kernel's record: its speed-of-light fraction (mean over its timed workloads) and,
  // from the tune provider, the knob configuration it instantiates.
  std::optional<double> best_sol;
  json best_config;
  for (const auto& r : result.candidates) {
    if (r.id != result.best_id) continue;
    if (r.verdict.is_object()) {
      try {
        const std::optional<double> f = verdict_from_json(r.verdict).score.mean_sol_fraction;
        if (f && std::isfinite(*f)) best_sol = f;
      } catch (const Error&) {
        // a record edited by hand: the summary goes without the fraction
      }
    }
    if (r.provider == "tune" && !r.answer.raw.empty()) {
      json c = json_util::parse_or_discarded(r.answer.raw);
      if (c.is_object()) best_config = std::move(c);
    }
  }
  const double over_seed =
      result.seed_score > 0 && result.best_score > 0 ? result.best_score / result.seed_score : 0.0;
  text += fmt::format("\nBest: {} at {:.3f}x the operator's baseline (the seed: {:.3f}x){}\n",
                      result.best_id, result.best_score, result.seed_score,
                      options.compile_only ? " — compile-only: nothing was timed" : "");
  if (!options.compile_only && over_seed > 0) {
    text += fmt::format("Best over the seed: {:.3f}x; speed-of-light reached: {}\n", over_seed,
                        best_sol ? fmt::format("{:.1f}% (mean over workloads)", 100 * *best_sol)
                                 : std::string("unknown"));
  }
  if (best_config.is_object() && best_config.contains("dispatch") &&
      best_config["dispatch"].is_array()) {
    // A composed candidate of the tune provider: which configuration serves which shapes.
    text += "Best configuration: dispatched by shape (the plan's variants)\n";
    for (const auto& d : best_config["dispatch"]) {
      if (!d.is_object()) continue;
      const json uuids = d.value("workloads", json::array());
      std::vector<std::string> shapes;
      for (const auto& u : uuids) {
        for (const auto& w : op.workloads) {
          if (!u.is_string() || w.uuid != u.get<std::string>()) continue;
          std::vector<std::string> axes;
          for (const auto& [name, value] : w.axes)
            axes.push_back(fmt::format("{}={}", name, value));
          shapes.push_back(join(axes, ","));
        }
      }
      text += fmt::format("  {}: {} — serves {} workload(s): {}\n",
                          d.value("when", std::string("otherwise")),
                          json_util::dump(d.value("configuration", json::object())), uuids.size(),
                          join(shapes, " "));
    }
  } else if (!best_config.is_null()) {
    text += fmt::format("Best configuration: {}\n", json_util::dump(best_config));
  } else if (result.best_id == "c0000" && options.provider == "tune") {
    text += "Best configuration: the seed's defaults\n";
  }
  text += fmt::format("Candidates: {} of a budget of {}; stopped: {}; dropout restarts: {}\n",
                      result.candidates.size() - 1, options.budget, result.stop_reason,
                      result.dropouts);
  text += fmt::format("Tokens: {}; cost: ${:.4f}; time: {:.1f} s\n", result.tokens, result.cost,
                      result.seconds);
  if (!options.compile_only && options.cascade && reps.size() < op.workloads.size()) {
    text += fmt::format(
        "Shape cascade: {} representative shapes of {}; {} candidates stopped there, saving "
        "~{:.1f} s of full validation, at ~{:.1f} s spent re-checking representatives of the "
        "others: net ~{:.1f} s\n",
        reps.size(), op.workloads.size(), stopped, saved, spent_reps, saved - spent_reps);
  }
  json in_model;
  text += model_summary(result, options, in_model);
  if (result.fatal) text += "Stopped by: " + result.fatal->message() + "\n";
  result.summary = {{"schema", "kharness.run/1"},
                    {"operator", op.definition.name},
                    {"arch", options.evaluation.target.arch},
                    {"provider", options.provider},
                    {"model", options.model},
                    {"compile_only", options.compile_only},
                    {"best", result.best_id},
                    {"best_score", result.best_score},
                    {"seed_score", result.seed_score},
                    {"best_over_seed", over_seed},
                    {"best_sol_fraction", best_sol ? json(*best_sol) : json(nullptr)},
                    {"best_configuration", best_config},
                    {"stop_reason", result.stop_reason},
                    {"error", result.fatal ? result.fatal->message() : ""},
                    {"tokens", result.tokens},
                    {"cost_usd", result.cost},
                    {"seconds", result.seconds},
                    {"dropouts", result.dropouts},
                    {"in_model", in_model},
                    {"cascade",
                     {{"representatives", reps},
                      {"stopped_early", stopped},
                      {"saved_seconds", saved},
                      {"spent_seconds", spent_reps}}},
                    {"candidates", rows}};
  result.summary_text = text;
}

}  // namespace

struct Search::Impl {
  // The verdict cache's key of one evaluation, and the archived candidate that answered it.
  struct CacheNote {
    std::string key, cached_from;
    std::shared_ptr<const archive::CandidateRecord> record;  // the pipeline's archive record
  };
  struct Kernel {
    std::string id;
    std::string source;
    std::filesystem::path file;
    double score = 0.0;
    std::map<std::string, double> speedup;  // uuid -> over the operator's baseline (estimated)
    std::optional<Verdict> display;         // verdict as the prompt shows it
    // With --model: its layer speedup over the seeds' layer (1 for the seed) and that figure's
    // relative noise, from its model-check.
    std::optional<double> layer_speedup;
    double layer_noise = 0.0;
  };

  SearchOptions options;
  Evaluator& evaluator;
  llm::Provider& provider;
  RunRecorder& recorder;
  const std::atomic<bool>* stop;
  const Clock& clock;
  Operator op;
  std::vector<std::string> reps;
  std::string task_text;
  std::vector<SkillSection> skills;

  std::vector<CandidateRecord> records;
  std::map<std::string, std::string> feedback;  // id -> rendered feedback
  std::set<std::string> masked;
  std::map<std::string, std::string> seen;  // source hash -> id
  Kernel best;
  std::vector<Kernel> elites;
  double seed_score = 0.0;
  double seconds_per_workload = 0.0;  // of a full validation (the seed's), for cascade savings
  int stall = 0, direction = 0, dropouts = 0, step = 0, next_id = 1;
  std::string profile_diagnosis;  // of the current best kernel
  // With --model: the seeds' layer as checked and timed at the start (the operator's share of the
  // layer time, for the prompts), and the model-checks run so far and failed.
  std::optional<ModelVerdict> baseline_model;
  int model_checks = 0, model_failures = 0;
  bool profiling = true;  // off after the first environment failure
  std::int64_t tokens = 0;
  double cost = 0.0;
  std::mt19937_64 rng;
  double t0 = 0;  // clock.seconds() at the start

  Impl(SearchOptions o, Evaluator& e, llm::Provider& p, RunRecorder& r, const std::atomic<bool>* s,
       const Clock& c)
      : options(std::move(o)),
        evaluator(e),
        provider(p),
        recorder(r),
        stop(s),
        clock(c),
        rng(options.seed ^ 0x5eedULL),
        t0(c.seconds()) {
    op = OperatorRegistry::from_environment(options.evaluation.target.operators_dirs)
             .load(options.evaluation.target.operator_name);
    op.seed = seed_for(
        op, options.evaluation.target.arch);  // the arch's own seed (TMA, wgmma) when it has one
    reps = bucket_representatives(op);
    task_text = render_task(op, options.evaluation.target.arch);
    skills = load_skills(options.skills_dir, op, options.evaluation.target.arch);
    profiling = options.profile && !options.compile_only;
    scratch = options.work_dir / "solutions";
    std::filesystem::create_directories(scratch);
  }

  bool stopping() const { return stop && stop->load(); }
  double seconds_since(double start) const { return clock.seconds() - start; }

  // A solution file the evaluator can read.
  std::filesystem::path write_solution(const std::string& id, const std::string& source) {
    std::filesystem::path f = solutions_dir() / (id + ".cu");
    write_file_atomic(f.string(), source);
    return f;
  }
  std::filesystem::path solutions_dir() const { return scratch; }
  std::filesystem::path scratch;

  // `counter` picks the evaluation's seed (options.seed + 7919 * counter): 1 for the seed kernel,
  // evaluation_counter() for a candidate's, so that every evaluation of a run has its own inputs
  // and a resumed run draws the ones the uninterrupted run would have. `gpu`: the worker's GPU.
  // `cache` (optional): where the verdict cache's key and answer go (the record keeps them).
  Verdict evaluate(const std::filesystem::path& file, Mode mode,
                   const std::vector<std::string>& workloads, const std::filesystem::path& base,
                   const std::optional<GpuInfo>& gpu, std::uint64_t counter,
                   CacheNote* cache = nullptr) {
    EvaluationRequest req;
    req.solution = file;
    req.mode = mode;
    req.workloads = workloads;
    req.baseline = base;
    req.gpu = gpu ? gpu : first_gpu();
    req.seed = options.seed + 7919 * counter;
    Evaluated e = evaluator.evaluate(req);
    if (cache) *cache = {e.cache_key, e.cached_from, std::move(e.record)};
    return std::move(e.verdict);
  }

  // The GPU of sequential evaluations (the seed, re-timings): the pool's first.
  std::optional<GpuInfo> first_gpu() const {
    return options.gpus.empty() ? std::nullopt : options.gpus[0];
  }

  Kernel kernel_from(const CandidateRecord& r, std::optional<Verdict> display) {
    Kernel k;
    k.id = r.id;
    k.source = r.source;
    k.file = write_solution(r.id, r.source);
    k.score = r.score;
    k.display = std::move(display);
    if (k.display) {
      for (const auto& w : k.display->workloads) k.speedup[w.uuid] = w.timing.speedup.value_or(1.0);
    }
    if (r.model_check.is_object()) {
      try {
        const ModelVerdict m = model_verdict_from_json(r.model_check, r.id);
        k.layer_speedup = m.layer_speedup;
        k.layer_noise = m.layer_noise;
      } catch (const Error&) {
        // a record edited by hand: the kernel is kept, without its layer speedup
      }
    }
    return k;
  }

  void add_elite(const Kernel& k) {
    elites.erase(
        std::remove_if(elites.begin(), elites.end(), [&](const Kernel& e) { return e.id == k.id; }),
        elites.end());
    elites.push_back(k);
    std::stable_sort(elites.begin(), elites.end(),
                     [](const Kernel& a, const Kernel& b) { return a.score > b.score; });
    if (elites.size() > static_cast<std::size_t>(std::max(1, options.elites)))
      elites.resize(static_cast<std::size_t>(std::max(1, options.elites)));
  }

  void remember(const CandidateRecord& r, const Verdict* v) {
    feedback[r.id] = render_feedback(r.id, r.status.name(), r.reason, v, r.note);
    if (!r.source.empty()) seen.emplace(sha256_hex(r.source), r.id);
    tokens += r.answer.usage.input_tokens + r.answer.usage.output_tokens;
    cost += r.cost_usd;
  }

  // The profile stage's diagnosis of a kernel on the largest representative shape; empty when
  // profiling is off or fails (a warning, once, for counters that are not permitted).
  std::string diagnose(const std::filesystem::path& file) {
    if (!profiling || stopping()) return {};
    DiagnosisRequest req;
    req.solution = file;
    req.workload = reps.empty() ? std::string() : reps.back();
    req.seed = options.seed;
    try {
      return evaluator.diagnose(req);
    } catch (const Error& e) {
      if (e.code() == ExitCode::kEnvironment || e.code() == ExitCode::kInternal) profiling = false;
      spdlog::warn("profile of {}: {}{}", file.filename().string(), e.message(),
                   profiling ? "" : "; the prompts go without a diagnosis");
      return {};
    }
  }

  std::string diagnosis_for_prompt() const {
    if (profile_diagnosis.empty()) return options.diagnosis;
    if (options.diagnosis.empty()) return profile_diagnosis;
    return options.diagnosis + "\n" + profile_diagnosis;
  }

  // c0000: the seed, validated against the operator's baseline (or compiled).
  void evaluate_seed() {
    if (!op.seed) {
      throw input_error(op.definition_file.string(),
                        fmt::format("{} has no seed.cu to start a run from", op.definition.name));
    }
    CandidateRecord r;
    r.id = "c0000";
    r.provider = "seed";
    r.source = read_single_file_source(*op.seed);  // self-contained: _shared text inlined
    std::filesystem::path file = write_solution(r.id, r.source);
    const double t = clock.seconds();
    CacheNote cache;
    Verdict v = evaluate(file, options.compile_only ? Mode::kCompile : Mode::kValidate, {}, {},
                         first_gpu(), 1, &cache);
    r.gpu_seconds = seconds_since(t);
    r.cache_key = cache.key;
    r.cached_from = cache.cached_from;
    r.evaluated = cache.record;
    r.stage = options.compile_only ? "compile" : "full";
    r.workloads_evaluated = options.compile_only ? 0 : static_cast<int>(v.workloads.size());
    r.verdict = to_json(v);
    if (std::string why = promotion_refusal(v); !why.empty()) {
      throw Error(ExitCode::kFailed, op.seed->string(),
                  fmt::format("the seed cannot start a run: {}", why));
    }
    r.status = options.compile_only ? CandidateStatus{Outcome::kCompiled}
                                    : CandidateStatus::of(Status::kPassed);
    r.score = v.score.mean_speedup.value_or(1.0);
    r.promoted = true;
    r.note = "the starting point";
    Verdict display = v;
    if (!options.compile_only && !v.score.mean_speedup) {
      for (auto& w : display.workloads)
        w.timing.speedup = 1.0;  // no baseline: relative to the seed
    }
    r.best_verdict = to_json(display);
    seconds_per_workload =
        op.workloads.empty() ? 0 : r.gpu_seconds / static_cast<double>(op.workloads.size());
    if (options.in_model.enabled() && !options.compile_only) check_seed_in_model(r);
    best = kernel_from(r, display);
    seed_score = best.score;
    add_elite(best);
    r.diagnosis = profile_diagnosis = diagnose(best.file);  // the best kernel's, as for promotions
    recorder.record(r);
    r.evaluated.reset();  // archived: the run's records keep no PTX or cubin in memory
    remember(r, &v);
    records.push_back(r);
  }

  // The operator's CuTe variant of its seed (seed.cute.<arch>.cu), where it has one and a CUTLASS
  // root is found: c0001, evaluated against the seed and promoted by the same rule as any
  // candidate, so the run starts from the faster of the two. It counts as a candidate.
  void evaluate_cute_seed() {
    if (options.budget < 1 || stopping()) return;
    const auto file = cute_seed_for(op, options.evaluation.target.arch);
    if (!file) return;
    try {
      if (!find_cutlass()) return;
    } catch (const Error& e) {
      spdlog::warn("{}: not evaluated: {}", file->string(), e.message());
      return;
    }
    CandidateRecord r;
    r.id = fmt::format("c{:04d}", next_id++);
    r.step = 0;
    r.parent = best.id;
    r.provider = "seed";
    r.source = read_single_file_source(*file);
    Trial t;
    t.file = write_solution(r.id, r.source);
    t.counter = evaluation_counter(r.id);
    seen.emplace(sha256_hex(r.source), r.id);
    evaluate_trial(t, first_gpu());
    std::optional<Verdict> last;
    conclude(r, t, last);
    r.note = fmt::format("the seed's CuTe variant ({}){}", file->filename().string(),
                         r.note.empty() ? "" : "; " + r.note);
    recorder.record(r);
    r.evaluated.reset();
    remember(r, last ? &*last : nullptr);
    records.push_back(r);
  }

  void count_model_check(const ModelVerdict& m) {
    ++model_checks;
    if (!m.passed) ++model_failures;
  }

  // With --model, the seeds' layer, checked and timed once at the start: the baseline of every
  // layer speedup, and the operator's share of the layer time that the prompts show. A seed whose
  // layer fails model-check cannot start a run (the model, not a candidate, is wrong).
  void check_seed_in_model(CandidateRecord& r) {
    ModelVerdict m = evaluator.model_check({{}, first_gpu()});
    count_model_check(m);
    if (!m.passed) {
      throw Error(ExitCode::kFailed, op.seed->string(),
                  fmt::format("the seed cannot start a run: the seeds' layer fails model-check "
                              "({}): {}",
                              model_label(options.in_model), m.reason));
    }
    // The seeds' layer is the baseline layer: its speedup is 1 by definition; the ratio measured
    // between two identical layers shows the noise only (layer_noise).
    m.layer_speedup = 1.0;
    r.model_check = to_json(m);
    r.model_verdict = m.verdict;
    baseline_model = std::move(m);
  }

  enum class InModel { kPassed, kFailed, kNotFaster };

  // In-model validation (`run --model`) of a candidate whose kernel verdict would promote it
  // (`kernel_note` says why): its model-check, kept on the record. kFailed: the layers do not
  // pass; kNotFaster (--objective layer): they pass, but its layer speedup does not beat the
  // best's by more than the combined noise. Sets the record's note either way.
  InModel validate_in_model(CandidateRecord& r, const std::filesystem::path& file,
                            const std::string& kernel_note) {
    const ModelGate& gate = options.in_model;
    if (!gate.enabled()) {
      r.note = "promoted: " + kernel_note;
      return InModel::kPassed;
    }
    const double start = clock.seconds();
    const ModelVerdict m = evaluator.model_check({file, first_gpu()});
    r.gpu_seconds += seconds_since(start);
    count_model_check(m);
    r.model_check = to_json(m);
    r.model_verdict = m.verdict;
    if (!m.passed) {
      r.note = fmt::format("not promoted: {}, but fails model-check ({}): {}", kernel_note,
                           model_label(gate), m.reason);
      return InModel::kFailed;
    }
    const std::string layer =
        m.layer_speedup ? fmt::format("{:.4f}x", *m.layer_speedup) : std::string("unknown");
    if (gate.objective == Objective::kLayer) {
      const double base = best.layer_speedup.value_or(1.0);
      const double noise = std::hypot(m.layer_noise, best.layer_noise);
      const double ratio = m.layer_speedup ? *m.layer_speedup / base : 0.0;
      if (!(ratio > 1.0 + noise)) {
        r.note = fmt::format(
            "not promoted: {}, passes model-check, but its layer speedup {} does not beat the "
            "best {}'s {:.4f}x by more than the noise ({:.2f}%)",
            kernel_note, layer, best.id, base, 100 * noise);
        return InModel::kNotFaster;
      }
    }
    r.note = fmt::format("promoted: {}; passes model-check ({}), layer speedup {}", kernel_note,
                         model_label(gate), layer);
    return InModel::kPassed;
  }

  // Replays the records as run() made them, so the state is what the earlier session left: the
  // best and the elites, the stall count (in steps), and each dropout restart (recorded on its
  // step's candidates) with the same history masked, the random draws taken in the same order.
  void restore(const std::vector<CandidateRecord>& earlier) {
    int at_step = 0;                // the step of the records seen last
    bool promoted_in_step = false;  // a record of that step was promoted
    for (const auto& r : earlier) {
      if (r.step != at_step) {
        if (at_step > 0) stall = promoted_in_step ? 0 : stall + 1;
        at_step = r.step;
        promoted_in_step = false;
        if (!r.restart.empty()) dropout(false);  // before the step's records, as in run()
      }
      records.push_back(r);
      Verdict v;
      bool has_verdict = r.verdict.is_object();
      if (has_verdict) {
        try {
          v = verdict_from_json(r.verdict);
        } catch (const Error&) {
          has_verdict = false;
        }
      }
      remember(r, has_verdict ? &v : nullptr);
      step = std::max(step, r.step);
      if (r.model_check.is_object()) {
        try {
          const ModelVerdict m = model_verdict_from_json(r.model_check, r.id);
          count_model_check(m);
          if (r.id == "c0000") baseline_model = m;
        } catch (const Error&) {
          // a record edited by hand: counted as no model-check
        }
      }
      if (r.id == "c0000") {
        seed_score = r.score;
        seconds_per_workload =
            op.workloads.empty() ? 0 : r.gpu_seconds / static_cast<double>(op.workloads.size());
      } else {
        next_id = std::max(next_id, std::stoi(r.id.substr(1)) + 1);
      }
      if (r.promoted && r.best_verdict.is_object()) {
        std::optional<Verdict> shown;
        try {
          shown = verdict_from_json(r.best_verdict);
        } catch (const Error&) {
          // a record edited by hand: the kernel is kept, without its verdict in the prompt
        }
        best = kernel_from(r, std::move(shown));
        profile_diagnosis = r.diagnosis;
        add_elite(best);
        promoted_in_step = promoted_in_step || r.id != "c0000";
      } else if (r.id != "c0000" && r.status.passed() && r.stage == "full" && has_verdict &&
                 !(r.model_check.is_object() && !r.model_check.value("passed", true))) {
        // An elite as conclude() kept it (one that failed model-check is none): its speedups
        // through the incumbent of its time, which is `best` here, as the records come in order.
        add_elite(kernel_from(r, through_incumbent(v, compare_with_incumbent(v, best.speedup))));
      }
    }
    if (at_step > 0) stall = promoted_in_step ? 0 : stall + 1;
  }

  // uuid -> the seed's latency there, from its record (empty when it was not timed).
  json seed_latency() const {
    json out = json::object();
    if (records.empty() || records.front().id != "c0000" || !records.front().verdict.is_object())
      return out;
    try {
      for (const auto& w : verdict_from_json(records.front().verdict).workloads) {
        if (w.timing.candidate && w.timing.candidate->latency > 0)
          out[w.uuid] = w.timing.candidate->latency;
      }
    } catch (const Error&) {
      // a record edited by hand: no reference latencies
    }
    return out;
  }

  llm::Request make_request(const Kernel& parent, int sample, std::vector<std::string>& cuts) {
    PromptParts parts;
    parts.task = task_text;
    parts.best = render_best(parent.id, parent.source, parent.display ? &*parent.display : nullptr);
    if (parent.id != best.id)
      parts.best =
          parts.best +
          fmt::format("(This is one of the elite kernels; the best so far is {} at {:.3f}x.)\n",
                      best.id, best.score);
    for (auto it = records.rbegin(); it != records.rend() && parts.feedback.size() < 8; ++it) {
      if (it->id == "c0000" || masked.count(it->id)) continue;
      parts.feedback.push_back(feedback[it->id]);
    }
    parts.diagnosis = diagnosis_for_prompt();
    parts.skills = order_skills(skills, parts.diagnosis, direction + sample);
    parts.hints = options.hints;
    if (baseline_model)
      parts.model = render_model(options.in_model, *baseline_model, best.id, best.layer_speedup);
    Prompt p = build_prompt(parts, options.prompt_tokens);
    cuts = p.cuts;
    llm::Request req;
    req.system = p.system;
    req.user = p.user;
    req.model = options.model;
    req.max_output_tokens = options.max_output_tokens;
    req.reasoning_effort = options.reasoning_effort;
    req.timeout_seconds = options.request_timeout;
    std::vector<std::string> dirs;
    for (const auto& d : options.evaluation.target.operators_dirs) dirs.push_back(d.string());
    // Facts for providers that do not read prose (tune: operator, operators_dirs, budget,
    // rng_seed).
    req.context = {{"operator", op.definition.name},
                   {"operators_dirs", dirs},
                   {"budget", options.budget},
                   {"rng_seed", options.seed},
                   {"definition_file", op.definition_file.string()},
                   {"seed", op.seed ? op.seed->string() : ""},
                   {"arch", options.evaluation.target.arch},
                   {"best_id", best.id},
                   {"best_score", best.score},
                   {"seed_score", seed_score},  // tune: the seed is evaluated, skip its defaults
                   {"seed_latency", seed_latency()},  // tune: per-bucket scores are against it
                   {"parent_id", parent.id},
                   {"parent_file", parent.file.string()},
                   {"step", step},
                   {"sample", sample},
                   {"direction", direction},
                   {"compile_only", options.compile_only}};
    return req;
  }

  // One answer's evaluation, apart from the search's state, so that the K candidates of a step
  // evaluate on K workers at once (docs/controller.md#search): its verdicts against the incumbent
  // of the step.
  struct Trial {
    std::filesystem::path file;
    std::uint64_t counter = 0;  // evaluation_counter() of the candidate
    std::optional<Verdict> compiled, reps, full;
    CacheNote compiled_cache, reps_cache, full_cache;  // the verdict cache's word on each
    // The incumbent it was timed against: its id, per-workload speedups and score.
    std::string incumbent;
    std::map<std::string, double> incumbent_speedup;
    double incumbent_score = 0;
    double seconds = 0;
  };

  // Extraction and the duplicate check, in order (an answer equal to an earlier one of the same
  // step is a duplicate too). False when the record is finished already.
  bool prepare(CandidateRecord& r, Trial& t, std::map<std::string, std::string>& step_seen) {
    ExtractedCode code = extract_solution(r.answer);
    if (!code.ok) {
      r.status = code.status;
      r.reason = code.reason;
      r.stage = "none";
      return false;
    }
    r.source = code.source;
    std::string hash = sha256_hex(r.source);
    for (const auto* known : {&seen, &step_seen}) {
      auto dup = known->find(hash);
      if (dup == known->end()) continue;
      r.status = {Outcome::kDuplicate};
      r.reason = fmt::format("identical to {}; not evaluated again", dup->second);
      r.stage = "none";
      return false;
    }
    step_seen.emplace(hash, r.id);
    t.file = write_solution(r.id, r.source);
    t.counter = evaluation_counter(r.id);
    return true;
  }

  // The evaluations of candidate cNNNN take the seed counters 3N-1 (the cascade's, or the
  // compile), 3N (the full validation) and 3N+1 (a re-timing); the seed kernel's is 1. Returns
  // 3N-2, the base they are counted from.
  static std::uint64_t evaluation_counter(const std::string& id) {
    return 3 * std::stoull(id.substr(1)) - 2;
  }

  // A verdict timed against the incumbent (`c`: its comparison) as the prompt shows it: each
  // workload's speedup over the operator's baseline, estimated through the incumbent's, and their
  // mean as score.mean_speedup; the ratio is kept as speedup_vs_incumbent.
  Verdict through_incumbent(Verdict display, const Comparison& c) const {
    double sum = 0;
    for (auto& w : display.workloads) {
      auto r = c.ratio.find(w.uuid);
      auto s = best.speedup.find(w.uuid);
      const double ratio = r != c.ratio.end() ? r->second : 0.0;
      const double est = (s != best.speedup.end() ? s->second : 1.0) * ratio;
      w.timing.speedup_vs_incumbent = ratio;
      w.timing.speedup = est;
      sum += est;
    }
    const std::size_t n = display.workloads.size();
    display.score.mean_speedup = n ? sum / static_cast<double>(n) : 0.0;
    return display;
  }

  // True when a verdict on the representatives is worth a full validation.
  bool promising(const Verdict& v) const {
    Comparison c = compare_with_incumbent(v, best.speedup);
    return v.clean_pass() && c.complete && c.score_ratio > 1.0 - std::max(0.01, 2 * c.noise);
  }

  // The evaluations (the cascade, then the full validation), against the current incumbent, on
  // `gpu`. Reads the search's state, changes none of it: safe on several threads at once.
  void evaluate_trial(Trial& t, const std::optional<GpuInfo>& gpu) {
    const double start = clock.seconds();
    t.incumbent = best.id;
    t.incumbent_speedup = best.speedup;
    t.incumbent_score = best.score;
    if (options.compile_only) {
      t.compiled = evaluate(t.file, Mode::kCompile, {}, {}, gpu, t.counter + 1, &t.compiled_cache);
    } else {
      bool full = true;
      if (options.cascade && reps.size() < op.workloads.size()) {
        t.reps =
            evaluate(t.file, Mode::kValidate, reps, best.file, gpu, t.counter + 1, &t.reps_cache);
        full = promising(*t.reps);
      }
      if (full)
        t.full =
            evaluate(t.file, Mode::kValidate, {}, best.file, gpu, t.counter + 2, &t.full_cache);
    }
    t.seconds = seconds_since(start);
  }

  static void note_cache(CandidateRecord& r, const CacheNote& cache) {
    r.cache_key = cache.key;
    r.cached_from = cache.cached_from;
    r.evaluated = cache.record;
  }

  // What the evaluations say, in candidate order: the record's status, the cascade's decision,
  // promotion. A candidate timed against an incumbent that an earlier candidate of its step has
  // since replaced is timed again against the new one before it may be promoted.
  void conclude(CandidateRecord& r, Trial& t, std::optional<Verdict>& last) {
    std::size_t n = op.workloads.size();
    r.gpu_seconds = t.seconds;
    if (t.compiled) {
      const Verdict& v = *t.compiled;
      note_cache(r, t.compiled_cache);
      r.stage = "compile";
      r.status = v.passed() ? CandidateStatus{Outcome::kCompiled} : CandidateStatus::of(v.status);
      if (v.failure) r.reason = v.failure->message;
      r.verdict = to_json(v);
      last = v;
      return;
    }
    if (t.reps && !t.full) {
      const Verdict& v = *t.reps;
      note_cache(r, t.reps_cache);
      r.stage = "representatives";
      r.workloads_evaluated = static_cast<int>(v.workloads.size());
      // Judged against the incumbent it was timed against (a later one only does better).
      Comparison c = compare_with_incumbent(v, t.incumbent_speedup);
      r.status = v.passed() && !v.clean_pass() ? CandidateStatus{Outcome::kSuspect}
                                               : CandidateStatus::of(v.status);
      if (v.status == Status::kCompileError || v.status == Status::kRejected) {
        // Stopped by the compiler or the rules, not by the cascade: nothing saved, no GPU
        // stage reached.
        r.stage = "compile";
        r.reason = v.failure ? v.failure->message : "";
        r.verdict = to_json(v);
        last = v;
        return;
      }
      r.saved_seconds = seconds_per_workload * static_cast<double>(n - reps.size());
      if (v.failure) r.reason = v.failure->message;
      r.speedup_vs_incumbent = c.score_ratio;
      r.noise = c.noise;
      // An estimate from the representatives, so a provider that steers by score (tune) sees
      // how far behind it is.
      if (v.passed() && !v.clean_pass()) r.reason = promotion_refusal(v);
      if (v.clean_pass()) r.score = t.incumbent_score * c.score_ratio;
      if (v.clean_pass())
        r.note = fmt::format(
            "correct on the {} representative shapes but scores {:.3f}x the incumbent {} there: "
            "not promising, full validation skipped",
            reps.size(), c.score_ratio, t.incumbent);
      r.verdict = to_json(v);
      last = v;
      return;
    }
    if (t.incumbent != best.id && t.full->clean_pass()) {
      const double start = clock.seconds();
      t.full = evaluate(t.file, Mode::kValidate, {}, best.file, first_gpu(), t.counter + 3,
                        &t.full_cache);
      r.gpu_seconds += seconds_since(start);
    }
    const Verdict& v = *t.full;
    note_cache(r, t.full_cache);
    r.stage =
        v.status == Status::kCompileError || v.status == Status::kRejected ? "compile" : "full";
    r.workloads_evaluated = static_cast<int>(v.workloads.size());
    r.status = CandidateStatus::of(v.status);
    if (v.failure) r.reason = v.failure->message;
    r.verdict = to_json(v);
    last = v;
    if (!v.passed()) return;
    if (!v.clean_pass()) {
      // Timed faster than light: never promoted, never an elite, never reported as best.
      r.status = {Outcome::kSuspect};
      r.reason = promotion_refusal(v);
      r.note = "not promoted: " + r.reason;
      return;
    }
    Comparison c = compare_with_incumbent(v, best.speedup);
    r.speedup_vs_incumbent = c.score_ratio;
    r.noise = c.noise;
    const Verdict display = through_incumbent(v, c);
    r.score = display.score.mean_speedup.value_or(0.0);
    bool all = v.workloads.size() == n && c.complete;
    const double needed = promotion_threshold(c, options.min_gain);
    // Only a candidate its kernel verdict would promote gets a model-check (with --model): it
    // decides.
    const InModel in_model =
        all && c.score_ratio > needed
            ? validate_in_model(r, t.file,
                                fmt::format("scores {:.3f}x the incumbent {} (noise {:.2f}%)",
                                            c.score_ratio, best.id, 100 * c.noise))
            : InModel::kNotFaster;
    if (in_model == InModel::kFailed) return;  // wrong inside the model: not even an elite
    if (in_model == InModel::kPassed) {
      r.promoted = true;
      r.best_verdict = to_json(display);
      r.parent = r.parent.empty() ? best.id : r.parent;
      best = kernel_from(r, display);
      add_elite(best);
      r.diagnosis = profile_diagnosis = diagnose(best.file);
    } else {
      if (r.note.empty())
        r.note = fmt::format(
            "not promoted: scores {:.3f}x the incumbent {}; promotion needs more than {:.3f}x "
            "(noise {:.2f}%, least gain {:g}%)",
            c.score_ratio, best.id, needed, 100 * c.noise, 100 * options.min_gain);
      add_elite(kernel_from(r, display));
    }
  }

  // The kernel sample `i` of a step refines: the best for the first, the other elites in turn (by
  // score) for the rest; the best when there is no other. (Elites are ranked by their estimated
  // score, so one within noise of the best can rank above it: the others are taken by id.)
  const Kernel& parent_of(int i) const {
    std::vector<const Kernel*> others;
    for (const auto& e : elites) {
      if (e.id != best.id) others.push_back(&e);
    }
    if (i == 0 || others.empty()) return best;
    return *others[static_cast<std::size_t>(i - 1) % others.size()];
  }

  std::string limit_reached(int candidates) const {
    if (stopping()) return "interrupted";
    if (candidates >= options.budget) return "budget";
    if (options.max_tokens > 0 && tokens >= options.max_tokens) return "tokens";
    if (options.max_cost > 0 && cost >= options.max_cost) return "cost";
    if (options.max_time > 0 && seconds_since(t0) >= options.max_time) return "time";
    if (!provider.has_more()) return "exhausted";
    return "";
  }

  // `log`: false when restore() replays one.
  std::string dropout(bool log = true) {
    // A fresh context from the best kernel: half of the history records, at random, masked.
    std::vector<std::string> visible;
    for (const auto& r : records) {
      if (r.id != "c0000" && !masked.count(r.id)) visible.push_back(r.id);
    }
    std::shuffle(visible.begin(), visible.end(), rng);
    for (std::size_t i = 0; i < visible.size() / 2 + visible.size() % 2; ++i)
      masked.insert(visible[i]);
    ++direction;
    ++dropouts;
    stall = 0;
    std::string what = fmt::format(
        "no promotion in {} steps: dropout restart from {}, {} of {} history records masked, "
        "knowledge direction {}",
        options.patience, best.id, masked.size(), records.size() - 1, direction);
    if (log) spdlog::info("{}", what);
    return what;
  }

  SearchResult run(const std::function<void(const Progress&)>& on_progress) {
    SearchResult result;
    if (records.empty()) {
      evaluate_seed();
      evaluate_cute_seed();
    }
    int candidates = static_cast<int>(records.size()) - 1;
    auto progress = [&](const CandidateRecord& r) {
      if (!on_progress) return;
      Progress p;
      p.candidates = candidates;
      p.budget = options.budget;
      p.last_id = r.id;
      p.last_status = r.status.name();
      p.best_score = best.score;
      p.best_id = best.id;
      p.tokens = tokens;
      p.cost = cost;
      p.elapsed = seconds_since(t0);
      p.promoted = r.promoted;
      on_progress(p);
    };
    std::string why;
    while ((why = limit_reached(candidates)).empty()) {
      ++step;
      std::string restart;
      if (options.patience > 0 && stall >= options.patience) restart = dropout();
      int k = std::min(std::max(1, options.samples), options.budget - candidates);
      std::vector<Kernel> parents;
      std::vector<llm::Request> requests;
      std::vector<std::vector<std::string>> cuts(static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) {
        const Kernel& parent = parent_of(i);
        parents.push_back(parent);
        requests.push_back(make_request(parent, i, cuts[static_cast<std::size_t>(i)]));
        requests.back().context["request_index"] =
            static_cast<std::size_t>(candidates + i);  // answers in request order
      }
      std::vector<std::future<llm::Answer>> futures;
      for (int i = 0; i < k; ++i) {
        futures.push_back(std::async(std::launch::async, [this, &requests, i] {
          return provider.complete(requests[static_cast<std::size_t>(i)]);
        }));
      }
      std::vector<std::optional<llm::Answer>> answers;
      for (auto& f : futures) {
        try {
          answers.emplace_back(f.get());
        } catch (const Error& e) {
          if (!result.fatal) result.fatal = e;
          answers.emplace_back(std::nullopt);
        }
      }
      // The step's records, in request order: prepared one by one, evaluated on the pool's
      // workers at once, then concluded (and recorded) one by one.
      std::vector<CandidateRecord> step_records;
      std::vector<Trial> trials;
      std::vector<std::size_t> to_evaluate;  // positions in step_records
      std::vector<std::size_t> request_of;   // the request of each of step_records
      std::map<std::string, std::string> step_seen;
      for (int i = 0; i < k; ++i) {
        auto& a = answers[static_cast<std::size_t>(i)];
        // Nothing to record: the replay ran out, or Ctrl-C aborted the request.
        if (!a || a->stop_reason == "replay_exhausted" || a->stop_reason == "interrupted") continue;
        CandidateRecord r;
        r.id = fmt::format("c{:04d}", next_id++);
        r.step = step;
        r.parent = parents[static_cast<std::size_t>(i)].id;
        r.provider = options.provider;
        r.model = options.model;
        r.system = requests[static_cast<std::size_t>(i)].system;
        r.prompt = requests[static_cast<std::size_t>(i)].user;
        r.prompt_cuts = cuts[static_cast<std::size_t>(i)];
        r.restart = restart;
        r.answer = std::move(*a);
        r.cost_usd = llm::cost_usd(options.prices, options.provider, options.model, r.answer.usage);
        request_of.push_back(static_cast<std::size_t>(i));
        Trial t;
        if (prepare(r, t, step_seen)) to_evaluate.push_back(step_records.size());
        step_records.push_back(std::move(r));
        trials.push_back(std::move(t));
      }
      std::vector<std::optional<Error>> errors(step_records.size());
      const std::size_t workers = std::max<std::size_t>(1, options.gpus.size());
      run_pool(to_evaluate.size(), workers, [&](std::size_t j, std::size_t worker) {
        std::size_t at = to_evaluate[j];
        try {
          evaluate_trial(trials[at], options.gpus.empty() ? std::nullopt : options.gpus[worker]);
        } catch (const Error& e) {
          errors[at] = e;  // no GPU or a broken reference: recorded below, then the run stops
        }
      });
      bool promoted_now = false;
      for (std::size_t at = 0; at < step_records.size(); ++at) {
        CandidateRecord& r = step_records[at];
        std::size_t i = request_of[at];
        std::optional<Verdict> last;
        bool evaluated = !trials[at].file.empty();
        try {
          if (errors[at]) throw *errors[at];
          if (evaluated) conclude(r, trials[at], last);
        } catch (const Error& e) {
          // No GPU or a broken reference: record what there is, then stop the run.
          r.status = {Outcome::kNotEvaluated};
          r.reason = e.message();
          result.fatal = e;
        }
        promoted_now = promoted_now || r.promoted;
        recorder.record(r);
        r.evaluated.reset();  // archived: the run's records keep no PTX or cubin in memory
        remember(r, last ? &*last : nullptr);
        records.push_back(r);
        ++candidates;
        llm::Outcome outcome;
        outcome.candidate_id = r.id;
        outcome.status = r.status.name();
        outcome.score = r.status.passed() ? r.score : 0.0;
        outcome.verdict = r.verdict;
        outcome.context = requests[i].context;
        provider.observe(outcome);
        progress(r);
        // A fatal error (the provider's, or an evaluation's) stops the run after this step: the
        // step's other candidates are recorded, as they were answered (and maybe evaluated).
      }
      if (result.fatal) {
        why = "error";
        break;
      }
      stall = promoted_now ? 0 : stall + 1;
    }
    result.stop_reason = why;
    finish(result);
    return result;
  }

  void finish(SearchResult& result) {
    result.candidates = records;
    result.best_id = best.id;
    result.best_source = best.source;
    result.best_score = best.score;
    result.seed_score = seed_score;
    result.tokens = tokens;
    result.cost = cost;
    result.seconds = seconds_since(t0);
    result.dropouts = dropouts;
    result.model_checks = model_checks;
    result.model_failures = model_failures;
    write_summary(result, options, op, reps, seconds_per_workload);
    recorder.finish(result.summary, result.summary_text);
    if (!options.out.empty()) write_file_atomic(options.out.string(), best.source);
  }
};

Search::Search(SearchOptions options, Evaluator& evaluator, llm::Provider& provider,
               RunRecorder& recorder, const std::atomic<bool>* stop, const Clock& clock)
    : impl_(
          std::make_shared<Impl>(std::move(options), evaluator, provider, recorder, stop, clock)) {}

void Search::resume(const std::vector<CandidateRecord>& earlier) { impl_->restore(earlier); }

SearchResult Search::run(const std::function<void(const Progress&)>& on_progress) {
  return impl_->run(on_progress);
}

std::string promotion_refusal(const Verdict& v) {
  if (!v.passed()) {
    return fmt::format("it does not pass ({}{})", status_name(v.status),
                       v.failure ? ": " + v.failure->message : std::string());
  }
  if (!v.suspect.empty()) {
    const WorkloadVerdict* w = v.first_suspect();
    return fmt::format(
        "it PASSED but is suspect ({}){}", v.suspect,
        w ? fmt::format(": workload {} {}", w->uuid, w->suspect->message) : std::string());
  }
  return "";
}

}  // namespace kharness::controller
