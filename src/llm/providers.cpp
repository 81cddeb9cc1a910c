#include "llm/providers.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/subprocess.hpp"
#include "kharness/text.hpp"

namespace kharness::llm {
namespace {

using nlohmann::json;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string strip_slash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string base_url(const std::string& provider, const ProviderOptions& o,
                     const std::string& fallback) {
  if (!o.base_url.empty()) return strip_slash(o.base_url);
  std::string from_config = o.config.value("/providers"_json_pointer / provider, json::object())
                                .value("base_url", std::string());
  return strip_slash(from_config.empty() ? fallback : from_config);
}

Answer malformed(const std::string& body, const std::string& why) {
  Answer a;
  a.raw = body;
  a.stop_reason = "malformed_response";
  a.text.clear();
  spdlog::debug("malformed response: {}", why);
  return a;
}

// An HTTP answer to an Answer, or the Error that stops the run.
Answer finish(const std::string& provider, const HttpResponse& r,
              Answer (*parse)(const std::string&), const std::atomic<bool>* cancel) {
  if (r.status >= 200 && r.status < 300) {
    Answer a = parse(r.body);
    a.latency_seconds = r.seconds;
    return a;
  }
  if (cancel && cancel->load()) {  // Ctrl-C aborted the request: no answer, and no error
    Answer a;
    a.stop_reason = "interrupted";
    a.latency_seconds = r.seconds;
    return a;
  }
  std::string what = r.status == 0 ? fmt::format("cannot reach the API: {}", r.transport_error)
                                   : fmt::format("HTTP {}: {}", r.status, error_message(r.body));
  if (classify(r) == RetryDecision::kRetry)
    what += fmt::format(" (gave up after {} attempts)", r.attempts);
  if (r.status == 401 || r.status == 403) what += " (check the API key)";
  throw Error(ExitCode::kEnvironment, provider, what);
}

HttpOptions http_options(const ProviderOptions& o, const Request& request) {
  HttpOptions h = o.http;
  h.deadline_seconds = request.timeout_seconds;
  h.cancel = o.cancel;
  return h;
}

class AnthropicProvider : public Provider {
 public:
  explicit AnthropicProvider(const ProviderOptions& o)
      : options_(o),
        url_(base_url("anthropic", o, "https://api.anthropic.com") + "/v1/messages"),
        model_(resolve_model("anthropic", o)),
        key_(env("ANTHROPIC_API_KEY")) {
    if (key_.empty()) throw input_error("ANTHROPIC_API_KEY", "not set (provider anthropic)");
  }
  std::string name() const override { return "anthropic"; }
  Answer complete(const Request& request) override {
    std::string model = request.model.empty() ? model_ : request.model;
    HttpResponse r = HttpClient().post_json(
        url_, {{"x-api-key", key_}, {"anthropic-version", "2023-06-01"}},
        json_util::dump(anthropic_request_body(request, model)), http_options(options_, request));
    return finish("anthropic", r, parse_anthropic_response, options_.cancel);
  }

 private:
  ProviderOptions options_;
  std::string url_, model_, key_;
};

class OpenAIProvider : public Provider {
 public:
  explicit OpenAIProvider(const ProviderOptions& o)
      : options_(o),
        url_(base_url("openai", o, "https://api.openai.com") + "/v1/responses"),
        model_(resolve_model("openai", o)),
        key_(env("OPENAI_API_KEY")) {
    if (key_.empty()) throw input_error("OPENAI_API_KEY", "not set (provider openai)");
  }
  std::string name() const override { return "openai"; }
  Answer complete(const Request& request) override {
    std::string model = request.model.empty() ? model_ : request.model;
    HttpResponse r = HttpClient().post_json(url_, {{"Authorization", "Bearer " + key_}},
                                            json_util::dump(openai_request_body(request, model)),
                                            http_options(options_, request));
    return finish("openai", r, parse_openai_response, options_.cancel);
  }

 private:
  ProviderOptions options_;
  std::string url_, model_, key_;
};

// A coding-agent CLI or any script: the prompt on stdin, the answer on stdout.
class CommandProvider : public Provider {
 public:
  explicit CommandProvider(const ProviderOptions& o) : options_(o) {
    if (o.command.empty())
      throw input_error("--command", "the command provider needs a command line");
  }
  std::string name() const override { return "command"; }
  Answer complete(const Request& request) override {
    SubprocessOptions sub;
    sub.argv = {"/bin/sh", "-c", options_.command};
    sub.stdin_data = request.system + "\n\n" + request.user;
    sub.timeout_seconds = options_.command_timeout_seconds;
    sub.cancel = options_.cancel;  // Ctrl-C stops the agent too, not only the loop after it
    SubprocessResult r = run_subprocess(sub);
    if (r.cancelled) {  // no answer, and no error: the run stops and records what it has
      Answer a;
      a.stop_reason = "interrupted";
      a.latency_seconds = r.seconds;
      return a;
    }
    if (!r.started) {
      throw Error(ExitCode::kEnvironment, "--command",
                  fmt::format("cannot start '{}': {}", options_.command, r.start_error));
    }
    if (r.timed_out || r.exit_code != 0) {
      Answer a;
      a.stop_reason = r.timed_out ? "timeout" : "command_failed";
      a.raw = fmt::format("{}\n--- stderr ---\n{}", r.describe(), r.stderr_data);
      a.latency_seconds = r.seconds;
      if (r.exit_code == 127) {  // the shell found no such program: no later call can do better
        throw Error(ExitCode::kEnvironment, "--command",
                    fmt::format("'{}' {}: {}", options_.command, r.describe(),
                                r.stderr_data.substr(0, 300)));
      }
      return a;
    }
    Answer a = parse_command_output(r.stdout_data);
    a.latency_seconds = r.seconds;
    return a;
  }

 private:
  ProviderOptions options_;
};

// Recorded answers, in name order: plain text (.md, .txt, ...), or JSON: an Anthropic or OpenAI
// response body, or {"text", "usage", "stop_reason", "truncated"}.
class ReplayProvider : public Provider {
 public:
  explicit ReplayProvider(const ProviderOptions& o) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (o.responses_dir.empty())
      throw input_error("--responses", "the replay provider needs a folder of recorded answers");
    if (!fs::is_directory(o.responses_dir, ec))
      throw input_error(o.responses_dir.string(), "no such folder (--responses)");
    for (const auto& entry : fs::directory_iterator(o.responses_dir, ec)) {
      std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && !name.empty() && name[0] != '.' && name != "README.md")
        files_.push_back(entry.path());
    }
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) throw input_error(o.responses_dir.string(), "no recorded answers in it");
    next_ = std::min(o.answers_used, files_.size());
  }
  std::string name() const override { return "replay"; }
  Answer complete(const Request& request) override {
    std::filesystem::path file;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The controller numbers its requests (parallel samples arrive in any order): answer i
      // goes to request i, so a replay is reproducible.
      std::size_t index = next_;
      const auto& n = request.context;
      if (n.is_object() && n.contains("request_index") && n["request_index"].is_number_unsigned())
        index = n["request_index"].get<std::size_t>();
      next_ = std::max(next_, index + 1);
      if (index >= files_.size()) {
        Answer a;
        a.stop_reason = "replay_exhausted";
        return a;
      }
      file = files_[index];
    }
    std::string text = read_file(file.string());
    if (file.extension() != ".json") {
      Answer a;
      a.text = text;
      a.raw = text;
      a.stop_reason = "end_turn";
      return a;
    }
    json j = json_util::parse_or_discarded(text);
    if (j.is_object() && j.contains("content")) return parse_anthropic_response(text);
    if (j.is_object() && j.contains("output")) return parse_openai_response(text);
    if (j.is_object() && j.contains("text")) {
      return json_util::reading(file.string(), [&] {
        Answer a;
        a.text = j.value("text", "");
        a.raw = text;
        a.stop_reason = j.value("stop_reason", "end_turn");
        a.truncated = j.value("truncated", false);
        json u = j.value("usage", json::object());
        a.usage.input_tokens = json_util::whole_or(u, "input_tokens", 0);
        a.usage.output_tokens = json_util::whole_or(u, "output_tokens", 0);
        return a;
      });
    }
    return malformed(text, file.string() + ": not a recorded answer");
  }
  bool has_more() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_ < files_.size();
  }

 private:
  std::vector<std::filesystem::path> files_;
  std::size_t next_ = 0;
  mutable std::mutex mutex_;
};

struct Entry {
  const char* name;
  ProviderFactory make;
};

// The providers by name; a new one is one line here.
const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {"anthropic",
       [](const ProviderOptions& o) { return std::make_unique<AnthropicProvider>(o); }},
      {"openai", [](const ProviderOptions& o) { return std::make_unique<OpenAIProvider>(o); }},
      {"command", [](const ProviderOptions& o) { return std::make_unique<CommandProvider>(o); }},
      {"replay", [](const ProviderOptions& o) { return std::make_unique<ReplayProvider>(o); }},
  };
  return t;
}

// Token counts come from a model API or a recording: a sum of two near 2^63 must not overflow.
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}

Usage usage_from(const json& u, const char* in, const char* out) {
  Usage usage;
  if (!u.is_object()) return usage;
  usage.input_tokens = json_util::whole_or(u, in, std::int64_t{0});
  usage.output_tokens = json_util::whole_or(u, out, std::int64_t{0});
  return usage;
}

}  // namespace

std::unique_ptr<Provider> make_provider(const std::string& name, const ProviderOptions& options) {
  for (const auto& e : table()) {
    if (name == e.name) return e.make(options);
  }
  throw input_error("--provider", fmt::format("unknown provider '{}' (known: {})", name,
                                              join(provider_names(), ", ")));
}

std::vector<std::string> provider_names() {
  std::vector<std::string> names;
  for (const auto& e : table()) names.emplace_back(e.name);
  return names;
}

std::string default_provider_name() {
  if (!env("ANTHROPIC_API_KEY").empty()) return "anthropic";
  if (!env("OPENAI_API_KEY").empty()) return "openai";
  return "tune";
}

std::filesystem::path default_config_file() { return data_dir() / "configs" / "providers.json"; }

namespace {

// The shapes the lookups below rely on; a wrong type is the file's error (exit 2), not a
// json::type_error deep inside a run.
void validate_config(const json& j, const std::string& source) {
  namespace ju = json_util;
  auto providers = j.find("providers");
  if (providers == j.end()) return;
  ju::expect_type(*providers, providers->is_object(), "an object of providers", source,
                  "providers");
  for (auto p = providers->begin(); p != providers->end(); ++p) {
    std::string path = "providers." + p.key();
    ju::require_object(p.value(), source, path);
    for (const char* key : {"base_url", "default_model"}) {
      if (auto it = p->find(key); it != p->end()) ju::as_string(*it, source, path + "." + key);
    }
    auto models = p->find("models");
    if (models == p->end()) continue;
    ju::expect_type(*models, models->is_object(), "an object of models", source, path + ".models");
    for (auto m = models->begin(); m != models->end(); ++m) {
      std::string mpath = path + ".models." + m.key();
      ju::require_object(m.value(), source, mpath);
      for (auto price = m->begin(); price != m->end(); ++price) {
        double v = ju::as_number(price.value(), source, mpath + "." + price.key());
        if (!(v >= 0))
          throw input_error(ju::field(source, mpath + "." + price.key()), "must be >= 0");
      }
    }
  }
}

}  // namespace

json load_config(const std::filesystem::path& file) {
  std::filesystem::path path = file.empty() ? default_config_file() : file;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (!file.empty()) throw input_error(path.string(), "no such file");
    return json::object();
  }
  json j = json_util::parse_text<json>(read_file(path.string()), path.string());
  if (!j.is_object()) throw input_error(path.string(), "not a JSON object");
  validate_config(j, path.string());
  return j;
}

std::string resolve_model(const std::string& provider, const ProviderOptions& o) {
  if (!o.model.empty()) return o.model;
  return o.config.value("/providers"_json_pointer / provider, json::object())
      .value("default_model", std::string());
}

double cost_usd(const json& config, const std::string& provider, const std::string& model,
                const Usage& usage) {
  json price = config.value("/providers"_json_pointer / provider, json::object())
                   .value("models", json::object())
                   .value(model, json::object());
  if (!price.is_object()) return 0.0;
  double in = price.value("input_per_mtok", 0.0);
  double out = price.value("output_per_mtok", 0.0);
  double cached = price.value("cache_read_per_mtok", in);
  std::int64_t fresh = std::max<std::int64_t>(0, usage.input_tokens - usage.cache_read_tokens);
  return (static_cast<double>(fresh) * in + static_cast<double>(usage.cache_read_tokens) * cached +
          static_cast<double>(usage.output_tokens) * out) /
         1e6;
}

json anthropic_request_body(const Request& request, const std::string& model) {
  json body = {{"model", model},
               {"max_tokens", request.max_output_tokens},
               {"messages", json::array({{{"role", "user"}, {"content", request.user}}})}};
  if (!request.system.empty()) body["system"] = request.system;
  return body;
}

json openai_request_body(const Request& request, const std::string& model) {
  json body = {
      {"model", model}, {"input", request.user}, {"max_output_tokens", request.max_output_tokens}};
  if (!request.system.empty()) body["instructions"] = request.system;
  if (!request.reasoning_effort.empty()) body["reasoning"] = {{"effort", request.reasoning_effort}};
  return body;
}

Answer parse_anthropic_response(const std::string& body) {
  // A field of an unexpected type (a model, a tool or an edited recording wrote it) makes a
  // malformed answer, never an exception.
  try {
    json j = json_util::parse_or_discarded(body);
    if (j.is_discarded() || !j.is_object() || !j.contains("content") || !j["content"].is_array())
      return malformed(body, "no content[]");
    Answer a;
    a.raw = body;
    for (const auto& block : j["content"]) {
      if (block.is_object() && block.value("type", "") == "text" && block.contains("text") &&
          block["text"].is_string())
        a.text += block["text"].get<std::string>();
    }
    json u = j.value("usage", json::object());
    a.usage = usage_from(u, "input_tokens", "output_tokens");
    if (u.is_object()) {
      a.usage.cache_read_tokens =
          json_util::whole_or(u, "cache_read_input_tokens", std::int64_t{0});
      // Anthropic counts cached input apart from input_tokens; Usage counts all input together.
      a.usage.input_tokens = saturating_add(a.usage.input_tokens, a.usage.cache_read_tokens);
    }
    a.stop_reason = j.value("stop_reason", std::string());
    a.truncated = a.stop_reason == "max_tokens";
    return a;
  } catch (const json::exception& e) {
    return malformed(body, json_util::exception_text(e));
  }
}

Answer parse_openai_response(const std::string& body) {
  // A field of an unexpected type (a model, a tool or an edited recording wrote it) makes a
  // malformed answer, never an exception.
  try {
    json j = json_util::parse_or_discarded(body);
    if (j.is_discarded() || !j.is_object() || !j.contains("output") || !j["output"].is_array())
      return malformed(body, "no output[]");
    Answer a;
    a.raw = body;
    for (const auto& item : j["output"]) {
      if (!item.is_object() || item.value("type", "") != "message") continue;
      for (const auto& c : item.value("content", json::array())) {
        if (c.is_object() && c.value("type", "") == "output_text" && c.contains("text") &&
            c["text"].is_string())
          a.text += c["text"].get<std::string>();
      }
    }
    json u = j.value("usage", json::object());
    a.usage = usage_from(u, "input_tokens", "output_tokens");
    if (u.is_object() && u.contains("input_tokens_details") &&
        u["input_tokens_details"].is_object())
      a.usage.cache_read_tokens =
          json_util::whole_or(u["input_tokens_details"], "cached_tokens", std::int64_t{0});
    std::string status = j.value("status", std::string());
    a.stop_reason = status;
    a.truncated = status == "incomplete";
    if (a.truncated && j.contains("incomplete_details") && j["incomplete_details"].is_object())
      a.stop_reason += ": " + j["incomplete_details"].value("reason", std::string());
    return a;
  } catch (const json::exception& e) {
    return malformed(body, json_util::exception_text(e));
  }
}

Answer parse_command_output(const std::string& out) {
  // A field of an unexpected type (a model, a tool or an edited recording wrote it) makes a
  // malformed answer, never an exception.
  try {
    Answer a;
    a.raw = out;
    a.stop_reason = "exited";
    // claude -p --output-format json: one object {"type":"result","result":"...","usage":{...}}
    json j = json_util::parse_or_discarded(out);
    if (!j.is_discarded() && j.is_object() && j.contains("result") && j["result"].is_string()) {
      a.text = j["result"].get<std::string>();
      json u = j.value("usage", json::object());
      a.usage = usage_from(u, "input_tokens", "output_tokens");
      if (u.is_object()) {
        a.usage.cache_read_tokens =
            json_util::whole_or(u, "cache_read_input_tokens", std::int64_t{0});
        a.usage.input_tokens = saturating_add(a.usage.input_tokens, a.usage.cache_read_tokens);
      }
      a.stop_reason = j.value("subtype", std::string("success"));
      return a;
    }
    // codex exec --json: JSON lines; the last agent message is the answer.
    std::istringstream lines(out);
    std::string line, message;
    bool events = false;
    while (std::getline(lines, line)) {
      json e = json_util::parse_or_discarded(line);
      if (e.is_discarded() || !e.is_object()) continue;
      events = true;
      std::string type = e.value("type", "");
      if (type == "item.completed" && e.contains("item") && e["item"].is_object() &&
          e["item"].value("type", "") == "agent_message") {
        message = e["item"].value("text", "");
      } else if (type == "turn.completed" && e.contains("usage")) {
        a.usage = usage_from(e["usage"], "input_tokens", "output_tokens");
        a.usage.cache_read_tokens =
            json_util::whole_or(e["usage"], "cached_input_tokens", std::int64_t{0});
      } else if (e.contains("msg") && e["msg"].is_object() &&
                 e["msg"].value("type", "") == "agent_message") {  // older codex event form
        message = e["msg"].value("message", "");
      }
    }
    a.text = events && !message.empty() ? message : out;
    return a;
  } catch (const json::exception& e) {
    return malformed(out, json_util::exception_text(e));
  }
}

}  // namespace kharness::llm
