#include "llm/http.hpp"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/json_util.hpp"

namespace kharness::llm {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  std::size_t b = s.find_first_not_of(" \t\r\n");
  std::size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* headers = static_cast<std::vector<std::pair<std::string, std::string>>*>(user);
  std::string line(data, size * n);
  std::size_t colon = line.find(':');
  if (colon != std::string::npos) {
    headers->emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  } else if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();  // a new response (after 100 Continue): keep only the last one's headers
  }
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(user);
  return cancel && cancel->load() ? 1 : 0;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Local servers are never reached through a proxy (a user's http_proxy would swallow them).
std::string no_proxy_list() {
  std::string list = "127.0.0.1,localhost,::1";
  for (const char* name : {"no_proxy", "NO_PROXY"}) {
    if (const char* v = std::getenv(name); v && *v) return std::string(v) + "," + list;
  }
  return list;
}

HttpResponse attempt(const std::string& url,
                     const std::vector<std::pair<std::string, std::string>>& headers,
                     const std::string& body, const HttpOptions& options) {
  HttpResponse r;
  CURL* curl = curl_easy_init();
  if (!curl) {
    r.transport_error = "curl_easy_init failed";
    return r;
  }
  curl_slist* list = nullptr;
  for (const auto& [name, value] : headers) {
    list = curl_slist_append(list, (name + ": " + value).c_str());
  }
  list = curl_slist_append(list, "Content-Type: application/json");
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  char error[CURL_ERROR_SIZE] = {0};
  std::string no_proxy = no_proxy_list();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // thread-safe timeouts
  curl_easy_setopt(curl, CURLOPT_NOPROXY, no_proxy.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connect_timeout_seconds * 1000));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(options.total_timeout_seconds * 1000));
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");  // whatever libcurl can decode
  if (options.cancel) {
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, options.cancel);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  }
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.status = 0;
    r.transport_error = error[0] ? error : curl_easy_strerror(rc);
  }
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

bool is_quota_error(const std::string& body) {
  std::string b = lower(body);
  for (const char* marker :
       {"insufficient_quota", "quota exceeded", "exceeded your current quota", "credit balance",
        "billing", "spend limit", "spending limit", "usage limit"}) {
    if (b.find(marker) != std::string::npos) return true;
  }
  return false;
}

RetryDecision classify(const HttpResponse& r) {
  if (r.status == 0) return RetryDecision::kRetry;  // connection error, timeout, reset
  if (r.status >= 200 && r.status < 300) return RetryDecision::kDone;
  bool retryable = r.status == 429 || (r.status >= 500 && r.status <= 504) || r.status == 529;
  if (retryable) return is_quota_error(r.body) ? RetryDecision::kFatal : RetryDecision::kRetry;
  return RetryDecision::kFatal;  // 400, 401, 403, 404, ...: trying again cannot help
}

double retry_delay(const HttpResponse& r, int attempt, const RetryPolicy& policy) {
  std::string after = r.header("retry-after");
  if (!after.empty()) {
    char* end = nullptr;
    double seconds = std::strtod(after.c_str(), &end);
    if (end != after.c_str() && *end == '\0' && seconds >= 0) {
      return std::min(seconds, policy.max_delay_seconds);
    }
    std::time_t when = curl_getdate(after.c_str(), nullptr);
    if (when > 0) {
      double wait = std::difftime(when, std::time(nullptr));
      return std::clamp(wait, 0.0, policy.max_delay_seconds);
    }
  }
  double cap = std::min(policy.max_delay_seconds,
                        policy.base_delay_seconds * std::pow(2.0, std::max(0, attempt - 1)));
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, cap)(rng);  // full jitter
}

std::string error_message(const std::string& body) {
  nlohmann::json j = json_util::parse_or_discarded(body);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error")) {
      const auto& e = j["error"];
      if (e.is_object() && e.contains("message") && e["message"].is_string())
        return e["message"].get<std::string>();
      if (e.is_string()) return e.get<std::string>();
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  }
  std::string t = trim(body);
  return t.size() > 300 ? t.substr(0, 300) + "…" : t;
}

HttpResponse HttpClient::post_json(const std::string& url,
                                   const std::vector<std::pair<std::string, std::string>>& headers,
                                   const std::string& body, const HttpOptions& options) const {
  global_init();
  auto t0 = std::chrono::steady_clock::now();
  HttpResponse r;
  for (int n = 1;; ++n) {
    HttpOptions one = options;
    if (options.deadline_seconds > 0) {
      double left = options.deadline_seconds - seconds_since(t0);
      one.total_timeout_seconds = std::max(0.001, std::min(one.total_timeout_seconds, left));
    }
    r = attempt(url, headers, body, one);
    r.attempts = n;
    RetryDecision decision = classify(r);
    bool cancelled = options.cancel && options.cancel->load();
    if (decision != RetryDecision::kRetry || n >= options.retry.max_attempts || cancelled) break;
    double wait = retry_delay(r, n, options.retry);
    if (options.deadline_seconds > 0 && seconds_since(t0) + wait >= options.deadline_seconds) break;
    spdlog::info("{}: {}; retry {} of {} in {:.1f} s", url,
                 r.status ? "HTTP " + std::to_string(r.status) : r.transport_error, n,
                 options.retry.max_attempts - 1, wait);
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (std::chrono::steady_clock::now() < until) {
      if (options.cancel && options.cancel->load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace kharness::llm
