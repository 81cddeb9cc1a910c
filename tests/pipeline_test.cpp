// The evaluation pipeline (src/pipeline/evaluation.hpp) on the CPU, in --compile-only mode: one
// load and one compile per evaluation, the verdict cache, the private compile cache of --no-cache,
// and a malformed solution turned into its REJECTED verdict once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "pipeline/evaluation.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

// Every kharness-compile-* folder under `dir` (the private compile caches of --no-cache).
int private_caches(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().rfind("kharness-compile-", 0) == 0;
  return n;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KHARNESS_CACHE", (dir_.path() / "compile-cache").string().c_str(), 1);
    options_.command = "check";
    options_.mode = Mode::kCompile;
    options_.operator_name = "rmsnorm_h4096";
    options_.operators_dirs = {testing::source_dir() / "operators"};
    options_.archive_dir = dir_.path() / "archive";
    options_.arch = "sm_90a";
    options_.seed = 1;
    options_.seed_given = true;
  }
  void TearDown() override { ::unsetenv("KHARNESS_CACHE"); }

  testing::TempDir dir_;
  pipeline::EvaluationOptions options_;
};

TEST_F(PipelineTest, LoadsOnceCompilesOnceAndTheSecondEvaluationIsACacheHit) {
  const std::string good = testing::fixture("good/rmsnorm_simple.cu").string();
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation first = evaluator.evaluate(good);
  EXPECT_FALSE(first.bad_input);
  EXPECT_TRUE(first.verdict.passed()) << to_json(first.verdict).dump(2);
  EXPECT_EQ(first.loads, 1);
  EXPECT_EQ(first.compiles, 1);  // a fresh compile cache: one NVRTC compile, and only one
  EXPECT_FALSE(first.candidate_id.empty());
  EXPECT_TRUE(first.cached_from.empty());

  pipeline::Evaluation second = evaluator.evaluate(good);
  EXPECT_EQ(second.cached_from, first.candidate_id);
  EXPECT_EQ(second.loads, 1);
  EXPECT_EQ(second.compiles, 0);  // the verdict came from the cache: nothing compiled
  EXPECT_EQ(second.verdict.status, first.verdict.status);
  evaluator.finish();

  // Another invocation over the same archive reuses the verdict too.
  pipeline::Evaluator again(options_);
  EXPECT_EQ(again.evaluate(good).cached_from, first.candidate_id);
}

TEST_F(PipelineTest, NoCacheCompilesIntoAPrivateCacheThatIsRemovedAfterwards) {
  testing::TempDir tmp;
  const char* old_tmpdir = std::getenv("TMPDIR");
  std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  options_.use_cache = false;
  {
    pipeline::Evaluator evaluator(options_);
    EXPECT_EQ(private_caches(tmp.path()), 1);
    pipeline::Evaluation e =
        evaluator.evaluate(testing::fixture("good/rmsnorm_simple.cu").string());
    EXPECT_EQ(e.compiles, 1);
    EXPECT_TRUE(e.cached_from.empty());
    // Nothing went into the user's compile cache.
    EXPECT_FALSE(fs::exists(dir_.path() / "compile-cache") &&
                 !fs::is_empty(dir_.path() / "compile-cache"));
    evaluator.finish();
  }
  EXPECT_EQ(private_caches(tmp.path()), 0);
  if (old_tmpdir) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

TEST_F(PipelineTest, AMalformedSolutionIsRejectedOnceAndArchived) {
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation e = evaluator.evaluate(testing::fixture("bad/broken_plan_json.cu").string());
  EXPECT_TRUE(e.bad_input);
  EXPECT_TRUE(e.error != nullptr);
  EXPECT_EQ(e.verdict.status, Status::kRejected);
  ASSERT_TRUE(e.verdict.failure.has_value());
  EXPECT_EQ(e.verdict.failure->kind, "bad_input");
  EXPECT_EQ(e.compiles, 0);
  // The error the pipeline keeps is the one a lone `check` stops with (exit 2).
  try {
    std::rethrow_exception(e.error);
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ExitCode::kUsage);
    EXPECT_NE(err.message().find("broken_plan_json"), std::string::npos) << err.message();
  }
  evaluator.finish();
  archive::Archive a(dir_.path() / "archive");
  auto candidates = a.candidates(evaluator.run_id());
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].status, "REJECTED");
}

TEST_F(PipelineTest, AnUnknownOperatorIsBadInputNamingIt) {
  options_.operator_name = "no_such_operator";
  pipeline::Evaluator evaluator(options_);
  pipeline::Evaluation e = evaluator.evaluate(testing::fixture("good/rmsnorm_simple.cu").string());
  EXPECT_TRUE(e.bad_input);
  EXPECT_NE(e.verdict.failure->message.find("no_such_operator"), std::string::npos)
      << e.verdict.failure->message;
}

}  // namespace
}  // namespace kharness
