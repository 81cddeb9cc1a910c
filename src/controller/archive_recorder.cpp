#include "controller/archive_recorder.hpp"

#include <spdlog/spdlog.h>

#include "kharness/error.hpp"
#include "kharness/solution.hpp"

namespace kharness::controller {

using nlohmann::json;

archive::CandidateRecord to_archive_record(const CandidateRecord& c,
                                           const std::string& operator_name,
                                           const std::string& parent_archive_id) {
  // The pipeline's record of the evaluation (sources, plan, compile log, PTX, cubin) where there
  // was one; the candidate's own fields below replace what the run knows better.
  archive::CandidateRecord a = c.evaluated ? *c.evaluated : archive::CandidateRecord{};
  a.name = c.id;
  a.operator_name = operator_name;
  a.origin = c.provider.empty() ? "model" : c.provider;
  a.verdict.reset();
  if (!c.evaluated && !c.source.empty()) {
    try {
      Solution s = parse_single_file_solution(c.source, "solution.cu");
      a.sources = s.sources;
      a.entry = s.entry;
      a.plan = s.plan.raw;
    } catch (const Error&) {
      a.sources = {SourceFile{"solution.cu", c.source}};
    }
  }
  if (c.verdict.is_object()) {
    try {
      a.verdict = verdict_from_json(c.verdict);
      a.compile = a.verdict->compile;
      // The verdict stays as measured. A candidate timed against its incumbent has no measured
      // speedup over the operator's baseline: the run's estimate (its score) stands for it.
      const Score& score = a.verdict->score;
      const double mean = score.mean_speedup.value_or(0.0);
      if (!a.operator_speedup && c.speedup_vs_incumbent > 0 && c.score > 0 && mean > 0) {
        const double incumbent = c.score / mean;  // the incumbent's own speedup, as estimated
        a.operator_speedup = archive::OperatorSpeedup{
            c.score, score.geomean_speedup.value_or(0.0) * incumbent, true};
      }
    } catch (const Error& e) {
      spdlog::debug("{}: verdict not archived: {}", c.id, e.message());
    }
  }
  if (!c.prompt.empty()) a.prompt = c.system + "\n\n" + c.prompt;
  a.response = c.answer.raw.empty() ? c.answer.text : c.answer.raw;
  if (c.id != "c0000") {
    a.usage = {{"provider", c.provider},
               {"model", c.model},
               {"input_tokens", c.answer.usage.input_tokens},
               {"output_tokens", c.answer.usage.output_tokens},
               {"cache_read_tokens", c.answer.usage.cache_read_tokens},
               {"cost_usd", c.cost_usd},
               {"latency_seconds", c.answer.latency_seconds},
               {"stop_reason", c.answer.stop_reason}};
  }
  a.cache_key = c.cache_key;  // a later run's evaluation of the same kernel finds this verdict
  a.cached_from = c.cached_from;
  a.parent_id = parent_archive_id;
  a.step = c.step;
  a.extra = to_json(c);
  return a;
}

void ArchiveRecorder::begin(const json& run) {
  json info = run;
  info["command"] = "run";
  info["operator"] = operator_name_;
  run_id_ = archive_.begin_run(info);
  json stored = run;
  stored["archive_run"] = run_id_;
  stored["archive_dir"] = archive_.dir().string();
  files_.begin(stored);
}

void ArchiveRecorder::record(const CandidateRecord& c) {
  files_.record(c);
  if (run_id_.empty()) return;
  auto parent = archive_ids_.find(c.parent);
  std::string id = archive_.add_candidate(
      run_id_, to_archive_record(c, operator_name_,
                                 parent == archive_ids_.end() ? std::string() : parent->second));
  archive_ids_[c.id] = id;
}

void ArchiveRecorder::finish(const json& summary, const std::string& summary_text) {
  files_.finish(summary, summary_text);
  if (run_id_.empty()) return;
  std::string reason = summary.value("stop_reason", "");
  std::string state = reason == "interrupted" ? "interrupted"
                      : reason == "error"     ? "failed"
                                              : "finished";
  archive_.finish_run(run_id_, state);
}

json ArchiveRecorder::load_run() {
  json run = files_.load_run();
  run_id_ = run.value("archive_run", "");
  if (!run_id_.empty()) {
    if (archive_.find_run(run_id_)) {
      archive_.set_run_state(run_id_, "running");
      for (const auto& s : archive_.candidates(run_id_)) archive_ids_[s.name] = s.id;
    } else {
      spdlog::warn("run {} is not in the archive {}: a new archive run records the rest", run_id_,
                   archive_.dir().string());
      json info = run;
      info["command"] = "run";
      info["operator"] = operator_name_;
      info["resumed_from"] = run_id_;
      run_id_ = archive_.begin_run(info);
    }
  }
  return run;
}

std::vector<CandidateRecord> ArchiveRecorder::load_candidates() { return files_.load_candidates(); }

}  // namespace kharness::controller
