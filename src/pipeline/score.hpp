// `score`'s evaluation of many submissions: every submission on the pool of GPU workers
// (core/pool.hpp), each verdict in its submission's place whatever order they finish in. The
// pipeline is behind an interface here so that tests can put a fake in its place and check the
// ordering and the exit codes without a GPU.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/verdict.hpp"
#include "pipeline/evaluation.hpp"

namespace kharness::pipeline {

// What `score` asks of the pipeline (pipeline::Evaluator). Both calls may come from several
// threads at once, one per GPU worker.
class SubmissionJudge {
 public:
  virtual ~SubmissionJudge() = default;
  // The verdict of the solution at `path` on `gpu` (nullopt: the first visible GPU); `extra` is
  // kept in its archive record. Throws only what no verdict can stand for (no GPU, exit 3; a
  // kharness failure, exit 4).
  virtual Evaluation evaluate(const std::string& path, const std::optional<GpuInfo>& gpu,
                              const nlohmann::json& extra) = 0;
  // The REJECTED verdict of a submission refused before it was read (the walk found a link).
  virtual Evaluation reject(const std::string& path, const Error& error,
                            const nlohmann::json& extra) = 0;
};

// The real pipeline as a judge.
class PipelineJudge final : public SubmissionJudge {
 public:
  explicit PipelineJudge(Evaluator& evaluator) : evaluator_(evaluator) {}
  Evaluation evaluate(const std::string& path, const std::optional<GpuInfo>& gpu,
                      const nlohmann::json& extra) override {
    return evaluator_.evaluate(path, gpu, extra);
  }
  Evaluation reject(const std::string& path, const Error& error,
                    const nlohmann::json& extra) override {
    return evaluator_.reject(path, error, extra);
  }

 private:
  Evaluator& evaluator_;
};

struct Submission {
  std::string path;
  std::size_t index = 0;  // its place in the whole sorted list (kept in its archive record)
  std::string refused;    // non-empty: why the walk refused it; it is rejected, not read
};

struct ScoreEvents {
  // Called from the worker that takes or finishes the submission (at most one call at a time
  // per worker; the callee serialises across workers).
  std::function<void(std::size_t item, const std::string& path)> starting;
  std::function<void(std::size_t item, const std::string& path, const Evaluation& result)> finished;
};

// Every submission judged on one worker per entry of `gpus` (at least one); the verdicts in the
// submissions' order. `shard` ("I/N", or empty) is kept in each record. The first exception a
// judge throws stops the hand-out of further submissions and is rethrown once those already
// taken have finished: a run that cannot go on gives no partial ranking.
std::vector<Verdict> score_submissions(SubmissionJudge& judge,
                                       const std::vector<Submission>& submissions,
                                       const std::vector<std::optional<GpuInfo>>& gpus,
                                       const std::string& shard, const ScoreEvents& events = {});

}  // namespace kharness::pipeline
