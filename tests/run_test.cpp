// `kharness run` end to end without a GPU (--compile-only): the replay provider on the recorded
// rmsnorm answers, a script standing in for a coding-agent CLI, and the anthropic provider against
// a local HTTP server — whose key must never reach the run folder, and whose 401 stops the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "http_server.hpp"
#include "kharness/archive.hpp"
#include "kharness/device.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::kharness;
using testing::TempDir;

// Each run archives into the test's own folder, never into ./.kharness.
std::string archive_arg(const TempDir& tmp) {
  return "--archive '" + (tmp.path() / "archive").string() + "' ";
}

std::string replay_dir() { return testing::fixture("replay/rmsnorm").string(); }

json record(const std::filesystem::path& run, const std::string& id) {
  return json::parse(read_file((run / "candidates" / id / "record.json").string()));
}

// Every file under `dir` as one string (to look for a leaked key).
std::string everything_under(const std::filesystem::path& dir) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) all += read_file(e.path().string()) + "\n" + e.path().string() + "\n";
  }
  return all;
}

// A run's candidates are archived as every other command's are, from the pipeline's record of
// their evaluation: sources, compile summary and log, PTX and cubin, with the prompt and answer
// added.
TEST(Run, ArchivesEachCandidateWithItsCompiledArtifacts) {
  TempDir tmp;
  auto r = kharness(archive_arg(tmp) +
                    "run --operator rmsnorm_h4096 --budget 2 --provider replay --responses '" +
                    replay_dir() + "' --compile-only --arch sm_90a --seed 1 --run-dir '" +
                    (tmp.path() / "run").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  archive::Archive store(tmp.path() / "archive");
  const std::vector<archive::CandidateSummary> stored = store.candidates();
  ASSERT_EQ(stored.size(), 3u);
  for (const archive::CandidateSummary& s : stored) {
    const archive::CandidateRecord c = store.load(s.id).record;
    SCOPED_TRACE(c.name);
    EXPECT_FALSE(c.ptx.empty());
    EXPECT_NE(c.ptx.find(".entry"), std::string::npos);
    EXPECT_FALSE(c.cubin.empty());
    EXPECT_EQ(c.cubin.substr(0, 4), std::string("\x7f"
                                                "ELF"));
    EXPECT_TRUE(c.compile.is_object());
    EXPECT_FALSE(c.sources.empty());
    ASSERT_TRUE(c.verdict.has_value());
    if (c.name != "c0000") {
      EXPECT_FALSE(c.prompt.empty());
      EXPECT_FALSE(c.response.empty());
    }
  }
  // The files are there too, as `show` reads them.
  const std::filesystem::path folder = tmp.path() / "archive";
  int ptx_files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(folder))
    ptx_files += e.path().filename() == "kernel.ptx" ? 1 : 0;
  EXPECT_EQ(ptx_files, 3);
}

TEST(Run, ReplayCompileOnlyEndToEnd) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto out = tmp.path() / "best.cu";
  auto r = kharness(archive_arg(tmp) +
                    "run --operator rmsnorm_h4096 --budget 3 --provider replay --responses '" +
                    replay_dir() + "' --compile-only --arch sm_90a --seed 1 --run-dir '" +
                    run.string() + "' --out '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("| c0003"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compile only"), std::string::npos) << r.out;
  for (const char* id : {"c0000", "c0001", "c0002", "c0003"}) {
    json rec = record(run, id);
    EXPECT_EQ(rec["status"], "COMPILED") << id << ": " << rec.dump();
    EXPECT_TRUE(std::filesystem::exists(run / "candidates" / id / "solution.cu")) << id;
  }
  EXPECT_FALSE(std::filesystem::exists(run / "candidates" / "c0004"));
  EXPECT_TRUE(std::filesystem::exists(run / "candidates" / "c0001" / "prompt.md"));
  EXPECT_TRUE(std::filesystem::exists(run / "candidates" / "c0001" / "response.raw"));
  EXPECT_TRUE(std::filesystem::exists(run / "summary.md"));
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["stop_reason"], "budget");
  EXPECT_EQ(summary["candidates"].size(), 4u);
  // Nothing is timed in compile-only mode: the seed stays the best.
  EXPECT_EQ(summary["best"], "c0000");
  EXPECT_EQ(read_file(out.string()),
            read_file((testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string()));
  // The prompt carries the task, the best kernel and the feedback of earlier candidates.
  std::string prompt = read_file((run / "candidates" / "c0002" / "prompt.md").string());
  EXPECT_NE(prompt.find("# Task: rmsnorm_h4096"), std::string::npos);
  EXPECT_NE(prompt.find("## c0001: COMPILED"), std::string::npos) << prompt;

  // --resume carries on to a larger budget: the no-code and compile-error answers come next.
  auto r2 = kharness(archive_arg(tmp) + "run --resume '" + run.string() +
                     "' --budget 5 --patience 10" + " --responses '" + replay_dir() + "'");
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  EXPECT_EQ(record(run, "c0004")["status"], "NO_CODE");
  EXPECT_EQ(record(run, "c0005")["status"], "COMPILE_ERROR");
  std::string p5 = read_file((run / "candidates" / "c0005" / "prompt.md").string());
  EXPECT_NE(p5.find("## c0004: NO_CODE"), std::string::npos) << "feedback of the failed answer";
  // Both sessions recorded into one archive run: the seed and five candidates.
  int archived = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path() / "archive" / "candidates")) {
    archived += e.is_directory() ? 1 : 0;
  }
  EXPECT_EQ(archived, 6);
  auto runs = kharness(archive_arg(tmp) + "runs");
  EXPECT_EQ(runs.exit_code, 0) << runs.out;
  EXPECT_NE(runs.out.find("rmsnorm_h4096"), std::string::npos) << runs.out;
}

// A second run of the same candidates into the same archive reuses their verdicts: every record
// names the first run's archived candidate it came from, under the same cache key.
TEST(Run, ASecondRunReusesTheCachedVerdicts) {
  TempDir tmp;
  auto run_once = [&](const std::string& name) {
    auto r = kharness(archive_arg(tmp) +
                      "run --operator rmsnorm_h4096 --budget 3 --provider replay --responses '" +
                      replay_dir() + "' --compile-only --arch sm_90a --seed 1 --run-dir '" +
                      (tmp.path() / name).string() + "'");
    EXPECT_EQ(r.exit_code, 0) << r.out;
  };
  run_once("first");
  run_once("second");
  for (const char* id : {"c0000", "c0001", "c0002", "c0003"}) {
    json a = record(tmp.path() / "first", id), b = record(tmp.path() / "second", id);
    EXPECT_EQ(b["status"], a["status"]) << id;
    EXPECT_FALSE(a["cache_key"].get<std::string>().empty()) << id;
    EXPECT_EQ(a["cached_from"], "") << id << ": the first run evaluated it";
    EXPECT_EQ(b["cache_key"], a["cache_key"]) << id;
    EXPECT_FALSE(b["cached_from"].get<std::string>().empty()) << id << ": " << b.dump();
  }
  // --no-cache evaluates again.
  auto r = kharness(
      archive_arg(tmp) + "run --operator rmsnorm_h4096 --budget 1 --provider replay --responses '" +
      replay_dir() + "' --compile-only --arch sm_90a --seed 1 --no-cache --run-dir '" +
      (tmp.path() / "third").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(record(tmp.path() / "third", "c0001")["cached_from"], "");
}

TEST(Run, CommandProviderWithAScript) {
  TempDir tmp;
  auto script = tmp.path() / "agent.sh";
  {
    std::ofstream f(script);
    // Reads the prompt, answers with the recorded faster variant, in claude -p's JSON form.
    f << "#!/bin/sh\ncat > '" << (tmp.path() / "prompt.txt").string() << "'\n"
      << "python3 -c 'import json,sys; print(json.dumps({\"type\":\"result\",\"result\":"
         "open(sys.argv[1]).read(),\"usage\":{\"input_tokens\":11,\"output_tokens\":22}}))' '"
      << replay_dir() << "/02-faster.md'\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto run = tmp.path() / "run";
  auto r = kharness(
      archive_arg(tmp) + "run --operator rmsnorm_h4096 --budget 2 --provider command --command '" +
      script.string() + "' --compile-only --arch sm_90a --run-dir '" + run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json c1 = record(run, "c0001");
  EXPECT_EQ(c1["status"], "COMPILED") << c1.dump();
  EXPECT_EQ(c1["usage"]["input_tokens"], 11);
  EXPECT_EQ(c1["usage"]["output_tokens"], 22);
  // The same answer again is not evaluated twice.
  EXPECT_EQ(record(run, "c0002")["status"], "DUPLICATE");
  std::string prompt = read_file((tmp.path() / "prompt.txt").string());
  EXPECT_NE(prompt.find("Device code only"), std::string::npos);
  EXPECT_NE(prompt.find("# Task: rmsnorm_h4096"), std::string::npos);
}

// tests/fixtures/agent/fake-claude.sh, the stand-in for a coding-agent CLI that device-test.sh
// runs on the GPU: five calls answer the five recorded answers in order, each prompt carries the
// task, and the verdicts a compile-only run can give are the expected ones.
TEST(Run, FakeAgentScriptAnswersTheRecordedAnswersInOrder) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto state = tmp.path() / "agent";
  const std::string agent = testing::fixture("agent/fake-claude.sh").string();
  auto r = kharness(archive_arg(tmp) +
                    "run --operator rmsnorm_h4096 --budget 5 --provider command --command \"'" +
                    agent + "' '" + replay_dir() + "' '" + state.string() +
                    "'\" --compile-only --arch sm_90a --run-dir '" + run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(record(run, "c0001")["status"], "COMPILED");
  EXPECT_EQ(record(run, "c0002")["status"], "COMPILED");
  EXPECT_EQ(record(run, "c0003")["status"], "COMPILED");  // wrong numerics: only a GPU sees it
  EXPECT_EQ(record(run, "c0004")["status"], "NO_CODE");
  EXPECT_EQ(record(run, "c0005")["status"], "COMPILE_ERROR");
  EXPECT_GT(record(run, "c0001")["usage"]["input_tokens"].get<long>(), 1000);
  EXPECT_EQ(read_file((state / "calls").string()), "5\n");
  EXPECT_NE(read_file((state / "prompt-5.txt").string()).find("# Task: rmsnorm_h4096"),
            std::string::npos);
}

// The script refuses a prompt without a kernel, as an agent with nothing to refine would: the
// candidate fails with the script's message, the run goes on.
TEST(Run, FakeAgentScriptRefusesAnEmptyPrompt) {
  TempDir tmp;
  auto r =
      testing::run_command("echo hello | '" + testing::fixture("agent/fake-claude.sh").string() +
                           "' '" + replay_dir() + "' '" + (tmp.path() / "s").string() + "' 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("no kernel or no task definition"), std::string::npos) << r.out;
}

TEST(Run, FailingCommandIsAFailedCandidate) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = kharness(
      archive_arg(tmp) +
      "run --operator rmsnorm_h4096 --budget 1 --provider command --command 'cat >/dev/null; "
      "echo oops >&2; exit 3' --compile-only --arch sm_90a --run-dir '" +
      run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(record(run, "c0001")["status"], "NO_CODE");
}

TEST(Run, AnthropicKeyNeverReachesTheRunFolder) {
  const std::string key = "sk-ant-NEVER-IN-THE-ARCHIVE-42";
  std::string answer = read_file(testing::fixture("replay/rmsnorm/02-faster.md").string());
  testing::HttpServer server(
      {{200, json{{"content", json::array({{{"type", "text"}, {"text", answer}}})},
                  {"stop_reason", "end_turn"},
                  {"usage", {{"input_tokens", 1000}, {"output_tokens", 500}}}}
                 .dump()}});
  TempDir tmp;
  auto run = tmp.path() / "run";
  // The key is set in the child's environment only.
  auto r = testing::run_command("ANTHROPIC_API_KEY='" + key + "' '" + KHARNESS_BINARY + "' " +
                                archive_arg(tmp) +
                                "run --operator rmsnorm_h4096 --budget 2 --provider anthropic "
                                "--base-url " +
                                server.url() + " --compile-only --arch sm_90a --run-dir '" +
                                run.string() + "' --hint 'try 128 threads' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find(key), std::string::npos);
  const std::filesystem::path& run2 = run;
  json c1 = record(run2, "c0001");
  EXPECT_EQ(c1["status"], "COMPILED");
  EXPECT_GT(c1["cost_usd"].get<double>(), 0.0) << "priced from configs/providers.json";
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "archive" / "index.sqlite"));
  std::string all = everything_under(tmp.path());  // the run folder and the archive
  EXPECT_NE(all.find("try 128 threads"), std::string::npos) << "the hint is in the prompt";
  EXPECT_EQ(all.find(key), std::string::npos) << "the API key leaked into the run folder";
  auto reqs = server.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs.back().headers["x-api-key"], key);
}

TEST(Run, Unauthorized401StopsTheRunWithAClearMessage) {
  testing::HttpServer server(
      {{401,
        R"({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}})"}});
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = testing::run_command(
      "ANTHROPIC_API_KEY=sk-bad '" + std::string(KHARNESS_BINARY) + "' " + archive_arg(tmp) +
      "run --operator rmsnorm_h4096 --budget 3 --provider anthropic "
      "--base-url " +
      server.url() + " --compile-only --arch sm_90a --run-dir '" + run.string() + "' 2>&1");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("kharness: error: anthropic: HTTP 401: invalid x-api-key"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(server.requests().size(), 1u);
  // The seed's record and the summary are there all the same.
  EXPECT_TRUE(std::filesystem::exists(run / "candidates" / "c0000" / "record.json"));
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["stop_reason"], "error");
}

TEST(Run, UsageErrors) {
  TempDir tmp;
  auto r = kharness(archive_arg(tmp) +
                    "run --budget 1 --provider replay --responses /nonexistent --compile-only");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = kharness(archive_arg(tmp) +
               "run --operator rmsnorm_h4096 --provider replay --responses /nonexistent "
               "--compile-only --arch sm_90a --run-dir /tmp/kharness-never-created-run");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent"), std::string::npos) << r.out;
}

// Numbers no run can use, checked before anything starts: one line naming the flag, exit 2, and
// no run folder left behind.
TEST(Run, BadNumbersAreUsageErrorsBeforeTheRunStarts) {
  TempDir tmp;
  std::string base = archive_arg(tmp) +
                     "run --operator rmsnorm_h4096 --provider replay --responses '" + replay_dir() +
                     "' --compile-only --arch sm_90a --run-dir '" + (tmp.path() / "run").string() +
                     "' ";
  for (const char* flags :
       {"--timeout -1", "--elites 0", "--patience -1", "--max-cost -1", "--max-time -5",
        "--max-tokens -1", "--max-output-tokens 0", "--command-timeout 0", "--request-timeout -1",
        "--min-gain -0.01", "--min-gain 1"}) {
    std::string flag(flags, std::string(flags).find(' '));
    auto r = kharness(base + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find("kharness: error: " + flag + ": must be"), std::string::npos)
        << flags << "\n"
        << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "run"));
  // --out where a file cannot go fails at the start, not after the whole run (exit 4).
  auto r = kharness(base + "--budget 1 --out '" + tmp.path().string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--out: '" + tmp.path().string() + "' is a folder"), std::string::npos)
      << r.out;
}

// --model (in-model validation) is checked before anything runs: the model loads, the operator is
// a node of its layer in the phase (decode unless --phase says otherwise), the objective is kernel
// or layer, and what needs --model has it. One line naming the flag, exit 2, no run folder.
TEST(Run, InModelValidationFlagsAreCheckedBeforeTheRunStarts) {
  TempDir tmp;
  const auto run_dir = tmp.path() / "run";
  const std::string base =
      archive_arg(tmp) + "run --provider tune --arch sm_90a --run-dir '" + run_dir.string() + "' ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--operator rmsnorm_h2048 --model llama-3.1-8b",
       "--operator: rmsnorm_h2048 is no node of llama-3.1-8b's decode layer (its operators: "
       "rmsnorm_h4096, gemm_n6144_k4096, "},
      // Without --phase, the decode layer: its attention is the decode definition.
      {"--operator gqa_paged_prefill_causal_h32_kv8_d128_ps1 --model llama-3.1-8b",
       "--operator: gqa_paged_prefill_causal_h32_kv8_d128_ps1 is no node of llama-3.1-8b's "
       "decode layer"},
      {"--operator gqa_paged_decode_h32_kv8_d128_ps1 --model llama-3.1-8b --phase prefill",
       "--operator: gqa_paged_decode_h32_kv8_d128_ps1 is no node of llama-3.1-8b's prefill "
       "layer"},
      {"--operator rmsnorm_h4096 --model llama-3.1-8b --phase train",
       "--phase: llama-3.1-8b has no phase 'train' (phases: decode, prefill)"},
      {"--operator rmsnorm_h4096 --model llama-3.1-8b --objective fastest",
       "--objective: expected kernel or layer, got 'fastest'"},
      {"--operator rmsnorm_h4096 --objective layer",
       "--objective: layer needs --model (the model whose layer is timed)"},
      {"--operator rmsnorm_h4096 --model-layers 2", "--model-layers: needs --model"},
      {"--operator rmsnorm_h4096 --phase prefill", "--phase: needs --model"},
      {"--operator rmsnorm_h4096 --model llama-3.1-8b --model-layers 33",
       "--model-layers: expected 1 to 32 (llama-3.1-8b's layers), got 33"},
      {"--operator rmsnorm_h4096 --model llama-3.1-8b --compile-only",
       "--model: model-check runs on a GPU: not with --compile-only"},
      // The provider's model is --llm-model: --model names a model of models/.
      {"--operator rmsnorm_h4096 --model gpt-5",
       "--model: no model 'gpt-5' (models: llama-3.1-8b); --model names the model a candidate is "
       "validated in, the provider's model is --llm-model"}};
  for (const auto& [flags, message] : cases) {
    auto r = kharness(base + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find("kharness: error: " + message), std::string::npos) << flags << "\n"
                                                                            << r.out;
    EXPECT_FALSE(std::filesystem::exists(run_dir)) << flags;
  }
}

// The in-model settings go to run.json; a resumed run keeps them: it can neither add --model
// to a run made without nor change the model, phase, layers or objective.
TEST(Run, AResumedRunKeepsItsInModelValidation) {
  TempDir tmp;
  const auto plain = tmp.path() / "plain";
  auto r = kharness(
      archive_arg(tmp) + "run --operator rmsnorm_h4096 --budget 1 --provider replay --responses '" +
      replay_dir() + "' --compile-only --arch sm_90a --seed 1 --run-dir '" + plain.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(json::parse(read_file((plain / "run.json").string()))["in_model"].is_null());
  r = kharness(archive_arg(tmp) + "run --resume '" + plain.string() + "' --responses '" +
               replay_dir() + "' --budget 2 --model llama-3.1-8b");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--model: the run was made without in-model validation"), std::string::npos)
      << r.out;
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: the run below would start";
  // Without a GPU the run stops at its seed (exit 3), its settings recorded.
  const auto layered = tmp.path() / "layered";
  r = kharness(archive_arg(tmp) +
               "run --operator gqa_paged_prefill_causal_h32_kv8_d128_ps1 --model llama-3.1-8b "
               "--phase prefill --objective layer --model-layers 2 --provider tune --arch sm_90a "
               "--budget 1 --run-dir '" +
               layered.string() + "'");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  const json stored = json::parse(read_file((layered / "run.json").string()));
  EXPECT_EQ(
      stored["in_model"],
      (json{
          {"model", "llama-3.1-8b"}, {"phase", "prefill"}, {"layers", 2}, {"objective", "layer"}}))
      << stored.dump(2);
  r = kharness(archive_arg(tmp) + "run --resume '" + layered.string() + "' --phase decode");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--phase: the run was made with --phase prefill; a resumed run keeps its "
                       "in-model validation"),
            std::string::npos)
      << r.out;
  // A run folder from elsewhere is not trusted: a layer count no int holds is an input error.
  json damaged = stored;
  damaged["in_model"]["layers"] = 1e308;
  write_file_atomic((layered / "run.json").string(), damaged.dump(2));
  r = kharness(archive_arg(tmp) + "run --resume '" + layered.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("in_model.layers"), std::string::npos) << r.out;
  // A run folder does not get to name a file for this machine to read: a model given by path is
  // used only when the command line repeats it.
  json by_path = stored;
  by_path["in_model"]["model"] = "/etc/passwd.json";
  write_file_atomic((layered / "run.json").string(), by_path.dump(2));
  r = kharness(archive_arg(tmp) + "run --resume '" + layered.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("run.json: in_model.model: names the model file '/etc/passwd.json'"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

// A run.json or record.json edited by hand with a wrong type: --resume said "internal error"
// (a json::type_error, exit 4).
TEST(Run, ResumeOfADamagedRunNamesTheFileAndField) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = kharness(
      archive_arg(tmp) + "run --operator rmsnorm_h4096 --budget 1 --provider replay --responses '" +
      replay_dir() + "' --compile-only --arch sm_90a --seed 1 --run-dir '" + run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string run_json = read_file((run / "run.json").string());
  json settings = json::parse(run_json);
  settings["budget"] = "ten";
  write_file_atomic((run / "run.json").string(), settings.dump(2));
  r = kharness(archive_arg(tmp) + "run --resume '" + run.string() + "' --responses '" +
               replay_dir() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("run.json: budget"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  write_file_atomic((run / "run.json").string(), run_json);
  json rec = record(run, "c0001");
  rec["score"] = "fast";
  write_file_atomic((run / "candidates" / "c0001" / "record.json").string(), rec.dump(2));
  r = kharness(archive_arg(tmp) + "run --resume '" + run.string() + "' --budget 2 --responses '" +
               replay_dir() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("c0001/record.json"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

TEST(Run, DropoutRestartMasksHalfOfTheHistory) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = kharness(archive_arg(tmp) +
                    "run --operator rmsnorm_h4096 --budget 3 --patience 2 --provider replay "
                    "--responses '" +
                    replay_dir() +
                    "' --compile-only --arch sm_90a --seed 5 "
                    "--run-dir '" +
                    run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(record(run, "c0002")["restart"], "");
  json c3 = record(run, "c0003");
  EXPECT_NE(c3["restart"].get<std::string>().find("dropout restart from c0000"), std::string::npos)
      << c3.dump();
  std::string prompt = read_file((run / "candidates" / "c0003" / "prompt.md").string());
  bool saw1 = prompt.find("## c0001:") != std::string::npos;
  bool saw2 = prompt.find("## c0002:") != std::string::npos;
  EXPECT_NE(saw1, saw2) << "one of the two earlier records is masked";
  EXPECT_NE(r.out.find("dropout restarts: 1"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

TEST(Run, CtrlCStopsCleanlyAndCanResume) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  // A slow agent: each answer takes a second. Interrupted after 2.5 s: the seed and c0001 are done
  // (c0001 by about 1.5 s on an idle machine; the margin is for a loaded CI runner).
  std::string agent = "sleep 1; cat '" + replay_dir() + "/01-same-speed.md'";
  auto r = testing::run_command(
      "( '" + std::string(KHARNESS_BINARY) + "' " + archive_arg(tmp) +
      "run --operator rmsnorm_h4096 --budget 20 --provider command --command \"cat >/dev/null; " +
      agent + "\" --compile-only --arch sm_90a --run-dir '" + run.string() +
      "' & pid=$!; sleep 2.5; kill -INT $pid; wait $pid ) 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Interrupted: carry on with `kharness run --resume"), std::string::npos)
      << r.out;
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["stop_reason"], "interrupted");
  EXPECT_LE(summary["candidates"].size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(run / "candidates" / "c0001" / "record.json"));
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

// Ctrl-C while a coding-agent CLI is thinking stops the agent too (its process group), instead of
// waiting for it up to --command-timeout: the run ends within seconds with its summary.
TEST(Run, CtrlCStopsARunningAgent) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto start = std::chrono::steady_clock::now();
  auto r = testing::run_command(
      "( '" + std::string(KHARNESS_BINARY) + "' " + archive_arg(tmp) +
      "run --operator rmsnorm_h4096 --budget 5 --provider command --command 'sleep 60'"
      " --command-timeout 120 --compile-only --arch sm_90a --run-dir '" +
      run.string() + "' & pid=$!; sleep 1.5; kill -INT $pid; wait $pid ) 2>&1");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_LT(seconds, 10.0) << "the run waited for the agent: " << r.out;
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["stop_reason"], "interrupted");
}

TEST(Run, SamplesPerStepInParallel) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r =
      kharness(archive_arg(tmp) +
               "run --operator rmsnorm_h4096 --budget 4 --samples 2 --provider replay "
               "--responses '" +
               replay_dir() + "' --compile-only --arch sm_90a --run-dir '" + run.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(record(run, "c0001")["step"], 1);
  EXPECT_EQ(record(run, "c0002")["step"], 1);
  EXPECT_EQ(record(run, "c0003")["step"], 2);
  EXPECT_EQ(record(run, "c0004")["step"], 2);
  EXPECT_EQ(record(run, "c0004")["status"], "NO_CODE");
}

TEST(Run, TokenAndCostLimitsStopTheRun) {
  std::string answer = read_file(testing::fixture("replay/rmsnorm/01-same-speed.md").string());
  testing::HttpServer server(
      {{200, json{{"content", json::array({{{"type", "text"}, {"text", answer}}})},
                  {"stop_reason", "end_turn"},
                  {"usage", {{"input_tokens", 1000}, {"output_tokens", 500}}}}
                 .dump()}});
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = testing::run_command(
      "ANTHROPIC_API_KEY=k '" + std::string(KHARNESS_BINARY) + "' " + archive_arg(tmp) +
      "run --operator rmsnorm_h4096 --budget 10 --max-tokens 2500 "
      "--provider anthropic --base-url " +
      server.url() + " --compile-only --arch sm_90a --run-dir '" + run.string() + "' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json summary = json::parse(read_file((run / "summary.json").string()));
  EXPECT_EQ(summary["stop_reason"], "tokens");
  EXPECT_EQ(summary["candidates"].size(), 3u);  // the seed and two answers of 1500 tokens
  EXPECT_EQ(summary["tokens"], 3000);
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

TEST(Run, WithoutAKeyTheTuneProviderIsTheDefault) {
  TempDir tmp;
  auto run = tmp.path() / "run";
  auto r = testing::run_command("env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY '" +
                                std::string(KHARNESS_BINARY) + "' " + archive_arg(tmp) +
                                "run --operator rmsnorm_h4096 --budget 2 --compile-only "
                                "--arch sm_90a --run-dir '" +
                                run.string() + "' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("with tune"), std::string::npos) << r.out;
  json c1 = record(run, "c0001");
  EXPECT_EQ(c1["provider"], "tune");
  EXPECT_EQ(c1["status"], "COMPILED") << c1.dump();
}

}  // namespace
}  // namespace kharness
