// HTTP POST with libcurl for the model APIs: connect and total timeouts, and retries with
// exponential backoff and jitter on 429, 500-504, 529 and connection errors (honouring
// `retry-after`), never on 400/401/403 or on quota and spend-limit errors. Headers (which carry
// API keys) are never logged; a log line names the URL, the status and the attempt only.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kharness::llm {

struct RetryPolicy {
  int max_attempts = 6;             // the first try included
  double base_delay_seconds = 1.0;  // doubled each retry, with full jitter
  double max_delay_seconds = 60.0;  // one wait at most (also caps retry-after)
};

struct HttpOptions {
  double connect_timeout_seconds = 15.0;
  double total_timeout_seconds = 600.0;  // one attempt
  double deadline_seconds = 0.0;         // all attempts and waits together; <= 0: none
  RetryPolicy retry;
  // Set from another thread (Ctrl-C) to abort a transfer or a wait between retries.
  const std::atomic<bool>* cancel = nullptr;
};

struct HttpResponse {
  long status = 0;  // 0: no HTTP response (connection error)
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string transport_error;                               // libcurl's message when status == 0
  int attempts = 0;
  double seconds = 0.0;  // wall time, waits included

  std::string header(const std::string& lower_name) const;
};

// What to do with one attempt's result.
enum class RetryDecision { kDone, kRetry, kFatal };
// 2xx and other final statuses: kDone; 429/500-504/529/connection errors: kRetry, unless the body
// names a quota or spend limit (kFatal); 400/401/403: kFatal.
RetryDecision classify(const HttpResponse& response);
// Whether a response body reports an exhausted quota, credit balance or spend limit.
bool is_quota_error(const std::string& body);
// Seconds to wait before retry `attempt` (1-based): retry-after when given (seconds or an HTTP
// date), else base * 2^(attempt-1) with full jitter; capped by the policy's maximum.
double retry_delay(const HttpResponse& response, int attempt, const RetryPolicy& policy);
// The provider's own message from an error body ({"error": {"message": ...}} or similar), else
// the start of the body.
std::string error_message(const std::string& body);

class HttpClient {
 public:
  // POSTs `body` (JSON) to `url`, retrying as above. Returns the last response: the caller turns a
  // non-2xx status into an error. Never throws.
  HttpResponse post_json(const std::string& url,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         const std::string& body, const HttpOptions& options) const;
};

}  // namespace kharness::llm
