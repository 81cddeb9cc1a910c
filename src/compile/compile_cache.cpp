#include "compile/compile_cache.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <system_error>

#include "core/json_util.hpp"
#include "kharness/file.hpp"
#include "kharness/hash.hpp"
#include "kharness/status.hpp"
#include "kharness/text.hpp"

namespace kharness::compile_cache {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Diagnostic::Severity parse_severity(const std::string& s) {
  if (s == "warning") {
    return Diagnostic::Severity::kWarning;
  }
  if (s == "note") {
    return Diagnostic::Severity::kNote;
  }
  return Diagnostic::Severity::kError;
}

// A cache file that is not a regular file (a FIFO planted in the cache) is a miss, not a hang.
std::optional<std::string> slurp(const fs::path& path) { return try_read_regular_file(path); }

}  // namespace

std::string make_key(const Solution& solution, const std::vector<std::string>& options,
                     const std::string& arch, const std::string& nvrtc_version,
                     const std::string& cutlass_version) {
  Sha256 h;
  h.field(fmt::format("kharness-compile-cache-v{}", kFormatVersion));
  h.field(nvrtc_version);
  if (!cutlass_version.empty()) h.field("cutlass " + cutlass_version);
  h.field(arch);
  h.field(std::to_string(options.size()));
  for (const auto& o : options) {
    h.field(o);
  }
  h.field(std::to_string(solution.sources.size()));
  for (const auto& s : solution.sources) {
    h.field(s.path);
    h.field(s.content);
  }
  h.field(std::to_string(solution.entry));
  h.field(json_util::dump(solution.plan.raw));
  return h.hex();
}

fs::path entry_dir(const fs::path& cache_dir, const std::string& key) {
  return cache_dir / key.substr(0, 2) / key;
}

std::optional<Entry> load(const fs::path& cache_dir, const std::string& key) {
  const fs::path dir = entry_dir(cache_dir, key);
  try {
    auto text = slurp(dir / "result.json");
    if (!text) {
      return std::nullopt;
    }
    json j = json_util::parse_text<json>(*text, (dir / "result.json").string());
    if (j.at("format").get<int>() != kFormatVersion || j.at("key").get<std::string>() != key) {
      spdlog::debug("compile cache: {} has another format or key; ignored", dir.string());
      return std::nullopt;
    }
    Entry e;
    auto status = parse_status(j.at("status").get<std::string>());
    if (!status || (*status != Status::kPassed && *status != Status::kCompileError)) {
      return std::nullopt;
    }
    e.status = *status;
    auto check = [&](const char* file, const char* sum, std::string& into) {
      auto content = slurp(dir / file);
      if (!content || sha256_hex(*content) != j.at(sum).get<std::string>()) {
        return false;
      }
      into = std::move(*content);
      return true;
    };
    if (!check("compile.log", "log_sha256", e.log)) {
      spdlog::debug("compile cache: {}: compile.log missing or corrupt", dir.string());
      return std::nullopt;
    }
    if (e.status == Status::kPassed && (!check("kernel.ptx", "ptx_sha256", e.ptx) ||
                                        !check("kernel.cubin", "cubin_sha256", e.cubin))) {
      spdlog::debug("compile cache: {}: kernel.ptx/kernel.cubin missing or corrupt", dir.string());
      return std::nullopt;
    }
    for (const auto& d : j.at("diagnostics")) {
      e.diagnostics.push_back({parse_severity(d.at("severity").get<std::string>()),
                               d.at("file").get<std::string>(), d.at("line").get<int>(),
                               d.at("message").get<std::string>()});
    }
    for (const auto& k : j.at("kernels")) {
      e.kernels.push_back(kernel_from_json(k));
    }
    return e;
  } catch (const std::exception& error) {
    spdlog::debug("compile cache: {}: unreadable entry ignored: {}", dir.string(), error.what());
    return std::nullopt;
  }
}

bool store(const fs::path& cache_dir, const std::string& key, const Entry& entry) {
  const fs::path dir = entry_dir(cache_dir, key);
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const fs::path tmp =
      dir.parent_path() / fmt::format(".tmp-{}-{}-{:x}", key.substr(0, 16), getpid(), rng());
  std::error_code ec;
  try {
    fs::create_directories(tmp);
    json diagnostics = json::array();
    for (const auto& d : entry.diagnostics) diagnostics.push_back(to_json(d));
    json kernels = json::array();
    for (const auto& k : entry.kernels) {
      kernels.push_back(to_json(k));
    }
    json j = {{"format", kFormatVersion},
              {"key", key},
              {"status", std::string(status_name(entry.status))},
              {"log_sha256", sha256_hex(entry.log)},
              {"diagnostics", diagnostics},
              {"kernels", kernels}};
    write_file_atomic((tmp / "compile.log").string(), entry.log);
    if (entry.status == Status::kPassed) {
      j["ptx_sha256"] = sha256_hex(entry.ptx);
      j["cubin_sha256"] = sha256_hex(entry.cubin);
      write_file_atomic((tmp / "kernel.ptx").string(), entry.ptx);
      write_file_atomic((tmp / "kernel.cubin").string(), entry.cubin);
    }
    write_file_atomic((tmp / "result.json").string(), json_util::dump(j, 1));
    // An existing entry here is corrupt (or another process just wrote the same one): replace.
    if (fs::exists(dir, ec)) {
      fs::remove_all(dir, ec);
    }
    fs::rename(tmp, dir, ec);
    if (ec) {
      // Lost a race against another writer of the same key: theirs is as good as ours.
      spdlog::debug("compile cache: {}: {}", dir.string(), ec.message());
      fs::remove_all(tmp, ec);
      return fs::exists(dir / "result.json", ec);
    }
    return true;
  } catch (const std::exception& error) {
    spdlog::debug("compile cache: cannot write {}: {}", dir.string(), error.what());
    fs::remove_all(tmp, ec);
    return false;
  }
}

}  // namespace kharness::compile_cache
