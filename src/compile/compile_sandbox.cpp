// NVRTC in a sandboxed child process. The compile stage (nvrtc_compiler.cpp) checks the rules
// and looks in the compile cache in its own process; only a cache miss gets here, and only NVRTC
// runs in the child.
//
// The child is kharness re-executed as `__compile_worker` (never under KHARNESS_WORKER_WRAPPER),
// with:
//   - the environment: PATH, LD_LIBRARY_PATH, TMPDIR, LANG, LC_ALL and LC_CTYPE of ours, where
//     they pass sandbox::passes_scrub, nothing else (no API keys, no KHARNESS_* settings: the
//     request carries all it needs);
//   - limits: wall clock CompileLimits::timeout_seconds (the parent kills the process group),
//     the same in CPU seconds (RLIMIT_CPU: SIGXCPU), the address space (RLIMIT_AS), no file may
//     grow (RLIMIT_FSIZE 0), no core files;
//   - Landlock (when the kernel has it): reads of the toolkit's include folders, the folder of
//     libnvrtc (libnvrtc-builtins is dlopen'ed at the first compile), /etc/ld.so.cache (how
//     dlopen finds it) and the files the process already has mapped (kharness and its shared
//     libraries); no writes anywhere; no TCP; no signals to processes outside. The solution's
//     own files are not on disk for NVRTC: they are in-memory headers of the program (see
//     angle_toolkit_includes), so nothing of the submission's folder needs to be readable.
// Request and response travel over stdin/stdout as length-prefixed byte strings (sources and
// cubins are not JSON-safe text).
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/sandbox.hpp"
#include "kharness/subprocess.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRequestMagic = "kharness-nvrtc-request/1";
constexpr const char* kResponseMagic = "kharness-nvrtc-response/1";
// Exit status of a worker that could not restrict itself as required (the parent throws an
// environment error naming why).
constexpr int kNoSandboxExit = 3;

void put(std::string& out, const std::string& s) {
  out += std::to_string(s.size());
  out += '\n';
  out += s;
}

// Reads the length-prefixed strings of `in`; false when it is not such a list.
bool split(const std::string& in, std::vector<std::string>& out) {
  std::size_t pos = 0;
  while (pos < in.size()) {
    std::size_t eol = in.find('\n', pos);
    if (eol == std::string::npos || eol == pos || eol - pos > 12) return false;
    std::size_t n = 0;
    for (std::size_t i = pos; i < eol; ++i) {
      if (in[i] < '0' || in[i] > '9') return false;
      n = n * 10 + static_cast<std::size_t>(in[i] - '0');
    }
    pos = eol + 1;
    if (n > in.size() - pos) return false;
    out.push_back(in.substr(pos, n));
    pos += n;
  }
  return true;
}

// The folder libnvrtc was loaded from; libnvrtc-builtins lives beside it.
fs::path nvrtc_library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) == 0 || info.dli_fname == nullptr)
    return {};
  std::error_code ec;
  fs::path lib = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : lib.parent_path();
}

std::string compile_worker_executable() {
  if (const char* v = std::getenv("KHARNESS_COMPILE_WORKER"); v != nullptr && *v != '\0') return v;
  return self_executable();
}

std::vector<std::pair<std::string, std::string>> compile_environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (auto& [name, value] : sandbox::scrubbed_environment()) {
    if (name == "PATH" || name == "LD_LIBRARY_PATH" || name == "TMPDIR" || name == "LANG" ||
        name == "LC_ALL" || name == "LC_CTYPE") {
      env.emplace_back(name, value);
    }
  }
  return env;
}

std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.3g} GiB", static_cast<double>(bytes) / (1ULL << 30));
}

// Said once per process: a compile without Landlock.
void warn_unsandboxed(const std::string& why) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn(
        "compiling without the Landlock file sandbox: {} (limits, scrubbed environment "
        "and source rules still apply)",
        why);
  }
}

}  // namespace

CompileLimits default_compile_limits() {
  CompileLimits limits;
  if (const char* v = std::getenv("KHARNESS_COMPILE_TIMEOUT"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    double seconds = std::strtod(v, &end);
    if (end != nullptr && *end == '\0' && std::isfinite(seconds) && seconds > 0)
      limits.timeout_seconds = seconds;
  }
  if (const char* v = std::getenv("KHARNESS_ALLOW_UNSANDBOXED");
      v != nullptr && *v != '\0' && std::string_view(v) != "0") {
    limits.require_landlock = false;
  }
  return limits;
}

namespace {

// At most one NVRTC child per core at once, however many threads compile (a pool of workers
// scoring on many GPUs compiles in parallel, docs/pipeline.md#pools-and-gpus): more would only
// share the cores.
class CompileSlots {
 public:
  CompileSlots() : free_(std::max(1u, std::thread::hardware_concurrency())) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++free_;
    }
    freed_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  unsigned free_;
};

SubprocessResult run_compile_worker(const SubprocessOptions& sub) {
  static CompileSlots slots;
  slots.acquire();
  SubprocessResult r = run_subprocess(sub);
  slots.release();  // run_subprocess never throws
  return r;
}

}  // namespace

NvrtcOutput sandboxed_nvrtc_compile(const std::string& entry_text, const std::string& entry_name,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::vector<std::string>& options,
                                    const std::vector<fs::path>& read_dirs,
                                    const CompileLimits& limits, std::string& limit_hit) {
  std::string request;
  put(request, kRequestMagic);
  put(request, limits.require_landlock ? "1" : "0");
  put(request, std::to_string(limits.address_space_bytes));
  put(request, fmt::format("{}", limits.timeout_seconds));
  put(request, std::to_string(read_dirs.size()));
  for (const auto& d : read_dirs) put(request, d.string());
  put(request, entry_name);
  put(request, entry_text);
  put(request, std::to_string(headers.size()));
  for (const auto& [name, text] : headers) {
    put(request, name);
    put(request, text);
  }
  put(request, std::to_string(options.size()));
  for (const auto& o : options) put(request, o);

  SubprocessOptions sub;
  sub.argv = {compile_worker_executable(), "__compile_worker"};
  sub.stdin_data = std::move(request);
  sub.timeout_seconds = limits.timeout_seconds;
  sub.kill_grace_seconds = 0.5;
  sub.stdout_limit = 256 << 20;
  sub.inherit_environment = false;
  sub.env = compile_environment();
  SubprocessResult r = run_compile_worker(sub);

  NvrtcOutput out;
  auto stopped = [&](const std::string& limit, const std::string& message) {
    limit_hit = limit;
    out.result = NVRTC_ERROR_COMPILATION;
    out.log = fmt::format("{}(0): error: {}\n", entry_name, message);
    return out;
  };
  if (!r.started) {
    throw Error(ExitCode::kInternal, "compile",
                "cannot start the compiler process: " + r.start_error);
  }
  if (r.timed_out || r.signal == SIGXCPU) {
    return stopped("time", fmt::format("the compile did not finish within {:.3g} s (kharness's "
                                       "compile time limit, --compile-timeout)",
                                       limits.timeout_seconds));
  }
  std::vector<std::string> parts;
  bool well_formed = r.exit_code == 0 && split(r.stdout_data, parts) && parts.size() == 6 &&
                     parts[0] == kResponseMagic;
  if (!well_formed) {
    if (r.exit_code == kNoSandboxExit) {
      throw environment_error(fmt::format(
          "the compile sandbox cannot start: {}; --allow-unsandboxed compiles without Landlock "
          "(the limits, the scrubbed environment and the source rules still apply)",
          r.stderr_data.empty() ? std::string("Landlock unavailable") : r.stderr_data));
    }
    if (r.signal != 0 || r.exit_code != 0) {
      // Under RLIMIT_AS an allocation failure ends NVRTC (std::bad_alloc, SIGABRT; or SIGSEGV).
      return stopped("memory",
                     fmt::format("the compiler process {} (its address space is limited to {}; "
                                 "a compile that needs more fails)",
                                 r.describe(), gib(limits.address_space_bytes)));
    }
    throw Error(ExitCode::kInternal, "compile", "the compiler process sent no result");
  }
  int code = std::atoi(parts[1].c_str());
  if (parts[5] == "error") {  // the worker caught an Error: parts[2] its exit code, [3] message
    throw Error(static_cast<ExitCode>(std::atoi(parts[2].c_str())), "", parts[3]);
  }
  if (!parts[5].empty()) warn_unsandboxed(parts[5]);
  out.result = static_cast<nvrtcResult>(code);
  out.log = std::move(parts[2]);
  out.ptx = std::move(parts[3]);
  out.cubin = std::move(parts[4]);
  if (out.result == NVRTC_ERROR_OUT_OF_MEMORY) limit_hit = "memory";
  return out;
}

int compile_worker_main() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::vector<std::string> in;
  if (!split(input, in) || in.size() < 8 || in[0] != kRequestMagic) {
    std::fputs("kharness: error: __compile_worker: not a compile request\n", stderr);
    return 4;
  }
  std::size_t at = 1;
  auto next = [&]() -> const std::string& {
    static const std::string kEmpty;
    return at < in.size() ? in[at++] : kEmpty;
  };
  auto count = [&]() {
    return static_cast<std::size_t>(std::strtoull(next().c_str(), nullptr, 10));
  };
  const bool require_landlock = next() == "1";
  sandbox::Limits limits;
  limits.address_space_bytes = std::strtoull(next().c_str(), nullptr, 10);
  limits.cpu_seconds = std::strtod(next().c_str(), nullptr);
  sandbox::FsRules rules;
  for (std::size_t n = count(); n > 0 && at < in.size(); --n) rules.read.emplace_back(next());
  const std::string entry_name = next();
  const std::string entry_text = next();
  std::vector<std::pair<std::string, std::string>> headers;
  for (std::size_t n = count(); n > 0 && at + 1 < in.size(); --n) {
    std::string name = next();
    headers.emplace_back(std::move(name), next());
  }
  std::vector<std::string> options;
  for (std::size_t n = count(); n > 0 && at < in.size(); --n) options.push_back(next());

  if (std::string why = sandbox::apply_limits(limits); !why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return kNoSandboxExit;
  }
  for (auto& f : sandbox::mapped_files()) rules.read.push_back(std::move(f));
  if (fs::path lib = nvrtc_library_dir(); !lib.empty()) rules.read.push_back(lib);
  rules.read.emplace_back("/etc/ld.so.cache");
  std::string unsandboxed = sandbox::restrict_self(rules);
  if (!unsandboxed.empty() && require_landlock) {
    std::fprintf(stderr, "%s\n", unsandboxed.c_str());
    return kNoSandboxExit;
  }

  std::string response;
  put(response, kResponseMagic);
  try {
    NvrtcOutput out = nvrtc_compile(entry_text, entry_name, headers, options);
    put(response, std::to_string(static_cast<int>(out.result)));
    put(response, out.log);
    put(response, out.ptx);
    put(response, out.cubin);
    put(response, unsandboxed);
  } catch (const Error& e) {
    put(response, "0");
    put(response, std::to_string(static_cast<int>(e.code())));
    put(response, e.message());
    put(response, "");
    put(response, "error");
  }
  std::fwrite(response.data(), 1, response.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace kharness
