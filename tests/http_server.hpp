// A tiny HTTP/1.1 server on 127.0.0.1 for tests of the model API clients: it answers each
// connection with the next scripted response (the last one repeats) and records every request.
// One request per connection (it answers with Connection: close).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kharness::testing {

struct ScriptedResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct RecordedRequest {
  std::string method, path;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class HttpServer {
 public:
  explicit HttpServer(std::vector<ScriptedResponse> script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpServer() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  HttpServer(const HttpServer&) = delete;  // owns a socket and a thread
  HttpServer& operator=(const HttpServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<RecordedRequest> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    while (!stopping_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      handle(c);
      ::close(c);
    }
  }
  void handle(int c) {
    std::string data;
    char buf[65536];
    std::size_t header_end = std::string::npos;
    while (header_end == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      data.append(buf, static_cast<std::size_t>(n));
      header_end = data.find("\r\n\r\n");
    }
    RecordedRequest req;
    std::string head = data.substr(0, header_end);
    std::size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    req.method = first.substr(0, first.find(' '));
    req.path = first.substr(first.find(' ') + 1);
    req.path = req.path.substr(0, req.path.find(' '));
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(' '));
        req.headers[name] = value;
      }
      pos = e + 2;
    }
    std::size_t length =
        req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    req.body = data.substr(header_end + 4);
    while (req.body.size() < length) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.body.append(buf, static_cast<std::size_t>(n));
    }
    ScriptedResponse r;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back(req);
      r = script_[std::min(next_, script_.size() - 1)];
      ++next_;
    }
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " Scripted\r\n";
    out += "Content-Type: application/json\r\nConnection: close\r\n";
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
    out += "\r\n" + r.body;
    std::size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
  }

  std::vector<ScriptedResponse> script_;
  std::size_t next_ = 0;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<RecordedRequest> requests_;
};

}  // namespace kharness::testing
