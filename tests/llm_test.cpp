// The model API clients against a real HTTP server on 127.0.0.1 (tests/http_server.hpp): request
// bodies and headers of the Anthropic Messages and OpenAI Responses APIs, retries (429 with
// retry-after, 529), errors that stop a run (401, quota), and answers that become failed candidates
// (malformed body, truncation). No network.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "controller/answer.hpp"
#include "http_server.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "llm/http.hpp"
#include "llm/providers.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using testing::expect_input_error;
using testing::HttpServer;
using testing::ScriptedResponse;

const char* const kKey = "sk-test-SECRET-0123456789";

std::string anthropic_body(const std::string& text, const std::string& stop = "end_turn") {
  return json{{"id", "msg_1"},       {"type", "message"},
              {"role", "assistant"}, {"content", json::array({{{"type", "text"}, {"text", text}}})},
              {"stop_reason", stop}, {"usage", {{"input_tokens", 120}, {"output_tokens", 45}}}}
      .dump();
}

std::string openai_body(const std::string& text, const std::string& status = "completed") {
  json j = {
      {"id", "resp_1"},
      {"status", status},
      {"output",
       json::array({{{"type", "reasoning"}, {"summary", json::array()}},
                    {{"type", "message"},
                     {"role", "assistant"},
                     {"content", json::array({{{"type", "output_text"}, {"text", text}}})}}})},
      {"usage",
       {{"input_tokens", 200},
        {"output_tokens", 80},
        {"input_tokens_details", {{"cached_tokens", 50}}}}}};
  if (status == "incomplete") j["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return j.dump();
}

class ProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("ANTHROPIC_API_KEY", kKey, 1);
    ::setenv("OPENAI_API_KEY", kKey, 1);
  }
  void TearDown() override {
    ::unsetenv("ANTHROPIC_API_KEY");
    ::unsetenv("OPENAI_API_KEY");
  }
  llm::ProviderOptions options(const HttpServer& server) {
    llm::ProviderOptions o;
    o.base_url = server.url();
    o.model = "test-model";
    o.http.retry.base_delay_seconds = 0.01;
    o.http.retry.max_attempts = 4;
    return o;
  }
  llm::Request request() {
    llm::Request r;
    r.system = "SYSTEM TEXT";
    r.user = "USER TEXT";
    r.max_output_tokens = 1234;
    r.timeout_seconds = 30;
    return r;
  }
};

TEST_F(ProviderTest, AnthropicRequestAndAnswer) {
  HttpServer server({{200, anthropic_body("hello")}});
  auto p = llm::make_provider("anthropic", options(server));
  llm::Answer a = p->complete(request());
  EXPECT_EQ(a.text, "hello");
  EXPECT_EQ(a.usage.input_tokens, 120);
  EXPECT_EQ(a.usage.output_tokens, 45);
  EXPECT_EQ(a.stop_reason, "end_turn");
  EXPECT_FALSE(a.truncated);
  EXPECT_EQ(a.raw.find(kKey), std::string::npos);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].path, "/v1/messages");
  EXPECT_EQ(reqs[0].headers["x-api-key"], kKey);
  EXPECT_EQ(reqs[0].headers["anthropic-version"], "2023-06-01");
  EXPECT_NE(reqs[0].headers["content-type"].find("application/json"), std::string::npos);
  json body = json::parse(reqs[0].body);
  EXPECT_EQ(body["model"], "test-model");
  EXPECT_EQ(body["max_tokens"], 1234);
  EXPECT_EQ(body["system"], "SYSTEM TEXT");
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "USER TEXT");
}

TEST_F(ProviderTest, OpenAIRequestAndAnswer) {
  HttpServer server({{200, openai_body("hi there")}});
  auto p = llm::make_provider("openai", options(server));
  llm::Request r = request();
  r.reasoning_effort = "high";
  llm::Answer a = p->complete(r);
  EXPECT_EQ(a.text, "hi there");
  EXPECT_EQ(a.usage.input_tokens, 200);
  EXPECT_EQ(a.usage.output_tokens, 80);
  EXPECT_EQ(a.usage.cache_read_tokens, 50);
  EXPECT_FALSE(a.truncated);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].path, "/v1/responses");
  EXPECT_EQ(reqs[0].headers["authorization"], std::string("Bearer ") + kKey);
  json body = json::parse(reqs[0].body);
  EXPECT_EQ(body["model"], "test-model");
  EXPECT_EQ(body["instructions"], "SYSTEM TEXT");
  EXPECT_EQ(body["input"], "USER TEXT");
  EXPECT_EQ(body["max_output_tokens"], 1234);
  EXPECT_EQ(body["reasoning"]["effort"], "high");
}

TEST_F(ProviderTest, OpenAIIncompleteIsTruncated) {
  HttpServer server({{200, openai_body("```cuda\n/* kharness {} */\n__global__", "incomplete")}});
  llm::Answer a = llm::make_provider("openai", options(server))->complete(request());
  EXPECT_TRUE(a.truncated);
  controller::ExtractedCode code = controller::extract_solution(a);
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "TRUNCATED");
}

TEST_F(ProviderTest, RetriesA429WithRetryAfterThenSucceeds) {
  HttpServer server(
      {{429,
        R"({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})",
        {{"retry-after", "1"}}},
       {200, anthropic_body("after the wait")}});
  auto t0 = std::chrono::steady_clock::now();
  llm::Answer a = llm::make_provider("anthropic", options(server))->complete(request());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(a.text, "after the wait");
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_GE(seconds, 0.9) << "retry-after: 1 was not honoured";
}

TEST_F(ProviderTest, Retries529AndServerErrors) {
  HttpServer server(
      {{529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"},
       {503, "busy"},
       {200, anthropic_body("finally")}});
  llm::Answer a = llm::make_provider("anthropic", options(server))->complete(request());
  EXPECT_EQ(a.text, "finally");
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST_F(ProviderTest, GivesUpAfterTheLastAttempt) {
  HttpServer server({{500, R"({"error":{"message":"internal"}})"}});
  try {
    llm::make_provider("anthropic", options(server))->complete(request());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 500"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 attempts"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST_F(ProviderTest, Unauthorized401StopsWithTheProvidersMessage) {
  HttpServer server(
      {{401,
        R"({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}})"}});
  try {
    llm::make_provider("anthropic", options(server))->complete(request());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kEnvironment);
    std::string m = e.message();
    EXPECT_NE(m.find("HTTP 401"), std::string::npos) << m;
    EXPECT_NE(m.find("invalid x-api-key"), std::string::npos) << m;
    EXPECT_EQ(m.find(kKey), std::string::npos) << "the key leaked into the message";
  }
  EXPECT_EQ(server.requests().size(), 1u) << "a 401 must not be retried";
}

TEST_F(ProviderTest, QuotaErrorsAreNotRetried) {
  HttpServer server(
      {{429,
        R"({"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}})"}});
  try {
    llm::make_provider("openai", options(server))->complete(request());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeded your current quota"), std::string::npos);
  }
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST_F(ProviderTest, BadRequestIsNotRetried) {
  HttpServer server({{400, R"({"error":{"message":"max_tokens too large"}})"}});
  EXPECT_THROW(llm::make_provider("anthropic", options(server))->complete(request()), Error);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST_F(ProviderTest, ConnectionErrorsAreRetried) {
  llm::ProviderOptions o;
  o.base_url = "http://127.0.0.1:1";  // nothing listens on port 1
  o.model = "m";
  o.http.retry.base_delay_seconds = 0.01;
  o.http.retry.max_attempts = 3;
  try {
    llm::make_provider("anthropic", o)->complete(request());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 attempts"), std::string::npos) << e.what();
  }
}

TEST_F(ProviderTest, MalformedBodyIsAFailedCandidateNotACrash) {
  HttpServer server({{200, "<html>not json</html>"}});
  llm::Answer a = llm::make_provider("anthropic", options(server))->complete(request());
  EXPECT_EQ(a.stop_reason, "malformed_response");
  EXPECT_EQ(a.raw, "<html>not json</html>");
  controller::ExtractedCode code = controller::extract_solution(a);
  EXPECT_FALSE(code.ok);
  EXPECT_EQ(code.status.name(), "BAD_RESPONSE");
}

TEST_F(ProviderTest, MissingKeyIsAnInputError) {
  ::unsetenv("ANTHROPIC_API_KEY");
  llm::ProviderOptions o;
  testing::expect_input_error([&] { llm::make_provider("anthropic", o); }, "ANTHROPIC_API_KEY",
                              "not set");
}

TEST(Providers, UnknownNameListsTheKnownOnes) {
  testing::expect_input_error([] { llm::make_provider("nope", {}); }, "--provider", "replay");
}

TEST(Providers, RetryDelayHonoursRetryAfterAndCaps) {
  llm::RetryPolicy policy;
  policy.base_delay_seconds = 1;
  policy.max_delay_seconds = 30;
  llm::HttpResponse r;
  r.status = 429;
  r.headers = {{"retry-after", "7"}};
  EXPECT_DOUBLE_EQ(llm::retry_delay(r, 1, policy), 7.0);
  r.headers = {{"retry-after", "600"}};
  EXPECT_DOUBLE_EQ(llm::retry_delay(r, 1, policy), 30.0);
  r.headers.clear();
  for (int attempt = 1; attempt <= 8; ++attempt) {
    double d = llm::retry_delay(r, attempt, policy);
    EXPECT_GE(d, 0.0);
    EXPECT_LE(d, std::min(30.0, std::pow(2.0, attempt - 1)));
  }
}

TEST(Providers, ClassifiesStatuses) {
  llm::HttpResponse r;
  for (long s : {429L, 500L, 502L, 503L, 504L, 529L, 0L}) {
    r.status = s;
    EXPECT_EQ(llm::classify(r), llm::RetryDecision::kRetry) << s;
  }
  for (long s : {400L, 401L, 403L, 404L}) {
    r.status = s;
    EXPECT_EQ(llm::classify(r), llm::RetryDecision::kFatal) << s;
  }
  r.status = 200;
  EXPECT_EQ(llm::classify(r), llm::RetryDecision::kDone);
}

TEST(Providers, CommandOutputForms) {
  // claude -p --output-format json
  llm::Answer a = llm::parse_command_output(
      R"({"type":"result","subtype":"success","is_error":false,"result":"the answer","usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":5},"total_cost_usd":0.01})");
  EXPECT_EQ(a.text, "the answer");
  EXPECT_EQ(a.usage.input_tokens, 15);
  EXPECT_EQ(a.usage.output_tokens, 20);
  // codex exec --json
  a = llm::parse_command_output(
      "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n"
      "{\"type\":\"item.completed\",\"item\":{\"id\":\"i0\",\"type\":\"reasoning\",\"text\":"
      "\"hmm\"}}\n"
      "{\"type\":\"item.completed\",\"item\":{\"id\":\"i1\",\"type\":\"agent_message\",\"text\":"
      "\"codex says\"}}\n"
      "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":30,\"cached_input_tokens\":3,"
      "\"output_tokens\":40}}\n");
  EXPECT_EQ(a.text, "codex says");
  EXPECT_EQ(a.usage.input_tokens, 30);
  EXPECT_EQ(a.usage.output_tokens, 40);
  // plain text
  a = llm::parse_command_output("just text\n```cuda\nx\n```\n");
  EXPECT_EQ(a.text, "just text\n```cuda\nx\n```\n");
}

// A providers.json with a wrong type was a json::type_error in the middle of a run (exit 4).
TEST(Providers, ConfigWithWrongTypesIsBadInputNamingTheField) {
  testing::TempDir dir;
  auto config_with = [&](const std::string& text) {
    std::filesystem::path file = dir.path() / "providers.json";
    write_file_atomic(file.string(), text);
    return file;
  };
  expect_input_error([&] { llm::load_config(config_with(R"({"providers": []})")); },
                     "providers.json: providers", "expected an object");
  expect_input_error([&] { llm::load_config(config_with(R"({"providers": {"replay": "x"}})")); },
                     "providers.json: providers.replay", "expected an object");
  expect_input_error(
      [&] { llm::load_config(config_with(R"({"providers": {"openai": {"default_model": 5}}})")); },
      "providers.openai.default_model", "expected a string");
  expect_input_error(
      [&] {
        llm::load_config(config_with(
            R"({"providers": {"openai": {"models": {"m": {"input_per_mtok": "3"}}}}})"));
      },
      "providers.openai.models.m.input_per_mtok", "expected a number");
  expect_input_error(
      [&] {
        llm::load_config(config_with(
            R"({"providers": {"openai": {"models": {"m": {"output_per_mtok": -1}}}}})"));
      },
      "providers.openai.models.m.output_per_mtok", ">= 0");
}

TEST(Providers, CostFromTheConfig) {
  json config = llm::load_config();
  llm::Usage u;
  u.input_tokens = 1000000;
  u.output_tokens = 100000;
  double c = llm::cost_usd(config, "anthropic", "claude-sonnet-4-5", u);
  EXPECT_NEAR(c, 3.0 + 1.5, 1e-9);
  EXPECT_EQ(llm::cost_usd(config, "replay", "", u), 0.0);
  llm::ProviderOptions po;
  po.config = config;
  EXPECT_EQ(llm::resolve_model("anthropic", po), "claude-sonnet-4-5");
  po.model = "other";
  EXPECT_EQ(llm::resolve_model("anthropic", po), "other");
}

}  // namespace
}  // namespace kharness
