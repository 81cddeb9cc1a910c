// The providers behind llm::Provider and the one place that makes them by name. Another provider
// (tune) joins with one line in the table in providers.cpp.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llm/http.hpp"
#include "llm/provider.hpp"

namespace kharness::llm {

struct ProviderOptions {
  std::string base_url;  // empty: configs/providers.json's, else the public API
  std::string model;     // empty: the config's default for the provider
  std::string command;   // `command`: a shell command line; the prompt goes to its stdin
  double command_timeout_seconds = 1800;
  std::filesystem::path responses_dir;  // `replay`: recorded answers, used in name order
  std::size_t answers_used = 0;  // --resume: answers an earlier session took (replay skips them)
  HttpOptions http;
  nlohmann::json config = nlohmann::json::object();  // the providers config (load_config)
  // Facts for built-in providers (tune): operator, arch, operators dirs, seed, ...
  nlohmann::json context = nlohmann::json::object();
  const std::atomic<bool>* cancel = nullptr;  // Ctrl-C
};

using ProviderFactory = std::function<std::unique_ptr<Provider>(const ProviderOptions&)>;

// The model providers (anthropic, openai, command, replay). The offline generator, `tune`, is
// tune::TuneProvider (tune/ depends on this interface, not the other way round); the CLI puts the
// two together. Throws kharness::Error: exit 2 for an unknown name or missing option (no key, no
// --command), naming the known providers.
std::unique_ptr<Provider> make_provider(const std::string& name, const ProviderOptions& options);
std::vector<std::string> provider_names();
// The provider a run uses when none is named: anthropic when ANTHROPIC_API_KEY is set, else openai
// when OPENAI_API_KEY is set, else the built-in generator (tune).
std::string default_provider_name();

// configs/providers.json (next to operators/): default models, base URLs, prices. An empty object
// when the file is missing; throws Error (exit 2) when it is not JSON.
nlohmann::json load_config(const std::filesystem::path& file = {});
std::filesystem::path default_config_file();
// The model a provider uses with these options ("" when the provider has no model).
std::string resolve_model(const std::string& provider, const ProviderOptions& options);
// US dollars for `usage` at the config's prices of (provider, model); 0 when not priced.
double cost_usd(const nlohmann::json& config, const std::string& provider, const std::string& model,
                const Usage& usage);

// Response bodies to answers (also for recorded bodies). A body that is not the expected JSON
// gives an Answer with empty text and stop_reason "malformed_response", never an exception.
Answer parse_anthropic_response(const std::string& body);
Answer parse_openai_response(const std::string& body);
// stdout of a coding-agent CLI: `claude -p --output-format json` (one JSON object with "result"),
// `codex exec --json` (JSON lines; the last agent message), or plain text.
Answer parse_command_output(const std::string& out);

// Request bodies (exposed for tests).
nlohmann::json anthropic_request_body(const Request& request, const std::string& model);
nlohmann::json openai_request_body(const Request& request, const std::string& model);

}  // namespace kharness::llm
