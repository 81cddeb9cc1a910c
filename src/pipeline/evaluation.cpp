#include "pipeline/evaluation.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <system_error>
#include <utility>

#include "core/json_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/version.hpp"
#include "pipeline/request.hpp"
#include "pipeline/worker_client.hpp"
#include "verify/load.hpp"

namespace kharness::pipeline {

namespace {

// A fresh, private compile cache for an invocation under --no-cache: the parent's one compile
// is stored there and the worker's compile of the same solution is a hit, while nothing compiled
// before this invocation is reused. "" when it cannot be made (each side then compiles).
std::filesystem::path make_private_cache() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "kharness-compile-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

// The baseline solution a request times the candidate against when it is the caller's (--baseline
// PATH, the controller's incumbent): the verdict cache keys it by its content, not its path.
bool keyed_baseline_file(const Request& request) {
  return request.baseline.kind == Baseline::Kind::kSolution && !request.baseline.from_operator;
}

}  // namespace

std::string speedups_over(const Baseline& baseline) {
  if (baseline.from_operator || baseline.kind == Baseline::Kind::kNone) return {};
  if (baseline.kind == Baseline::Kind::kCublasLt) return "cublaslt";
  return baseline.solution.filename().string();
}

std::optional<archive::OperatorSpeedup> measured_operator_speedup(const Baseline& baseline,
                                                                  const Verdict& v) {
  if (!baseline.from_operator || !v.score.mean_speedup) return std::nullopt;
  return archive::OperatorSpeedup{*v.score.mean_speedup, v.score.geomean_speedup.value_or(0.0),
                                  false};
}

Verdict bad_input_verdict(const std::string& path, const std::string& definition,
                          const Error& error) {
  Verdict v;
  v.solution = std::filesystem::path(path).stem().string();
  v.source = path;
  v.definition = definition;
  v.status = Status::kRejected;
  v.failure = Failure{"bad_input", error.message(), nlohmann::json::object()};
  return v;
}

Evaluator::Evaluator(Request shared) : shared_(std::move(shared)) {
  if (!shared_.target.use_cache) private_compile_cache_ = make_private_cache();
  if (shared_.holdout > 0) {
    holdout_seed_ = holdout_seed_from_environment();
    if (!holdout_seed_.from_environment) {
      spdlog::warn(
          "--holdout: KHARNESS_HOLDOUT_SEED is not set: the held-out shapes come from a random "
          "seed for this process (recorded as {}); set it to draw the same shapes again",
          holdout_seed_hash(holdout_seed_.value));
    }
  }
  const ArchiveSettings& settings = shared_.archive;
  std::filesystem::path dir = settings.dir.empty() ? archive::Archive::default_dir() : settings.dir;
  try {
    archive_.emplace(dir);
    if (!settings.enabled) return;  // read for the verdict cache only: the caller archives
    nlohmann::json opts = {{"mode", std::string(name_of(shared_.mode))},
                           {"arch", shared_.target.arch},
                           {"check", shared_.check.to_json()},
                           {"bench", shared_.bench.to_json()}};
    nlohmann::json info = {{"command", settings.command},
                           {"operator", shared_.target.operator_name},
                           {"solutions", settings.solutions},
                           {"options", opts},
                           {"cache", shared_.target.use_cache}};
    info.update(settings.run_info);
    run_id_ = archive_->begin_run(info);
  } catch (const Error& e) {
    spdlog::warn("not archiving (and no verdict cache): {}", e.message());
    archive_.reset();
  }
}

Evaluator::~Evaluator() {
  if (archive_ && !run_id_.empty() && !finished_) {
    try {
      archive_->finish_run(run_id_, "failed");
    } catch (const std::exception&) {
      // the run stays "running": nothing more to do while unwinding
    }
  }
  if (!private_compile_cache_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(private_compile_cache_, ec);
  }
}

void Evaluator::finish() {
  if (archive_ && !run_id_.empty()) archive_->finish_run(run_id_, "finished");
  finished_ = true;
}

Evaluation Evaluator::evaluate(const std::string& path, const std::optional<GpuInfo>& gpu,
                               const nlohmann::json& extra) {
  Candidate candidate;
  candidate.solution = path;
  candidate.gpu = gpu;
  candidate.extra = extra;
  return evaluate(std::move(candidate));
}

Evaluation Evaluator::evaluate(Candidate in) {
  Evaluation result;
  Request& request = result.request;
  std::optional<verify::Loaded> loaded;
  const std::string path = in.solution.string();
  const nlohmann::json extra = in.extra;
  std::string op_name = shared_.target.operator_name;
  try {
    // Loaded once: the candidate (parsed here), its operator and the reference; the cache key,
    // the compile, the worker's request and the archive's record all read this one load.
    Solution candidate = load_solution(path);
    ++result.loads;
    if (op_name.empty()) op_name = candidate.plan.definition;
    request = make_request(std::move(in), op_name);
    loaded = verify::load(std::move(candidate), request.target.operator_name,
                          request.target.operators_dirs, request.holdout_workloads);
    // The one choice of the baseline: the cache key, the worker and the verdict all read it.
    request.baseline = resolve_baseline(request, loaded->op);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;
    return bad_input(std::move(result), path, op_name, e, extra);
  }

  // Keyed first where the verdict cache is read: a hit compiles nothing and starts no worker.
  // Under --no-cache the key is only the archive's record of the evaluation: made alongside the
  // compile.
  std::string key;
  if (archive_ && shared_.target.use_cache) key = cache_key(request, *loaded);
  result.cache_key = key;
  if (!key.empty() && shared_.target.use_cache) {
    if (auto stored = cached(key, path)) {
      if (stored->record.verdict) {
        result.verdict = *stored->record.verdict;
        result.verdict.source = path;
        result.verdict.score.speedups_over = speedups_over(request.baseline);
        record_holdout(request, op_name, result.verdict);
        result.cached_from = stored->summary.id;
        auto record = std::make_shared<archive::CandidateRecord>(std::move(stored->record));
        record->origin = path;
        record->cached_from = stored->summary.id;
        record->parent_id.clear();
        record->step = -1;
        record->prompt.clear();
        record->response.clear();
        record->usage = nullptr;
        record->extra = extra;
        if (record->verdict) record->verdict->score.speedups_over = speedups_over(request.baseline);
        record->operator_speedup = measured_operator_speedup(request.baseline, result.verdict);
        if (shared_.archive.enabled) result.candidate_id = archive(*record);
        result.record = std::move(record);
        return result;
      }
    }
  }

  // A miss: compiled once, here; the worker's compiles of the same sources are hits of the
  // compile cache this compile stored into. What does not need the compile happens during it: the
  // worker starts first (its exec, driver, GPU lock and context overlap the compile; closed
  // without a request when the candidate does not compile), and the environment and the GPU's
  // clocks are read alongside.
  try {
    Prepared prepared;
    const bool gpu_work = request.mode != Mode::kCompile;
    if (gpu_work && gpu_available()) prepared.worker = start_worker(request);
    const auto compile_start = std::chrono::steady_clock::now();
    verify::compile(*loaded, compile_options(request), [&] {
      if (archive_ && !shared_.target.use_cache) key = cache_key(request, *loaded);
      if (!gpu_work) return;
      prepared.environment = environment();
      if (prepared.environment->gpu_ready())
        prepared.gpu = evaluation_gpu(request, *prepared.environment);
    });
    const double compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    spdlog::debug("{}: compiled in {:.3f} s (reference {:.3f} s and candidate {:.3f} s at once){}",
                  path, compile_seconds, loaded->reference_compiled.seconds,
                  loaded->candidate_compiled.seconds,
                  prepared.worker ? "; the worker started before it" : "");
    result.cache_key = key;
    if (!loaded->candidate_compiled.cache_hit) ++result.compiles;
    result.verdict = check_loaded(request, *loaded, std::move(prepared));
    result.verdict.phases["parent_compile"] = compile_seconds;
    result.verdict.score.speedups_over = speedups_over(request.baseline);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;  // no GPU, or a kharness failure
    result.cache_key = key;
    return bad_input(std::move(result), path, op_name, e, extra);  // e.g. a workload's inputs
  }
  record_holdout(request, op_name, result.verdict);
  auto record = std::make_shared<archive::CandidateRecord>();
  const Verdict& verdict = result.verdict;
  record->name = verdict.solution;
  record->operator_name = verdict.definition;
  record->origin = path;
  record->verdict = verdict;
  record->operator_speedup = measured_operator_speedup(request.baseline, verdict);
  record->cache_key = key;
  record->compile = verdict.compile.empty() ? nlohmann::json() : verdict.compile;
  record->sources = loaded->candidate.sources;
  record->entry = loaded->candidate.entry;
  record->plan = loaded->candidate.plan.raw;
  record->compile_log = loaded->candidate_compiled.log;
  record->ptx = loaded->candidate_compiled.ptx;
  record->cubin = loaded->candidate_compiled.cubin;
  record->extra = extra;
  if (archive_ && shared_.archive.enabled) result.candidate_id = archive(*record);
  result.record = std::move(record);
  spdlog::debug("{}: loaded {}x, compiled {}x{}", path, result.loads, result.compiles,
                loaded->candidate_compiled.cache_hit ? " (compile cache hit)" : "");
  return result;
}

Evaluation Evaluator::reject(const std::string& path, const Error& error,
                             const nlohmann::json& extra) {
  return bad_input(Evaluation{}, path, shared_.target.operator_name, error, extra);
}

// A malformed submission is that submission's failure (REJECTED "bad_input"), not the end of a
// score; a lone `check` stops with the error (exit 2).
Evaluation Evaluator::bad_input(Evaluation result, const std::string& path,
                                const std::string& op_name, const Error& e,
                                const nlohmann::json& extra) {
  result.bad_input = true;
  result.error = std::make_exception_ptr(e);
  result.verdict = bad_input_verdict(path, op_name, e);
  archive_failure(path, result.verdict, extra);
  return result;
}

// A submission that could not be evaluated is archived with its REJECTED verdict, so that an
// archive, and a merge of shards' archives, holds a verdict for every submission scored.
void Evaluator::archive_failure(const std::string& path, const Verdict& v,
                                const nlohmann::json& extra) {
  if (!archive_ || !shared_.archive.enabled) return;
  archive::CandidateRecord record;
  record.name = v.solution;
  record.operator_name = v.definition;
  record.origin = path;
  record.verdict = v;
  record.extra = extra;
  archive(record);
}

// The archived candidate whose verdict stands for `key`, if any. A cached candidate that does not
// load (an edited or damaged verdict.json, a FIFO in its folder) costs the cache hit, not the
// evaluation: a warning, and the candidate is evaluated again (its new verdict is the one later
// lookups find).
std::optional<archive::StoredCandidate> Evaluator::cached(const std::string& key,
                                                          const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    if (auto hit = archive_->find_cached(key)) return archive_->load(hit->id);
  } catch (const Error& e) {
    spdlog::warn("verdict cache: {}: ignored for {}, evaluating again", e.message(), path);
  }
  return std::nullopt;
}

// The held-out shapes of an operator (drawn once per operator), or none. An operator that cannot
// be found gets none here: the load says why.
const HoldoutDraw* Evaluator::holdout_for(const std::string& op_name) const {
  if (shared_.holdout <= 0 || op_name.empty()) return nullptr;
  try {
    std::lock_guard<std::mutex> lock(draws_mutex_);  // the pool's workers draw concurrently
    auto it = draws_.find(op_name);
    if (it == draws_.end()) {
      Operator op = OperatorRegistry::from_environment(shared_.target.operators_dirs).load(op_name);
      it = draws_.emplace(op_name, draw_holdout(op, shared_.holdout, holdout_seed_.value)).first;
      for (const auto& note : it->second.notes) spdlog::warn("--holdout: {}", note);
    }
    return &it->second;
  } catch (const Error&) {
    return nullptr;
  }
}

// What the verdict says of the held-out shapes: how many, and the seed only as a hash.
void Evaluator::record_holdout(const Request& request, const std::string& op_name,
                               Verdict& v) const {
  if (shared_.holdout <= 0) return;
  nlohmann::json uuids = nlohmann::json::array();
  for (const auto& w : request.holdout_workloads) uuids.push_back(w.value("uuid", ""));
  const HoldoutDraw* draw = holdout_for(op_name);
  v.score.holdout = {{"requested", shared_.holdout},
                     {"drawn", request.holdout_workloads.size()},
                     {"seed_hash", holdout_seed_hash(holdout_seed_.value)},
                     {"seed_from_environment", holdout_seed_.from_environment},
                     {"workloads", uuids},
                     {"notes", draw ? draw->notes : std::vector<std::string>{}}};
}

Request Evaluator::make_request(Candidate candidate, const std::string& op_name) const {
  Request request = with_candidate(shared_, std::move(candidate));
  request.compile_cache_dir = private_compile_cache_;
  if (const HoldoutDraw* draw = holdout_for(op_name)) {
    for (const auto& w : draw->workloads) request.holdout_workloads.push_back(to_json(w));
    // --workloads narrows the shipped workloads; the held-out ones are always checked.
    if (!request.check.workloads.empty() && !draw->workloads.empty())
      request.check.workloads.push_back("holdout-");
  }
  return request;
}

// What changes a verdict, besides the candidate, the operator and the machine. The seed counts
// only when given: a verdict under a random seed stands for any seed (so each candidate of a run,
// evaluated under its own seed, is keyed as under any).
nlohmann::json Evaluator::cache_options(const Request& request) const {
  nlohmann::json j = {{"mode", std::string(name_of(request.mode))},
                      {"arch", request.target.arch},
                      {"check", request.check.to_json()}};
  if (!request.seed_given) j["check"].erase("seed");
  if (request.holdout > 0) {
    j["holdout"] = {{"count", request.holdout},
                    {"seed_hash", holdout_seed_hash(holdout_seed_.value)}};
  }
  if (request.mode == Mode::kCompile) {
    j.erase("check");
  } else {
    // A launch slower than this is a TIMEOUT under one limit and may pass under another.
    j["launch_timeout"] = request.timeouts.launch_seconds;
  }
  if (request.mode == Mode::kBench || request.mode == Mode::kValidate) {
    j["bench"] = request.bench.to_json();
    // A baseline file by its content (cache_key), not its path: the controller's incumbent is a
    // new file per run with the same kernel in it.
    if (keyed_baseline_file(request)) j["bench"]["baseline_solution"] = "file (by content)";
    j["timeout"] = request.timeouts.seconds;
  }
  // A worker run under a tool (compute-sanitizer) can fail where a plain one passes.
  if (const char* wrapper = std::getenv("KHARNESS_WORKER_WRAPPER"); wrapper && *wrapper)
    j["worker_wrapper"] = wrapper;
  return j;
}

// A solution's sources as a verdict cache key names them: a single file by its file name, not its
// full path, so the same kernel in another folder (each run writes its candidates, and its
// incumbent, into its own) is the same key.
static std::vector<SourceFile> keyed_sources(const Solution& solution) {
  std::vector<SourceFile> sources = solution.sources;
  std::error_code ec;
  if (sources.size() == 1 && !solution.origin.empty() &&
      std::filesystem::is_regular_file(solution.origin, ec) &&
      solution.origin.extension() != ".json") {
    sources[0].path = solution.origin.filename().string();
  }
  return sources;
}

// The verdict cache key, or "" when the candidate cannot be keyed (the check then reports why).
std::string Evaluator::cache_key(const Request& request, const verify::Loaded& loaded) {
  try {
    const Operator& op = loaded.op;
    archive::CacheKeyParts parts;
    // A single file is named by its full path when loaded: keyed by its file name, so the same
    // kernel in another folder (each run writes its candidates into its own) is the same key.
    parts.sources = keyed_sources(loaded.candidate);
    parts.plan = loaded.candidate.plan.raw;
    parts.options = cache_options(request);
    parts.definition = read_file(op.definition_file.string());
    if (op.workloads_file) parts.workloads = read_file(op.workloads_file->string());
    // The operator's workloads (the held-out ones among them) as this evaluation runs them.
    for (const auto& w : op.workloads) parts.workloads += json_util::dump(to_json(w));
    for (const auto& f : loaded.reference.sources) parts.harness += f.path + f.content;
    if (includes_cutlass(loaded.candidate)) {
      // Other CUTLASS headers may compile the same source into another kernel.
      const std::optional<CutlassRoot> root = find_cutlass();
      parts.harness += "\ncutlass: " + (root ? root->version + " " + root->include_dir.string()
                                             : std::string("none"));
    }
    if (op.baseline) {
      for (const auto& f : load_solution(*op.baseline).sources) parts.harness += f.path + f.content;
    }
    if (keyed_baseline_file(request) && request.mode != Mode::kCompile) {
      parts.harness += "\nbaseline solution:\n";
      // By file name too: the controller's incumbent is the same kernel in each run's folder.
      for (const auto& f : keyed_sources(load_solution(request.baseline.solution)))
        parts.harness += f.path + f.content;
    }
    if (request.mode != Mode::kCompile) {
      const EnvironmentReport env = environment();
      if (!env.gpu_ready()) return "";  // the check says "no GPU"
      parts.gpu = request.candidate.gpu ? request.candidate.gpu->name : env.gpus[0].name;
      parts.driver = env.driver.nvidia_version;
    }
    parts.kharness_version = fmt::format("{} ({})", kVersion, kGitCommit);
    return archive::verdict_cache_key(parts);
  } catch (const Error& e) {
    spdlog::debug("no verdict cache key for {}: {}", request.candidate.solution.string(),
                  e.message());
    return "";
  }
}

// Probed once per Evaluator: the cache keys and the verdicts' environment read this one probe,
// and each evaluation reads only its own GPU's clocks again (evaluation_gpu). The driver
// (cuInit) loads once per process whoever probes first.
EnvironmentReport Evaluator::environment() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!env_) env_ = probe_environment();
  return *env_;
}

std::string Evaluator::archive(const archive::CandidateRecord& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    return archive_->add_candidate(run_id_, record);
  } catch (const Error& e) {
    spdlog::warn("could not archive {}: {}", record.origin, e.message());
    return "";
  }
}

}  // namespace kharness::pipeline
