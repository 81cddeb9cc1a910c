// The run's records in the shared archive (kharness/archive.hpp: SQLite index + artifact files)
// as well as under the run folder (which --resume reads back). Every candidate — prompt, raw
// response, usage, source, verdict — becomes one archive candidate of the run; the archive scrubs
// anything that looks like a key before it writes.
#pragma once

#include <map>
#include <string>

#include "controller/recorder.hpp"
#include "kharness/archive.hpp"

namespace kharness::controller {

class ArchiveRecorder : public RunRecorder {
 public:
  ArchiveRecorder(FileRecorder& files, archive::Archive& archive, std::string operator_name)
      : files_(files), archive_(archive), operator_name_(std::move(operator_name)) {}
  void begin(const nlohmann::json& run) override;
  void record(const CandidateRecord& candidate) override;
  void finish(const nlohmann::json& summary, const std::string& summary_text) override;
  nlohmann::json load_run() override;
  std::vector<CandidateRecord> load_candidates() override;
  const std::string& run_id() const { return run_id_; }

 private:
  FileRecorder& files_;
  archive::Archive& archive_;
  std::string operator_name_;
  std::string run_id_;
  std::map<std::string, std::string> archive_ids_;  // c0001 -> archive candidate id
};

// The archive form of one controller record: the verdict as measured (its speedups over the
// incumbent it was timed against, which score.speedups_over names), and the record's speedup over
// the operator's baseline, measured (the seed) or estimated through the incumbent (the run's
// score).
archive::CandidateRecord to_archive_record(const CandidateRecord& c,
                                           const std::string& operator_name,
                                           const std::string& parent_archive_id);

}  // namespace kharness::controller
