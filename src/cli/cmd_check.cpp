// kharness check SOLUTION... --operator NAME [--workloads U,...] [--trials N] [--seed N] [--json]
// and the hidden worker mode it runs each solution in.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/shard.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "core/pool.hpp"
#include "kharness/archive.hpp"
#include "kharness/device.hpp"
#include "kharness/holdout.hpp"
#include "kharness/report.hpp"
#include "kharness/run_compare.hpp"
#include "kharness/sanitize.hpp"
#include "kharness/text.hpp"
#include "kharness/verify.hpp"
#include "kharness/version.hpp"
#include "pipeline/evaluation.hpp"
#include "pipeline/score.hpp"
#include "pipeline/walk.hpp"
#include "pipeline/worker.hpp"

namespace kharness::cli {
namespace {

struct CheckArgs {
  // What every evaluation of the invocation shares, its flags bound straight to its fields: the
  // mode, the operator, the limits, the correctness and timing options, --holdout.
  // invocation_request completes it (operator folders, arch, seed, sharing, archive).
  pipeline::Request request;
  // score: report files
  std::string json_file, junit_file, markdown_file, traces_file;
  std::string csv_file;  // every mode: one row per solution x workload
  std::vector<std::string> solutions;
  std::string seed;  // as given ("": random)
  std::string arch;  // as given ("": this GPU)
  bool json = false;
  std::string gpus;          // --gpus all|LIST; "": all visible GPUs (one worker without GPU work)
  std::string shard;         // score --shard I/N; "": everything
  std::string from_archive;  // score --from-archive DIR: render archived verdicts, evaluate none
};

std::string number(double v) {
  if (v == 0) return "0";
  return fmt::format("{:.3g}", v);
}

std::string render_verdict(const Verdict& v, int verbosity) {
  std::string out = fmt::format("{} [{}]: {}", v.source, v.definition, status_name(v.status));
  if (v.failure) out += fmt::format(" ({}): {}", v.failure->kind, v.failure->message);
  if (const WorkloadVerdict* w = v.first_suspect()) {
    out += fmt::format(" but SUSPECT ({}): workload {} {}", v.suspect, w->uuid.substr(0, 8),
                       w->suspect->message);
  } else if (!v.suspect.empty()) {
    out += fmt::format(" but SUSPECT ({})", v.suspect);
  }
  out += "\n";
  if (!v.workloads.empty()) {
    Table table({"  workload", "axes", "status", "trials", "max abs err", "max rel err", "matched",
                 "failure"});
    for (const auto& w : v.workloads) {
      std::vector<std::string> axes;
      for (auto it = w.axes.begin(); it != w.axes.end(); ++it)
        axes.push_back(fmt::format("{}={}", it.key(), json_util::dump(it.value())));
      double max_abs = 0, max_rel = 0, matched = 1;
      for (const auto& t : w.trials) {
        for (const auto& c : t.comparisons) {
          max_abs = std::max(max_abs, c.max_abs_error);
          max_rel = std::max(max_rel, c.max_rel_error);
          matched = std::min(matched, c.matched_ratio);
        }
      }
      bool compared = !w.trials.empty() && !w.trials[0].comparisons.empty();
      table.add({"  " + w.uuid.substr(0, 8), join(axes, " "), std::string(status_name(w.status)),
                 std::to_string(w.trials.size()), compared ? number(max_abs) : "-",
                 compared ? number(max_rel) : "-", compared ? fmt::format("{:.4f}", matched) : "-",
                 w.failure ? w.failure->kind : ""});
    }
    out += table.render();
  }
  bool timed = std::any_of(v.workloads.begin(), v.workloads.end(),
                           [](const WorkloadVerdict& w) { return w.timing.timed(); });
  if (timed) {
    Table t({"  workload", "axes", "latency", "baseline", "speedup", "% SOL", "noise", "samples",
             "note"});
    auto us = [](const ContenderTiming& c) { return fmt::format("{:.2f} us", c.latency * 1e6); };
    for (const auto& w : v.workloads) {
      if (!w.timing.candidate) continue;
      const ContenderTiming& c = *w.timing.candidate;
      std::vector<std::string> axes;
      for (auto it = w.axes.begin(); it != w.axes.end(); ++it)
        axes.push_back(fmt::format("{}={}", it.key(), json_util::dump(it.value())));
      std::string note;
      if (!c.stats.noise_met) note = "noise target not met";
      if (w.suspect) note = "FASTER THAN LIGHT";
      if (c.clock_flagged_samples > 0)
        note += (note.empty() ? "" : "; ") +
                fmt::format("{} samples at low SM clock", c.clock_flagged_samples);
      t.add({"  " + w.uuid.substr(0, 8), join(axes, " "), us(c),
             w.timing.baseline ? us(*w.timing.baseline) : "-",
             w.timing.speedup ? fmt::format("{:.3f}x", *w.timing.speedup) : "-",
             w.timing.sol ? fmt::format("{:.1f}%", 100 * w.timing.sol->fraction) : "-",
             fmt::format("{:.2f}%", 100 * c.stats.noise), std::to_string(c.stats.count), note});
    }
    out += t.render();
    if (v.score.mean_speedup) {
      out += fmt::format("  score: mean speedup {:.3f}x, geomean {:.3f}x", *v.score.mean_speedup,
                         v.score.geomean_speedup.value_or(0.0));
      if (!v.score.speedups_over.empty()) out += " over " + v.score.speedups_over;
      if (v.score.mean_sol_fraction)
        out += fmt::format(", mean {:.1f}% of speed-of-light", 100 * *v.score.mean_sol_fraction);
      out += "\n";
    }
  }
  if (const nlohmann::json& h = v.score.holdout; h.is_object()) {
    out += fmt::format(
        "  holdout: {} of {} held-out workloads, seed {}{}\n", json_util::whole_or(h, "drawn", 0),
        json_util::whole_or(h, "requested", 0), h.value("seed_hash", ""),
        h.value("seed_from_environment", false) ? " (KHARNESS_HOLDOUT_SEED)" : " (random)");
  }
  out += fmt::format("  seed {} (replay with --seed {}), {:.2f} s\n", v.seed, v.seed, v.seconds);
  if (!v.worker_stderr.empty() && (verbosity > 0 || !v.clean_pass())) {
    std::string tail = v.worker_stderr.size() > 2000
                           ? "…" + v.worker_stderr.substr(v.worker_stderr.size() - 2000)
                           : v.worker_stderr;
    out += "  worker stderr:\n    " + tail + "\n";
  }
  return out;
}

// Before anything else (the driver included): a bad number is bad usage (2) on any machine.
// Comparisons are written !(x > 0) so that NaN is refused too.
void validate_args(const CheckArgs& args) {
  const pipeline::Request& r = args.request;
  if (r.check.trials < 1) throw input_error("--trials", "must be at least 1");
  if (r.bench.input_sets < 2)
    throw input_error("--input-sets", "must be at least 2 (inputs are visited in a random order)");
  if (!(r.bench.max_noise > 0)) throw input_error("--max-noise", "must be > 0");
  if (!(r.timeouts.seconds > 0)) throw input_error("--timeout", "must be > 0 seconds");
  validate_launch_timeout(r.timeouts.launch_seconds);
  if (!(r.bench.max_seconds > 0)) throw input_error("--max-time", "must be > 0 seconds");
  if (r.bench.warmup < 0) throw input_error("--warmup-runs", "must be >= 0");
  if (!(r.bench.warmup_seconds >= 0)) throw input_error("--warmup-seconds", "must be >= 0");
  if (r.bench.iterations < 1) throw input_error("--iterations", "must be at least 1");
  if (r.bench.trials < 1) throw input_error("--num-trials", "must be at least 1");
  if (r.holdout < 0 || r.holdout > 1000)
    throw input_error("--holdout", "must be between 0 and 1000 workloads per definition");
  // The tolerances default to the definition's (unset: not given); bench has none.
  if (r.check.atol && !(*r.check.atol >= 0)) throw input_error("--atol", "must be >= 0");
  if (r.check.rtol && !(*r.check.rtol >= 0)) throw input_error("--rtol", "must be >= 0");
  if (const auto& m = r.check.required_matched_ratio; m && !(*m > 0 && *m <= 1)) {
    throw input_error("--required-matched-ratio", "must be in (0, 1]");
  }
  validate_gpus_flag(args.gpus);
  if (!args.shard.empty()) parse_shard(args.shard);
  if (!args.from_archive.empty() && !args.shard.empty())
    throw input_error("--from-archive",
                      "renders what the archive holds; --shard selects what to "
                      "evaluate: give one of them");
  if (args.from_archive.empty() && args.solutions.empty())
    throw input_error("solutions", "give the solutions (or folders) to evaluate");
}

// The workers of this invocation (docs/pipeline.md#pools-and-gpus), and the arch they compile for.
struct Pool {
  std::vector<std::optional<GpuInfo>> gpus;  // one entry per worker
  std::string arch;
  int sharing = 1;  // the most workers on one GPU (gpu_sharing)
};

Pool make_pool(const CheckArgs& args) {
  Pool pool;
  pool.gpus = resolve_gpus(args.gpus, args.request.mode != Mode::kCompile, !args.arch.empty());
  pool.arch = args.arch.empty() && pool.gpus[0] && !pool.gpus[0]->arch.empty()
                  ? normalize_arch(pool.gpus[0]->arch)
                  : resolve_arch(args.arch);
  pool.sharing = gpu_sharing(pool.gpus);
  return pool;
}

// The shared request of one invocation (pipeline/request.hpp): the flags' request, completed with
// what the command line gives only once resolved: the catalogue folders, the pool's arch and
// sharing (each worker's --timeout is that many times longer, as it may wait for the others'
// timings), the seed, and the archive's run record.
pipeline::Request invocation_request(const CheckArgs& args, const GlobalOptions& global,
                                     std::uint64_t seed, const Pool& pool,
                                     const std::string& command,
                                     const nlohmann::json& run_info = nlohmann::json::object()) {
  pipeline::Request r = args.request;
  r.target.operators_dirs = global.operators_dirs;
  r.target.arch = pool.arch;
  r.sharing = pool.sharing;
  r.check.seed = seed;
  r.seed_given = !args.seed.empty();
  r.archive.dir = global.archive_dir;
  r.archive.command = command;
  r.archive.solutions = args.solutions;
  r.archive.run_info = run_info;
  return r;
}

// " (cached: verdict of candidate ID)" or "".
std::string cached_note(const pipeline::Evaluation& r) {
  return r.cached_from.empty() ? ""
                               : fmt::format(" (cached: verdict of candidate {})", r.cached_from);
}

ExitCode run_check(const CheckArgs& args, const GlobalOptions& global) {
  validate_args(args);
  const std::string mode(name_of(args.request.mode));
  require_compile_sandbox(mode);
  if (!args.csv_file.empty()) check_output_file("--csv", args.csv_file);
  std::uint64_t seed = parse_seed_flag("--seed", args.seed);
  Pool pool = make_pool(args);
  pipeline::Evaluator evaluator(invocation_request(args, global, seed, pool, mode));
  nlohmann::json all = nlohmann::json::array();
  std::vector<Verdict> verdicts;
  bool all_passed = true;
  // Verdicts are printed in the order the solutions were given, each as soon as every earlier
  // one is done, whichever worker finished first.
  std::vector<std::optional<pipeline::Evaluation>> results(args.solutions.size());
  std::size_t printed = 0;
  std::mutex mutex;
  auto print = [&](const pipeline::Evaluation& r) {
    const Verdict& v = r.verdict;
    verdicts.push_back(v);
    all_passed = all_passed && v.clean_pass();
    if (args.json) {
      nlohmann::json j = to_json(v);
      if (!r.candidate_id.empty()) j["candidate"] = r.candidate_id;
      if (!r.cached_from.empty()) j["cached_from"] = r.cached_from;
      all.push_back(j);
    } else {
      if (!r.cached_from.empty())
        std::printf("cached: verdict of candidate %s (--no-cache reruns)\n", r.cached_from.c_str());
      // A verdict quotes the submission (file names, compiler messages): no control sequence of
      // its reaches the terminal.
      std::fputs(printable_text(render_verdict(v, global.verbosity)).c_str(), stdout);
      if (!r.candidate_id.empty() && global.verbosity > 0)
        std::printf("  archived as candidate %s\n", r.candidate_id.c_str());
      std::fflush(stdout);
    }
  };
  run_pool(args.solutions.size(), pool.gpus.size(), [&](std::size_t i, std::size_t worker) {
    pipeline::Evaluation r = evaluator.evaluate(args.solutions[i], pool.gpus[worker]);
    if (r.bad_input) std::rethrow_exception(r.error);  // a lone check stops: exit 2, one line
    if (global.verbosity > 0)
      spdlog::info("{}: loaded {}x, compiled {}x", args.solutions[i], r.loads, r.compiles);
    std::lock_guard<std::mutex> lock(mutex);
    results[i] = std::move(r);
    for (; printed < results.size() && results[printed]; ++printed) print(*results[printed]);
  });
  evaluator.finish();
  if (!args.csv_file.empty()) write_output("--csv", args.csv_file, report::to_csv(verdicts));
  if (args.json)
    std::fputs((json_util::dump((args.solutions.size() == 1 ? all[0] : all), 2) + "\n").c_str(),
               stdout);
  return all_passed ? ExitCode::kPassed : ExitCode::kFailed;
}

// A progress line on a terminal (rewritten in place), plain lines otherwise; on stderr. Workers
// call it from their threads: lines never interleave. `index` is the solution's place in the
// sorted list, whichever worker took it.
class Progress {
 public:
  explicit Progress(std::size_t total)
      : total_(total), tty_(::isatty(2) != 0), start_(std::chrono::steady_clock::now()) {}
  void starting(std::size_t index, const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tty_) return;
    double elapsed = seconds();
    std::string eta = index == 0 ? "?"
                                 : fmt::format("{:.0f} s", elapsed / static_cast<double>(index) *
                                                               static_cast<double>(total_ - index));
    std::fprintf(stderr, "\r\033[K[%zu/%zu] %s  elapsed %.0f s  eta %s", index + 1, total_,
                 printable_line(name).c_str(), elapsed, eta.c_str());
    std::fflush(stderr);
  }
  void finished(std::size_t index, const std::string& name, const Verdict& v,
                const std::string& note) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K");
    }
    std::string status(status_name(v.status));
    if (!v.suspect.empty()) status += " but SUSPECT (" + v.suspect + ")";
    std::fprintf(stderr, "[%zu/%zu] %s: %s (%.1f s)%s\n", index + 1, total_,
                 printable_line(name).c_str(), status.c_str(), v.seconds, note.c_str());
    std::fflush(stderr);
  }

 private:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::size_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
};

void write_report(const char* option, const std::string& file, const std::string& text) {
  if (!file.empty()) write_output(option, file, text);
}

// A submission the archive holds no verdict for (its shard never ran, or died): a failure, so
// the reports of a merged score show it.
Verdict missing_verdict(const std::string& path, const std::string& operator_name,
                        const std::string& archive_dir) {
  Verdict v;
  v.solution = std::filesystem::path(path).stem().string();
  v.source = path;
  v.definition = operator_name;
  v.status = Status::kRuntimeError;
  v.failure = Failure{"not_scored",
                      fmt::format("no verdict in the archive {} (did its shard run?)", archive_dir),
                      nlohmann::json::object()};
  return v;
}

// score --from-archive DIR [SOLUTIONS...]: the verdicts of the archive's `score` runs (the
// newest per submission), in the order one `score` would give them: the order of SOLUTIONS when
// given (a submission without a verdict is a not_scored failure), else the submissions' places
// in their sorted lists (kept by every shard), then their paths.
std::vector<Verdict> verdicts_from_archive(const CheckArgs& args,
                                           const std::vector<std::string>& solutions) {
  std::filesystem::path dir = args.from_archive;
  if (!std::filesystem::exists(dir / "index.sqlite"))
    throw input_error(dir.string(), "no archive here (no index.sqlite)");
  archive::Archive a(dir);
  std::map<std::string, archive::CandidateSummary> newest;  // by origin
  for (const auto& run : a.runs()) {
    if (run.command != "score") continue;
    for (auto& c : a.candidates(run.id)) {
      if (c.status.empty()) continue;
      auto it = newest.find(c.origin);
      if (it == newest.end() || c.created_at >= it->second.created_at) newest[c.origin] = c;
    }
  }
  auto load = [&](const archive::CandidateSummary& c, long* index) {
    archive::StoredCandidate stored = a.load(c.id);
    if (!stored.record.verdict)
      return missing_verdict(c.origin, args.request.target.operator_name, dir.string());
    Verdict v = *stored.record.verdict;
    v.source = c.origin;  // a reused verdict names the submission it was first evaluated for
    const nlohmann::json& extra = stored.record.extra;
    if (index && extra.is_object() && extra.contains("score_index") &&
        extra["score_index"].is_number_integer())
      *index = extra["score_index"].get<long>();
    return v;
  };
  std::vector<Verdict> out;
  if (!solutions.empty()) {
    for (const auto& path : solutions) {
      auto it = newest.find(path);
      out.push_back(it == newest.end()
                        ? missing_verdict(path, args.request.target.operator_name, dir.string())
                        : load(it->second, nullptr));
    }
    return out;
  }
  std::vector<std::pair<std::pair<long, std::string>, Verdict>> keyed;
  for (const auto& [origin, c] : newest) {
    long index = -1;
    Verdict v = load(c, &index);
    keyed.push_back({{index < 0 ? std::numeric_limits<long>::max() : index, origin}, std::move(v)});
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& k : keyed) out.push_back(std::move(k.second));
  return out;
}

ExitCode run_score(const CheckArgs& args, const GlobalOptions& global) {
  validate_args(args);
  if (args.from_archive.empty()) require_compile_sandbox("score");
  // A report path that cannot be written fails now, not after every solution has been scored.
  for (const auto& [option, file] :
       {std::pair<const char*, const std::string&>{"--json", args.json_file},
        {"--junit", args.junit_file},
        {"--markdown", args.markdown_file},
        {"--traces", args.traces_file},
        {"--csv", args.csv_file}}) {
    if (!file.empty()) check_output_file(option, file);
  }
  const pipeline::Submissions submissions =
      args.solutions.empty() ? pipeline::Submissions{} : pipeline::expand_solutions(args.solutions);
  const std::vector<std::string>& solutions = submissions.paths;
  std::vector<Verdict> verdicts;
  if (!args.from_archive.empty()) {
    verdicts = verdicts_from_archive(args, solutions);
  } else {
    // This shard's submissions, each with its place in the whole sorted list.
    std::vector<std::size_t> mine(solutions.size());
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = i;
    nlohmann::json run_info = {{"submissions", solutions.size()}};
    if (!args.shard.empty()) {
      Shard shard = parse_shard(args.shard);
      mine = shard_items(solutions.size(), shard);
      run_info["shard"] = shard.text();
    }
    std::uint64_t seed = parse_seed_flag("--seed", args.seed);
    Pool pool = make_pool(args);
    run_info["workers"] = pool.gpus.size();
    pipeline::Evaluator evaluator(invocation_request(args, global, seed, pool, "score", run_info));
    std::vector<pipeline::Submission> queue;
    for (std::size_t index : mine) {
      const std::string& path = solutions[index];
      auto refused = submissions.refused.find(path);
      queue.push_back({path, index, refused == submissions.refused.end() ? "" : refused->second});
    }
    Progress progress(mine.size());
    pipeline::PipelineJudge judge(evaluator);
    verdicts = pipeline::score_submissions(
        judge, queue, pool.gpus, args.shard,
        {[&](std::size_t i, const std::string& path) { progress.starting(i, path); },
         [&](std::size_t i, const std::string& path, const pipeline::Evaluation& r) {
           progress.finished(i, path, r.verdict, cached_note(r));
         }});
    evaluator.finish();
  }
  write_report("--json", args.json_file,
               json_util::dump(report::to_report_json(verdicts), 2) + "\n");
  write_report("--junit", args.junit_file, report::to_junit(verdicts, "kharness"));
  write_report("--markdown", args.markdown_file, report::to_markdown(verdicts));
  write_report("--csv", args.csv_file, report::to_csv(verdicts));
  if (!args.traces_file.empty()) {
    // The workloads of every operator scored, so a solution that failed before running any still
    // gets trace lines (a Trace needs a workload).
    report::TraceOptions traces;
    std::set<std::string> operators;
    for (const auto& v : verdicts) {
      if (!v.definition.empty()) operators.insert(v.definition);
    }
    OperatorRegistry registry = make_registry(global);
    for (const auto& name : operators) {
      try {
        Operator op = registry.load(name);
        for (const auto& w : op.workloads) {
          traces.workloads.push_back(
              {{"definition", op.definition.name}, {"workload", to_json(w)}});
        }
      } catch (const Error&) {
        // an operator that does not load: its failed solutions get no trace lines
      }
    }
    write_report("--traces", args.traces_file, report::to_traces_jsonl(verdicts, traces));
  }
  std::fputs(printable_text(report::to_markdown(verdicts)).c_str(), stdout);
  for (const auto& v : verdicts) {
    if (v.passed() && !v.suspect.empty()) {
      const WorkloadVerdict* w = v.first_suspect();
      spdlog::warn(
          "{}: PASSED but suspect ({}){}; ranked below every clean pass", v.source, v.suspect,
          w ? ": workload " + w->uuid.substr(0, 8) + " " + w->suspect->message : std::string());
    }
  }
  return exit_code_of(verdicts);
}

// The options every mode shares, then the timing options for bench and validate.
Runner setup_mode(CLI::App& app, const std::string& mode) {
  auto args = std::make_shared<CheckArgs>();
  pipeline::Request& r = args->request;
  r.mode = mode == "score" ? Mode::kValidate : parse_enum<Mode>(mode).value();
  if (mode != "check") r.timeouts.seconds = 300;
  if (mode == "validate" || mode == "score") {
    app.add_flag_callback(
        "--compile-only", [args] { args->request.mode = Mode::kCompile; },
        "Only compile and check the rules (no GPU needed)");
  }
  CLI::Option* solutions = app.add_option(
      "solutions", args->solutions,
      mode == "score" ? "Solutions and folders of solutions, scored in sorted order"
                      : "Solutions (.cu, folder or FlashInfer-Bench JSON); each in its own worker");
  if (mode != "score") solutions->required();  // score --from-archive may go without
  add_gpus_option(app, &args->gpus);
  add_operator_option(app, &r.target.operator_name);
  app.add_option("--workloads", r.check.workloads,
                 "Only these workloads (uuids or prefixes; repeatable or comma-separated)")
      ->delimiter(',')
      ->type_name("UUID");
  app.add_option("--timeout", r.timeouts.seconds,
                 mode == "check" ? "Wall-clock limit per solution in seconds (default 60)"
                                 : "Wall-clock limit per solution in seconds (default 300)");
  add_launch_timeout_option(app, &r.timeouts.launch_seconds);
  app.add_option("--seed", args->seed, "Base seed, to replay a verdict (default: random, printed)");
  app.add_option("--arch", args->arch, "Target (default: this GPU)")->type_name("ARCH");
  app.add_flag_callback(
      "--no-cache", [args] { args->request.target.use_cache = false; },
      "Recompute everything: bypass the verdict cache (the archive) and the compile cache");
  if (mode == "score") {
    app.add_option("--json", args->json_file, "Write the results as JSON (schema kharness.score/1)")
        ->type_name("FILE");
    app.add_option("--junit", args->junit_file,
                   "Write JUnit XML: a testcase per solution and workload")
        ->type_name("FILE");
    app.add_option("--markdown", args->markdown_file, "Write a Markdown leaderboard")
        ->type_name("FILE");
    app.add_option("--traces", args->traces_file, "Write FlashInfer-Bench Trace JSON lines")
        ->type_name("FILE");
    app.add_option("--shard", args->shard,
                   "Score only slice I of N (0-based I, like SLURM_ARRAY_TASK_ID): submission k "
                   "of the sorted list is in slice k mod N; merge the archives afterwards")
        ->type_name("I/N");
    app.add_option("--from-archive", args->from_archive,
                   "Evaluate nothing: write the reports from the verdicts of an archive's score "
                   "runs (a merged one: `kharness archive merge`), in the given solutions' "
                   "order when any are given")
        ->type_name("DIR");
  } else {
    app.add_flag("--json", args->json, "Print verdicts as JSON");
  }
  app.add_option("--csv", args->csv_file,
                 "Write CSV (RFC 4180): a header, then one row per solution and workload")
      ->type_name("FILE");
  if (mode != "bench") {
    app.add_option("--holdout", r.holdout,
                   "Add N held-out workloads per definition, drawn within the shipped shapes' "
                   "range from KHARNESS_HOLDOUT_SEED (random when unset; recorded as a hash)")
        ->type_name("N");
  }
  if (mode != "bench") {
    app.add_option("--trials", r.check.trials,
                   "Correctness trials per workload, each with fresh inputs (default 3)");
    // Unset unless given: the definition's tolerances hold.
    auto tolerance = [&app](const char* name, std::optional<double>* value, const char* help) {
      app.add_option_function<double>(
          name, [value](double v) { *value = v; }, help);
    };
    tolerance("--atol", &r.check.atol, "Absolute tolerance (default: the definition's)");
    tolerance("--rtol", &r.check.rtol, "Relative tolerance (default: the definition's)");
    tolerance("--required-matched-ratio", &r.check.required_matched_ratio,
              "Fraction of elements that must match (default: the definition's)");
  }
  if (mode != "check") {
    bench::BenchOptions& b = r.bench;
    add_enum_option(app, "--timing", &b.protocol,
                    "adaptive (stop at --max-noise) or official (FlashInfer-Bench's protocol)");
    add_enum_option(app, "--timer", &b.timer,
                    "cupti (default) or events (CUDA events, for comparison only)");
    app.add_option("--max-noise", b.max_noise,
                   "Adaptive: relative noise of the median to reach (default 0.005)");
    app.add_option("--max-time", b.max_seconds,
                   "Adaptive: seconds per workload before giving up on the noise (default 2)");
    app.add_option("--warmup-runs", b.warmup, "Warmup iterations (default 10)");
    app.add_option("--warmup-seconds", b.warmup_seconds,
                   "Adaptive: fewer warmup iterations once they would take longer than this "
                   "(default 0.05; 0: always --warmup-runs)");
    app.add_option("--iterations", b.iterations,
                   "Official: timed iterations per trial (default 50)");
    app.add_option("--num-trials", b.trials, "Official: trials (default 3)");
    app.add_option("--input-sets", b.input_sets,
                   "Input sets visited in a seeded random order during timing (default 3)");
    add_enum_option(app, "--state-reset", &b.state_reset,
                    "How a kernel's __device__ variables are reset before every iteration: auto "
                    "(initial bytes copied back) or reload (the module reloaded; to measure) "
                    "(default auto)");
    app.add_flag_callback(
        "--no-baseline", [args] { args->request.bench.baseline = false; },
        "Do not time the operator's baseline (no speedup)");
    // As given: resolve_baseline (pipeline/request.hpp) makes a path absolute.
    app.add_option("--baseline", b.baseline_solution,
                   "Baseline to time against: a solution, or 'cublaslt' (built-in cuBLASLt, for "
                   "GEMM operators) (default: the operator's)")
        ->excludes("--no-baseline");
    add_enum_option(app, "--sol", &b.sol,
                    "Speed-of-light ceilings: datasheet (configs/gpus) or measured (from "
                    "`kharness doctor --measure`) (default datasheet)");
  }
  if (mode == "score")
    return [args](const GlobalOptions& global) { return run_score(*args, global); };
  return [args](const GlobalOptions& global) { return run_check(*args, global); };
}

}  // namespace

Runner setup_check(CLI::App& app) { return setup_mode(app, "check"); }
Runner setup_bench(CLI::App& app) { return setup_mode(app, "bench"); }
Runner setup_validate(CLI::App& app) { return setup_mode(app, "validate"); }
Runner setup_score(CLI::App& app) { return setup_mode(app, "score"); }

Runner setup_worker(CLI::App&) {
  return [](const GlobalOptions&) { return static_cast<ExitCode>(pipeline::worker_main()); };
}

}  // namespace kharness::cli
