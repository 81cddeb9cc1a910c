#include "controller/recorder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/file.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"

namespace kharness::controller {

using nlohmann::json;

json to_json(const CandidateRecord& r) {
  return {{"id", r.id},
          {"step", r.step},
          {"parent", r.parent},
          {"provider", r.provider},
          {"model", r.model},
          {"usage",
           {{"input_tokens", r.answer.usage.input_tokens},
            {"output_tokens", r.answer.usage.output_tokens},
            {"cache_read_tokens", r.answer.usage.cache_read_tokens}}},
          {"stop_reason", r.answer.stop_reason},
          {"truncated", r.answer.truncated},
          {"latency_seconds", r.answer.latency_seconds},
          {"cost_usd", r.cost_usd},
          {"status", r.status.name()},
          {"reason", r.reason},
          {"note", r.note},
          {"promoted", r.promoted},
          {"score", r.score},
          {"speedup_vs_incumbent", r.speedup_vs_incumbent},
          {"noise", r.noise},
          {"stage", r.stage},
          {"workloads_evaluated", r.workloads_evaluated},
          {"gpu_seconds", r.gpu_seconds},
          {"saved_seconds", r.saved_seconds},
          {"cache_key", r.cache_key},
          {"cached_from", r.cached_from},
          {"prompt_cuts", r.prompt_cuts},
          {"restart", r.restart},
          {"diagnosis", r.diagnosis},
          {"model_check", r.model_check},
          {"has_source", !r.source.empty()}};
}

CandidateRecord record_from_json(const json& j) {
  CandidateRecord r;
  r.id = j.value("id", "");
  r.step = json_util::whole_or(j, "step", 0);
  r.parent = j.value("parent", "");
  r.provider = j.value("provider", "");
  r.model = j.value("model", "");
  json u = j.value("usage", json::object());
  r.answer.usage.input_tokens = json_util::whole_or(u, "input_tokens", std::int64_t{0});
  r.answer.usage.output_tokens = json_util::whole_or(u, "output_tokens", std::int64_t{0});
  r.answer.usage.cache_read_tokens = json_util::whole_or(u, "cache_read_tokens", std::int64_t{0});
  r.answer.stop_reason = j.value("stop_reason", "");
  r.answer.truncated = j.value("truncated", false);
  r.answer.latency_seconds = j.value("latency_seconds", 0.0);
  r.cost_usd = j.value("cost_usd", 0.0);
  r.status = CandidateStatus::parse(j.value("status", "")).value_or(CandidateStatus{});
  r.reason = j.value("reason", "");
  r.note = j.value("note", "");
  r.promoted = j.value("promoted", false);
  r.score = j.value("score", 0.0);
  r.speedup_vs_incumbent = j.value("speedup_vs_incumbent", 0.0);
  r.noise = j.value("noise", 0.0);
  r.stage = j.value("stage", "");
  r.workloads_evaluated = json_util::whole_or(j, "workloads_evaluated", 0);
  r.gpu_seconds = j.value("gpu_seconds", 0.0);
  r.saved_seconds = j.value("saved_seconds", 0.0);
  r.cache_key = j.value("cache_key", "");
  r.cached_from = j.value("cached_from", "");
  r.prompt_cuts = j.value("prompt_cuts", std::vector<std::string>{});
  r.restart = j.value("restart", "");
  r.diagnosis = j.value("diagnosis", "");
  if (auto m = j.find("model_check"); m != j.end() && m->is_object()) r.model_check = *m;
  return r;
}

void FileRecorder::begin(const json& run) {
  std::filesystem::create_directories(dir_ / "candidates");
  write_file_atomic((dir_ / "run.json").string(), json_util::dump(run, 2) + "\n");
}

std::filesystem::path FileRecorder::solution_path(const std::string& id) const {
  return dir_ / "candidates" / id / "solution.cu";
}

void FileRecorder::record(const CandidateRecord& r) {
  std::filesystem::path d = dir_ / "candidates" / r.id;
  std::filesystem::create_directories(d);
  auto put = [&](const char* name, const std::string& text) {
    if (!text.empty()) write_file_atomic((d / name).string(), text);
  };
  put("system.txt", r.system);
  put("prompt.md", r.prompt);
  put("response.raw", r.answer.raw);
  put("answer.md", r.answer.text);
  put("solution.cu", r.source);
  if (!r.verdict.is_null()) put("verdict.json", json_util::dump(r.verdict, 2) + "\n");
  if (!r.best_verdict.is_null())
    put("best_verdict.json", json_util::dump(r.best_verdict, 2) + "\n");
  if (!r.model_verdict.is_null())
    put("model_check.json", json_util::dump(r.model_verdict, 2) + "\n");
  // Last: a candidate folder without record.json is one a killed run left unfinished.
  write_file_atomic((d / "record.json").string(), json_util::dump(to_json(r), 2) + "\n");
}

void FileRecorder::finish(const json& summary, const std::string& summary_text) {
  write_file_atomic((dir_ / "summary.json").string(), json_util::dump(summary, 2) + "\n");
  write_file_atomic((dir_ / "summary.md").string(), summary_text);
}

json FileRecorder::load_run() {
  std::filesystem::path f = dir_ / "run.json";
  std::error_code ec;
  if (!std::filesystem::exists(f, ec)) throw input_error(dir_.string(), "no run.json: not a run");
  // A run folder may come from elsewhere (a CI artifact, a shared run): its files are read
  // beneath it with no symlink on the way, regular files only, size-capped.
  json j = json_util::parse_text<json>(read_file_beneath(dir_, "run.json"), f.string());
  if (!j.is_object()) throw input_error(f.string(), "not a JSON object");
  return j;
}

std::vector<CandidateRecord> FileRecorder::load_candidates() {
  std::vector<CandidateRecord> out;
  std::error_code ec;
  std::vector<std::filesystem::path> dirs;
  // Candidate folders as they are, not through links (a link is no candidate of this run).
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "candidates", ec)) {
    if (e.is_directory(ec) && !e.is_symlink(ec) &&
        std::filesystem::exists(std::filesystem::symlink_status(e.path() / "record.json", ec)))
      dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    // An edited or damaged run folder is an input error naming the file: --resume must not
    // continue from a state it cannot read.
    const std::string file = (d / "record.json").string();
    const std::filesystem::path inside = std::filesystem::path("candidates") / d.filename();
    json j = json_util::parse_text<json>(read_file_beneath(dir_, inside / "record.json"), file);
    json_util::require_object(j, file, "");
    CandidateRecord r;
    // A field of a wrong type is named (the record's own writer says what each one holds);
    // anything the check cannot see (inside a nested field) is still an input error.
    static const json kReference = to_json(CandidateRecord{});
    json_util::expect_types_like(j, kReference, file);
    r = json_util::reading(file, [&] { return record_from_json(j); });
    // "c0001": the search numbers its candidates from the id.
    if (r.id.size() < 2 || r.id.size() > 10 || r.id[0] != 'c' ||
        r.id.find_first_not_of("0123456789", 1) != std::string::npos)
      throw input_error(
          json_util::field(file, "id"),
          fmt::format("'{}' is not a candidate id (c0001)", printable_line(bounded(r.id, 40))));
    auto opt = [&](const char* name) {
      std::error_code e2;
      return std::filesystem::exists(std::filesystem::symlink_status(d / name, e2))
                 ? read_file_beneath(dir_, inside / name)
                 : std::string();
    };
    r.source = opt("solution.cu");
    r.answer.text = opt("answer.md");
    // The tune provider's raw answer is the configuration (the run summary names the best's).
    if (r.provider == "tune") r.answer.raw = opt("response.raw");
    auto verdict = [&](const char* name) {
      std::string text = opt(name);
      if (text.empty()) return json();
      const std::string f = (d / name).string();
      json v = json_util::parse_text<json>(text, f);
      verdict_from_json(v, f);  // the search reads it as a verdict
      return v;
    };
    r.verdict = verdict("verdict.json");
    r.best_verdict = verdict("best_verdict.json");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kharness::controller
