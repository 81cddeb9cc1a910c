// Where a run keeps every candidate: the prompt, the raw response, usage, the solution and its
// verdicts. RunRecorder is the small interface the search loop writes through; FileRecorder keeps
// plain files under the run folder (atomic writes: a killed run loses at most the candidate in
// flight, and --resume reads the records back). API keys never reach it: requests are recorded as
// the prompt text, never as HTTP headers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/outcome.hpp"
#include "kharness/archive.hpp"
#include "llm/provider.hpp"

namespace kharness::controller {

struct CandidateRecord {
  std::string id;      // "c0001"; "c0000" is the seed
  int step = 0;        // search step (0: the seed)
  std::string parent;  // the kernel it refines
  std::string provider, model;
  std::string system, prompt;  // the exact prompt sent
  llm::Answer answer;          // text, usage, stop reason, latency, raw body
  double cost_usd = 0.0;
  std::string source;  // the solution file (empty when none could be extracted)
  // PASSED, COMPILE_ERROR, ... (the verdict's), NO_CODE, BAD_PLAN, TRUNCATED, COMPILED, SUSPECT
  // (PASSED but timed faster than light: never promoted), ... (controller/outcome.hpp)
  CandidateStatus status;
  std::string reason;  // one line
  std::string note;    // the controller's remark (promoted, within noise, not promising, ...)
  bool promoted = false;
  double score = 0.0;  // mean speedup over the operator's baseline (estimated through the parent)
  double speedup_vs_incumbent = 0.0;
  double noise = 0.0;
  std::string stage;  // "compile", "representatives", "full", "none"
  int workloads_evaluated = 0;
  double gpu_seconds = 0.0;    // evaluation wall time
  double saved_seconds = 0.0;  // full-validation time the cascade did not spend
  // The verdict cache's key of the evaluation whose verdict this record keeps (the archive keeps
  // it, so a later run finds the verdict), and the archived candidate it came from when the cache
  // answered ("" when evaluated).
  std::string cache_key, cached_from;
  std::vector<std::string> prompt_cuts;
  std::string restart;    // set on the first candidate after an optimisation-dropout restart
  std::string diagnosis;  // for the best kernels: the profile stage's diagnosis of it
  // In-model validation (`run --model`): what the model-check said of it (ModelVerdict's JSON:
  // outcome, layer speedup, the operator's share), null when none ran; and the whole model-check
  // verdict (candidates/<id>/model_check.json; not read back by --resume).
  nlohmann::json model_check;
  nlohmann::json model_verdict;
  nlohmann::json verdict;       // the last verdict (null when nothing ran)
  nlohmann::json best_verdict;  // for a promoted one: the verdict as the prompt shows it
  // The pipeline's archive record of the evaluation whose verdict this record keeps (compile log,
  // PTX, cubin included): what the archive keeps of the candidate, with the fields above added.
  // In memory only: the run folder does not keep it (the archive does), and --resume does not
  // read it back.
  std::shared_ptr<const archive::CandidateRecord> evaluated;
};

nlohmann::json to_json(const CandidateRecord& r);  // without the large texts
CandidateRecord record_from_json(const nlohmann::json& j);

class RunRecorder {
 public:
  virtual ~RunRecorder() = default;
  virtual void begin(const nlohmann::json& run) = 0;  // the run's options (no keys)
  virtual void record(const CandidateRecord& candidate) = 0;
  virtual void finish(const nlohmann::json& summary, const std::string& summary_text) = 0;
  // What an earlier session of this run recorded, in order (for --resume).
  virtual nlohmann::json load_run() = 0;
  virtual std::vector<CandidateRecord> load_candidates() = 0;
};

// <run>/run.json, <run>/candidates/<id>/{record.json, system.txt, prompt.md, response.raw,
// answer.md, solution.cu, verdict.json, model_check.json}, <run>/summary.{json,md}.
class FileRecorder : public RunRecorder {
 public:
  explicit FileRecorder(std::filesystem::path dir) : dir_(std::move(dir)) {}
  void begin(const nlohmann::json& run) override;
  void record(const CandidateRecord& candidate) override;
  void finish(const nlohmann::json& summary, const std::string& summary_text) override;
  nlohmann::json load_run() override;
  std::vector<CandidateRecord> load_candidates() override;
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path solution_path(const std::string& id) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kharness::controller
