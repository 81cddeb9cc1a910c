// The one interface every source of candidate kernels sits behind: HTTP model APIs (anthropic,
// openai), a coding-agent CLI (command), recorded answers (replay) and the built-in offline
// generator (tune). The controller builds a Request, a provider answers with text that holds a
// fenced ```cuda block, and the controller reports back what the pipeline made of it (observe),
// which stateless providers ignore and the tune provider steers its search by.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kharness::llm {

struct Request {
  std::string system;  // instructions: rules, format, knowledge
  std::string user;    // the task, the current best kernel, feedback
  std::string model;   // provider-specific model name; empty: the provider's default
  std::int64_t max_output_tokens = 16384;
  std::string reasoning_effort;    // "low" | "medium" | "high" | "" (provider default)
  double timeout_seconds = 600.0;  // whole request, retries included
  // Structured facts for built-in providers that do not read prose (tune): operator name,
  // definition and seed paths, workloads, the current best candidate id, the step number.
  nlohmann::json context = nlohmann::json::object();
};

struct Usage {
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int64_t cache_read_tokens = 0;
};

struct Answer {
  std::string text;  // the model's answer (markdown with a ```cuda block)
  Usage usage;
  std::string stop_reason;  // "end_turn", "max_tokens", "completed", "incomplete", ...
  bool truncated = false;   // stopped by the output limit: a code block in it may be cut
  double latency_seconds = 0.0;
  std::string raw;  // the raw response body (archived; never holds the API key)
};

// What the pipeline made of one answer, reported back to the provider that gave it.
struct Outcome {
  std::string candidate_id;
  std::string status;      // PASSED, COMPILE_ERROR, ..., or NO_CODE / BAD_PLAN
  double score = 0.0;      // mean speedup over the baseline (0 when not PASSED)
  nlohmann::json verdict;  // the verdict JSON (null when nothing ran)
  nlohmann::json context;  // the Request::context the answer was asked with
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // Throws kharness::Error for failures that must stop a run (bad key, quota); returns an Answer
  // (possibly with empty text) for everything the controller should record as a failed candidate.
  virtual Answer complete(const Request& request) = 0;
  virtual void observe(const Outcome& /*outcome*/) {}
  // False when the provider has nothing new to propose (tune: its space is exhausted).
  virtual bool has_more() const { return true; }
};

}  // namespace kharness::llm
