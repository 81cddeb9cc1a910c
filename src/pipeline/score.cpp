#include "pipeline/score.hpp"

#include <stdexcept>

#include "core/pool.hpp"

namespace kharness::pipeline {

std::vector<Verdict> score_submissions(SubmissionJudge& judge,
                                       const std::vector<Submission>& submissions,
                                       const std::vector<std::optional<GpuInfo>>& gpus,
                                       const std::string& shard, const ScoreEvents& events) {
  if (gpus.empty()) throw std::invalid_argument("score_submissions: no worker");
  std::vector<Verdict> verdicts(submissions.size());
  run_pool(submissions.size(), gpus.size(), [&](std::size_t i, std::size_t worker) {
    const Submission& s = submissions[i];
    if (events.starting) events.starting(i, s.path);
    nlohmann::json extra = {{"score_index", s.index}};
    if (!shard.empty()) extra["shard"] = shard;
    // A malformed submission comes back as its REJECTED verdict; no GPU, or a kharness bug,
    // throws: scoring cannot go on.
    Evaluation r = s.refused.empty() ? judge.evaluate(s.path, gpus[worker], extra)
                                     : judge.reject(s.path, input_error(s.path, s.refused), extra);
    if (events.finished) events.finished(i, s.path, r);
    verdicts[i] = std::move(r.verdict);
  });
  return verdicts;
}

}  // namespace kharness::pipeline
