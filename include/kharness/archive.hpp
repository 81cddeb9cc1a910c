// The archive (docs/archive.md): every evaluation kept, with a SQLite index for queries and plain
// files a person can open for the artifacts.
//
// Layout of an archive folder (default ./.kharness, else --archive DIR or $KHARNESS_ARCHIVE):
//   index.sqlite                 tables runs, candidates, verdicts, workload_results (WAL mode)
//   candidates/<id>/             source.cu, sources/..., plan.json, kernel.ptx, kernel.cubin,
//                                compile.log, compile.json, verdict.json, timing.json, record.json
//                                and, for model candidates, prompt.md, response.md, usage.json
//
// Crash safety: a candidate's files are written (each atomically, fsynced) into a temporary folder
// that is renamed into place before its index rows commit in one transaction, so a process killed
// at any moment leaves either no trace of the candidate or a complete one (at worst an unindexed
// folder, which nothing reads). Several processes may write one archive at once (SQLite WAL and a
// busy timeout serialise the commits).
//
// Secrets: every text and JSON value passes scrub_secrets() before it is written, so an API key
// that slipped into a prompt, a response or a run's info never reaches the disk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/solution.hpp"
#include "kharness/verdict.hpp"

namespace kharness::archive {

// A candidate's mean (and geometric mean) speedup over its operator's own baseline: the one figure
// the archive ranks candidates by (docs/archive.md#speedups). Measured when the verdict was timed
// against the operator's baseline; estimated when a run timed the candidate against its incumbent
// (the ratio to the incumbent times the incumbent's own figure).
struct OperatorSpeedup {
  double mean = 0.0;
  double geomean = 0.0;
  bool estimated = false;
};

// Everything known about one evaluated candidate. Only `operator_name` is required; what is
// empty is not written.
struct CandidateRecord {
  std::string name;                 // the solution's name
  std::string operator_name;        // definition name
  std::string origin;               // where it came from: a file path, "model", "tune", ...
  std::vector<SourceFile> sources;  // sources[entry] is written as source.cu, all under sources/
  std::size_t entry = 0;
  nlohmann::json plan;             // the launch plan as written (LaunchPlan::raw); null: none
  nlohmann::json compile;          // to_json(CompileResult) without the log; null: not compiled
  std::string compile_log;         // compile.log
  std::string ptx;                 // kernel.ptx
  std::string cubin;               // kernel.cubin (bytes)
  std::optional<Verdict> verdict;  // verdict.json, as measured; timing.json: per-workload timing
  // Over the operator's baseline (record.json and the index); none when the verdict was timed
  // against another baseline (score.speedups_over names it) or not timed.
  std::optional<OperatorSpeedup> operator_speedup;
  // Model candidates (empty / null when not from a model).
  std::string prompt;       // prompt.md
  std::string response;     // response.md (the raw answer)
  nlohmann::json usage;     // usage.json: tokens, cost, model, latency
  std::string parent_id;    // the candidate it was derived from; empty: none
  int step = -1;            // controller step; -1: not from a controller
  std::string cache_key;    // verdict cache key (verdict_cache_key); empty: not cacheable
  std::string cached_from;  // the candidate whose verdict this reuses; empty: evaluated
  nlohmann::json extra = nlohmann::json::object();  // anything else, kept in record.json
};

// One row of the index (what listing needs, without reading files).
struct CandidateSummary {
  std::string id;  // 12 hex digits; commands accept a unique prefix
  std::string run_id;
  int seq = 0;  // 1-based index within its run
  int step = -1;
  std::string parent_id;
  std::string name;
  std::string operator_name;
  std::string origin;
  std::string created_at;  // ISO-8601 UTC
  std::string status;      // verdict status name; "" when there is no verdict
  // For a PASSED verdict: its suspect marker ("faster_than_light"), "" when clean.
  std::string failure_kind;
  std::string failure_message;
  // The verdict's own figures, over what it was timed against (its score.speedups_over); 0 when
  // not timed.
  double mean_speedup = 0.0;
  double geomean_speedup = 0.0;
  // Over the operator's baseline (CandidateRecord::operator_speedup): what rankings compare; 0
  // when unknown.
  double operator_speedup = 0.0;
  bool operator_speedup_estimated = false;
  double mean_sol_fraction = 0.0;
  double seconds = 0.0;
  std::string gpu;
  std::string cache_key;
  std::string cached_from;
  std::filesystem::path dir;  // its artifact folder

  bool clean_pass() const { return status == "PASSED" && failure_kind.empty(); }
};

struct RunSummary {
  std::string id;  // "YYYYMMDD-HHMMSS-xxxx" (UTC time, 4 random hex digits)
  std::string started_at;
  std::string finished_at;    // empty while running (or when the process died)
  std::string state;          // "running", "finished", "failed", "interrupted", or any word
  std::string command;        // info["command"]
  std::string operator_name;  // info["operator"]
  nlohmann::json info;        // as given to begin_run, scrubbed
  int candidates = 0;
  int passed = 0;
  // The best operator speedup among clean PASSED (not suspect) candidates.
  double best_speedup = 0.0;
};

// A candidate with its files read back.
struct StoredCandidate {
  CandidateSummary summary;
  CandidateRecord record;
};

// Verdict cache key (docs/archive.md#verdict-cache): sha256 over every part, each length-prefixed.
struct CacheKeyParts {
  std::vector<SourceFile> sources;  // the candidate's sources
  nlohmann::json plan;              // its launch plan
  nlohmann::json options;           // mode, arch, check and timing options (what changes a verdict)
  std::string definition;           // the operator's definition file, as text
  std::string workloads;            // its workloads file(s), as text
  std::string harness;              // reference and baseline sources, as text
  std::string gpu;                  // GPU model; "" for compile-only
  std::string driver;               // driver version; "" for compile-only
  std::string kharness_version;     // version and commit
};
std::string verdict_cache_key(const CacheKeyParts& parts);

// Replaces what looks like a secret with "[REDACTED]": "sk-..." / "sk-ant-..." style keys,
// values of x-api-key / api_key / authorization headers and "Bearer ..." tokens.
std::string scrub_secrets(std::string_view text);
nlohmann::json scrub_json_secrets(const nlohmann::json& value);  // every string in it

// What Archive::merge did.
struct MergeStats {
  int sources = 0;             // source archives read
  int runs_added = 0;          // runs new to the destination
  int candidates_added = 0;    // candidates new to the destination (files and index rows)
  int candidates_present = 0;  // already there (same id): left as they are
  // Evaluated candidates whose verdict the destination already held under the same cache key:
  // added as candidates that reuse it (cached_from), as one process would have recorded them.
  int verdicts_reused = 0;
};

class Archive {
 public:
  // $KHARNESS_ARCHIVE, else ./.kharness.
  static std::filesystem::path default_dir();

  // Opens the archive in `dir`, creating the folder and the index when absent. Throws
  // kharness::Error (exit 3) when the folder cannot be created or the index cannot be opened.
  explicit Archive(const std::filesystem::path& dir);
  ~Archive();
  Archive(Archive&&) noexcept;
  Archive& operator=(Archive&&) noexcept;
  Archive(const Archive&) = delete;  // owns a database connection
  Archive& operator=(const Archive&) = delete;

  const std::filesystem::path& dir() const;

  // `kharness archive merge DEST SRC...` (docs/archive.md#merge): joins the runs, candidates (files
  // and index rows), verdicts and workload results of each source archive into `dest` (created when
  // absent). Identity: a run or candidate id already in `dest` is left as it is, so merging twice,
  // or merging archives that overlap (one merged into another, copies), adds nothing twice; and an
  // evaluated candidate whose cache key `dest` already holds an evaluated verdict for becomes a
  // candidate that reuses that verdict (cached_from), so a merged archive holds one verdict per
  // cache key like an archive one process filled. Every source is read and checked first (a
  // folder with an index.sqlite of kharness's schema that passes SQLite's quick_check, candidate
  // folders under candidates/ with regular files and JSON that parses): a corrupt or foreign one
  // is an input error (exit 2) naming its file, and `dest` is not touched. The index rows go in
  // one transaction; a failure while copying rolls it back and removes the folders copied.
  static MergeStats merge(const std::filesystem::path& dest,
                          const std::vector<std::filesystem::path>& sources);

  // A new run in state "running"; `info` (command, operator, argv, options, ...) is kept as JSON.
  // info["command"] and info["operator"], when strings, are also indexed.
  std::string begin_run(const nlohmann::json& info);
  void set_run_state(const std::string& run_id, const std::string& state);
  // Sets the state and the finish time.
  void finish_run(const std::string& run_id, const std::string& state = "finished");

  // Writes the candidate's files, then indexes it; returns its id. Throws Error (exit 3) on an
  // I/O failure, (exit 2) for an unknown run id.
  std::string add_candidate(const std::string& run_id, const CandidateRecord& record);

  // Newest first.
  std::vector<RunSummary> runs() const;
  std::optional<RunSummary> find_run(const std::string& id_or_prefix) const;
  // In insertion order; empty filters match everything.
  std::vector<CandidateSummary> candidates(const std::string& run_id = "",
                                           const std::string& operator_name = "") const;
  // The clean PASSED (not suspect) candidate with the highest mean speedup (then the newest).
  std::optional<CandidateSummary> best(const std::string& operator_name) const;
  // One best candidate per operator that has a PASSED one, by operator name.
  std::vector<CandidateSummary> best_per_operator() const;

  // By id or unique prefix. Throws Error (exit 2) when none or several match.
  StoredCandidate load(const std::string& id_or_prefix) const;
  // The newest evaluated (not itself cached) candidate with this key and a verdict.
  std::optional<CandidateSummary> find_cached(const std::string& cache_key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kharness::archive
