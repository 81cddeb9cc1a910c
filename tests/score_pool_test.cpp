// score's pool through a fake pipeline (pipeline/score.hpp): verdicts land in the submissions'
// order whatever order the workers finish in, every worker gets its own GPU, refused submissions
// are rejected unread, a judge that cannot go on stops the hand-out, and the exit code follows
// the verdicts (cli::exit_code_of).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cli/common.hpp"
#include "pipeline/score.hpp"

namespace kharness {
namespace {

using pipeline::Evaluation;
using pipeline::Submission;

// Judges by the file name: "pass*" PASSED, "fast*" PASSED but faster than light (suspect),
// "wrong*" INCORRECT_NUMERICAL, "nogpu*" throws the no-GPU error. Later submissions finish
// first (each waits less), so the pool's finishing order is not the submissions' order.
class FakeJudge : public pipeline::SubmissionJudge {
 public:
  Evaluation evaluate(const std::string& path, const std::optional<GpuInfo>& gpu,
                      const nlohmann::json& extra) override {
    const int item = extra.at("score_index").get<int>();
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * std::max(0, 8 - item)));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      evaluated_.push_back(path);
      finished_.push_back(item);
      if (gpu) gpus_by_path_[path] = gpu->uuid;
      extras_[path] = extra;
    }
    if (path.rfind("nogpu", 0) == 0) throw environment_error("no CUDA device visible");
    Evaluation e;
    e.verdict.source = path;
    if (path.rfind("pass", 0) == 0 || path.rfind("fast", 0) == 0) {
      e.verdict.status = Status::kPassed;
      if (path.rfind("fast", 0) == 0) e.verdict.suspect = "faster_than_light";
    } else {
      e.verdict.status = Status::kIncorrectNumerical;
    }
    return e;
  }
  Evaluation reject(const std::string& path, const Error& error, const nlohmann::json&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    rejected_.push_back(path);
    Evaluation e;
    e.verdict.source = path;
    e.verdict.status = Status::kRejected;
    e.verdict.failure = Failure{"bad_input", error.what(), nlohmann::json::object()};
    return e;
  }

  std::mutex mutex_;
  std::vector<std::string> evaluated_, rejected_;
  std::vector<int> finished_;
  std::map<std::string, std::string> gpus_by_path_;
  std::map<std::string, nlohmann::json> extras_;
};

std::vector<Submission> submissions(const std::vector<std::string>& names) {
  std::vector<Submission> out;
  for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], i, ""});
  return out;
}

std::vector<std::optional<GpuInfo>> gpus(int n) {
  std::vector<std::optional<GpuInfo>> out;
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    out.emplace_back(g);
  }
  return out;
}

TEST(ScorePool, VerdictsKeepTheSubmissionsOrderWhateverOrderWorkersFinishIn) {
  FakeJudge judge;
  const std::vector<std::string> names = {"pass_a",  "wrong_b", "pass_c", "pass_d",
                                          "wrong_e", "pass_f",  "pass_g", "pass_h"};
  std::atomic<int> started{0}, finished{0};
  const std::vector<Verdict> v = pipeline::score_submissions(
      judge, submissions(names), gpus(3), "2/4",
      {[&](std::size_t, const std::string&) { ++started; },
       [&](std::size_t, const std::string&, const Evaluation&) { ++finished; }});
  ASSERT_EQ(v.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(v[i].source, names[i]) << i;
  EXPECT_EQ(started.load(), 8);
  EXPECT_EQ(finished.load(), 8);
  // Three workers: some later submission finished before an earlier one.
  EXPECT_FALSE(std::is_sorted(judge.finished_.begin(), judge.finished_.end()));
  // Every worker had its own GPU, and only the pool's GPUs were used.
  std::set<std::string> used;
  for (const auto& [path, uuid] : judge.gpus_by_path_) used.insert(uuid);
  EXPECT_EQ(used, (std::set<std::string>{"GPU-0", "GPU-1", "GPU-2"}));
  // Each record keeps its place in the whole list and the shard.
  EXPECT_EQ(judge.extras_["pass_c"]["score_index"], 2);
  EXPECT_EQ(judge.extras_["pass_c"]["shard"], "2/4");
  EXPECT_EQ(cli::exit_code_of(v), ExitCode::kFailed);
}

TEST(ScorePool, ExitCodeIsZeroOnlyWhenEveryVerdictIsACleanPass) {
  FakeJudge judge;
  EXPECT_EQ(cli::exit_code_of(pipeline::score_submissions(
                judge, submissions({"pass_a", "pass_b", "pass_c"}), gpus(2), "")),
            ExitCode::kPassed);
  // Faster than light: PASSED but suspect is not a clean pass.
  EXPECT_EQ(cli::exit_code_of(
                pipeline::score_submissions(judge, submissions({"pass_a", "fast_b"}), gpus(2), "")),
            ExitCode::kFailed);
  EXPECT_EQ(cli::exit_code_of(pipeline::score_submissions(judge, {}, gpus(1), "")),
            ExitCode::kPassed);
}

TEST(ScorePool, RefusedSubmissionsAreRejectedUnread) {
  FakeJudge judge;
  std::vector<Submission> subs = submissions({"pass_a", "link_b", "pass_c"});
  subs[1].refused = "a symlink; score does not follow links";
  const std::vector<Verdict> v = pipeline::score_submissions(judge, subs, gpus(2), "");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].status, Status::kRejected);
  ASSERT_TRUE(v[1].failure.has_value());
  EXPECT_NE(v[1].failure->message.find("symlink"), std::string::npos) << v[1].failure->message;
  EXPECT_EQ(judge.rejected_, std::vector<std::string>{"link_b"});
  EXPECT_EQ(std::count(judge.evaluated_.begin(), judge.evaluated_.end(), "link_b"), 0);
}

TEST(ScorePool, AJudgeThatCannotGoOnStopsTheHandOutAndIsRethrown) {
  FakeJudge judge;
  // One worker: in order, so nothing after the failing submission is evaluated.
  try {
    pipeline::score_submissions(judge, submissions({"pass_a", "nogpu_b", "pass_c", "pass_d"}),
                                gpus(1), "");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kEnvironment);
  }
  EXPECT_EQ(judge.evaluated_, (std::vector<std::string>{"pass_a", "nogpu_b"}));
  // Several workers: what was taken finishes, nothing more is handed out after the throw.
  FakeJudge pooled;
  std::vector<std::string> names = {"nogpu_a"};
  for (int i = 0; i < 30; ++i) names.push_back("pass_" + std::to_string(i));
  EXPECT_THROW(pipeline::score_submissions(pooled, submissions(names), gpus(2), ""), Error);
  EXPECT_LT(pooled.evaluated_.size(), names.size());
}

}  // namespace
}  // namespace kharness
