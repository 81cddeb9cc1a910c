// The archive: SQLite index + artifact files (see include/kharness/archive.hpp for the layout and
// the crash-safety argument). Only the SQLite C API of 3.31 (Ubuntu 20.04) and older is used:
// no RETURNING, no UPSERT, no JSON operators.
#include "kharness/archive.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <thread>
#include <variant>

#include "archive/sqlite.hpp"
#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/file.hpp"
#include "kharness/hash.hpp"
#include "kharness/report.hpp"
#include "kharness/text.hpp"

namespace kharness::archive {
namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Secrets

namespace {

// Names whose value is a secret, in headers, JSON keys and environment variables.
bool secret_name(std::string_view key) {
  std::string k;
  for (char c : key) k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* s : {"api_key", "api-key", "apikey", "authorization", "secret", "password"}) {
    if (k.find(s) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::string scrub_secrets(std::string_view text) {
  static const std::regex bearer(R"(\b(Bearer)\s+[A-Za-z0-9._~+/=-]{8,})", std::regex::icase);
  // "sk-..." (OpenAI, Anthropic "sk-ant-..."): long runs of key characters after the prefix.
  static const std::regex sk_key(R"(\bsk-[A-Za-z0-9_-]{16,})");
  // x-api-key: VALUE, "api_key": "VALUE", ANTHROPIC_API_KEY=VALUE, Authorization: VALUE.
  static const std::regex named(
      R"(((?:x-api-key|api[_-]?key|authorization)["']?\s*[:=]\s*["']?)(?!Bearer\b)(?!\[REDACTED\])([^\s"',;]+))",
      std::regex::icase);
  std::string out(text);
  out = std::regex_replace(out, bearer, "$1 [REDACTED]");
  out = std::regex_replace(out, sk_key, "[REDACTED]");
  out = std::regex_replace(out, named, "$1[REDACTED]");
  return out;
}

json scrub_json_secrets(const json& value) {
  if (value.is_string()) return scrub_secrets(value.get<std::string>());
  if (value.is_array()) {
    json out = json::array();
    for (const auto& v : value) out.push_back(scrub_json_secrets(v));
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      out[it.key()] = secret_name(it.key()) && it.value().is_string()
                          ? json("[REDACTED]")
                          : scrub_json_secrets(it.value());
    }
    return out;
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Cache key

std::string verdict_cache_key(const CacheKeyParts& parts) {
  Sha256 h;
  h.field("kharness.verdict-cache/1");
  h.field(std::to_string(parts.sources.size()));
  for (const auto& s : parts.sources) h.field(s.path).field(s.content);
  h.field(json_util::dump(parts.plan));
  h.field(json_util::dump(parts.options));
  h.field(parts.definition);
  h.field(parts.workloads);
  h.field(parts.harness);
  h.field(parts.gpu);
  h.field(parts.driver);
  h.field(parts.kharness_version);
  return h.hex();
}

// ---------------------------------------------------------------------------------------------
// Files

namespace {

[[noreturn]] void io_error(const fs::path& path, const std::string& what) {
  throw environment_error(fmt::format("{}: {}: {}", path.string(), what, std::strerror(errno)));
}

void fsync_path(const fs::path& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;  // best effort for folders on file systems that refuse O_RDONLY dirs
  ::fsync(fd);
  ::close(fd);
}

// Write to a temporary file beside `path`, fsync it, rename it over `path`.
void write_durable(const fs::path& path, std::string_view content) {
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error(tmp, "cannot create");
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      io_error(tmp, "write failed");
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) io_error(tmp, "fsync failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) io_error(path, "rename failed");
}

// The most an archive file may hold (a cubin of a large kernel is a few MB).
constexpr off_t kMaxArtifactBytes = off_t{256} << 20;

// A file of a candidate folder, "" when absent. Anyone may have edited an archive: a FIFO or a
// device in place of a file would block or never end, a huge file exhaust memory, a symlink
// (`source.cu` -> a host file) would show or merge what is not the archive's. So the file is read
// beneath the archive's folder `root` with no link on the way, must be a regular one of bounded
// size (kharness/file.hpp); anything else is an input error naming it.
std::string read_all(const fs::path& root, const fs::path& path) {
  const fs::path relative = path.lexically_normal().lexically_relative(root.lexically_normal());
  std::string why;
  std::optional<std::string> text =
      try_read_file_beneath(root, relative, static_cast<std::size_t>(kMaxArtifactBytes), &why);
  if (text) return std::move(*text);
  // Absent (or under a folder that is not one): an artifact this candidate does not have.
  if (why == "no such file" || why == "a part of the path is not a folder") return "";
  throw input_error(path.string(), why);
}

// A JSON file of a candidate folder (null when absent); not JSON is an input error naming it.
json read_json(const fs::path& root, const fs::path& path) {
  std::string text = read_all(root, path);
  if (text.empty()) return nullptr;
  return json_util::parse_text<json>(text, path.string());
}

// The index file's path, for messages.
std::string index_name(sqlite3* db) {
  const char* f = sqlite3_db_filename(db, "main");
  return f && *f ? std::string(f) : std::string("archive index");
}

// An error of the index (index.sqlite). A file that is not a database (or a damaged one) is bad
// input naming the file; anything else (busy, read-only, I/O) is the environment.
[[noreturn]] void index_error(sqlite3* db, const std::string& what) {
  int code = sqlite3_errcode(db) & 0xff;
  std::string message = fmt::format("{}: {}", what, sqlite3_errmsg(db));
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
    throw input_error(index_name(db), message + " (a damaged or foreign index.sqlite)");
  throw environment_error(fmt::format("{}: {}", index_name(db), message));
}

// Fresh entropy on every call: a thread-local generator would repeat its ids in forked children.
std::string random_hex(int digits) {
  std::random_device rd;
  std::string out;
  while (static_cast<int>(out.size()) < digits) {
    std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    out += fmt::format("{:016x}", v);
  }
  return out.substr(0, static_cast<std::size_t>(digits));
}

std::string run_id_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return std::string(buf) + "-" + random_hex(4);
}

// A relative source path that stays inside sources/ (no absolute paths, no "..").
std::string safe_relative(const std::string& path, std::size_t index) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.empty() || p.is_absolute() || *p.begin() == "..") return fmt::format("file{}.cu", index);
  return p.string();
}

// ---------------------------------------------------------------------------------------------
// SQLite

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  state TEXT NOT NULL,
  command TEXT,
  operator TEXT,
  info TEXT
);
CREATE TABLE IF NOT EXISTS candidates (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(id),
  seq INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT -1,
  parent_id TEXT,
  name TEXT,
  operator TEXT NOT NULL,
  origin TEXT,
  created_at TEXT NOT NULL,
  cache_key TEXT,
  cached_from TEXT,
  dir TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_run ON candidates(run_id, seq);
CREATE INDEX IF NOT EXISTS candidates_operator ON candidates(operator);
CREATE INDEX IF NOT EXISTS candidates_cache ON candidates(cache_key);
CREATE TABLE IF NOT EXISTS verdicts (
  candidate_id TEXT PRIMARY KEY REFERENCES candidates(id),
  status TEXT NOT NULL,
  failure_kind TEXT,
  failure_message TEXT,
  mean_speedup REAL,
  geomean_speedup REAL,
  mean_sol_fraction REAL,
  seconds REAL,
  gpu TEXT,
  operator_speedup REAL,
  operator_speedup_estimated INTEGER
);
CREATE TABLE IF NOT EXISTS workload_results (
  candidate_id TEXT NOT NULL REFERENCES candidates(id),
  uuid TEXT NOT NULL,
  axes TEXT,
  status TEXT NOT NULL,
  failure_kind TEXT,
  latency REAL,
  baseline_latency REAL,
  speedup REAL,
  sol_fraction REAL,
  PRIMARY KEY (candidate_id, uuid)
);
)sql";

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db) {
    // Every statement is kharness's own: one that does not prepare meets a database of another
    // schema (checked when opened) or a damaged one.
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      index_error(db, fmt::format("cannot prepare '{}'", sql.substr(0, 60)));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;  // owns the prepared statement
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind_or_null(int i, const std::string& v) {
    if (v.empty()) {
      sqlite3_bind_null(stmt_, i);
    } else {
      bind(i, v);
    }
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // True while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    index_error(db_, "query failed");
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  // Any column as it is stored (for copying rows between archives).
  using Value = std::variant<std::monostate, std::int64_t, double, std::string>;
  Value value(int col) const {
    switch (sqlite3_column_type(stmt_, col)) {
      case SQLITE_NULL:
        return std::monostate{};
      case SQLITE_INTEGER:
        return integer(col);
      case SQLITE_FLOAT:
        return real(col);
      default:
        return text(col);
    }
  }
  Statement& bind(int i, const Value& v) {
    if (std::holds_alternative<std::monostate>(v)) sqlite3_bind_null(stmt_, i);
    if (const auto* n = std::get_if<std::int64_t>(&v)) bind(i, *n);
    if (const auto* d = std::get_if<double>(&v)) bind(i, *d);
    if (const auto* t = std::get_if<std::string>(&v)) bind(i, *t);
    return *this;
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    index_error(db, bounded(sql, 60));
  }
}

// PRAGMA journal_mode=WAL, retried while another connection holds the lock it needs. Switching a
// new index to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY at once, without its
// busy handler, when another process opening the same new archive holds one (four score shards
// creating one archive together: "PRAGMA journal_mode=WAL: database is locked" in 10 of 25 runs
// of Archive.ConcurrentWriters). The mode is kept in the file, so the first switch is the only
// one that contends; the wait is bounded like the busy timeout.
void set_wal(sqlite3* db) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
  for (;;) {
    const int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline)
      index_error(db, "PRAGMA journal_mode=WAL");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + jitter() % 20));
  }
}

// BEGIN IMMEDIATE ... COMMIT, rolled back when the scope exits early.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;  // one transaction, ended once
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    exec(db_, "COMMIT");
    done_ = true;
  }

 private:
  sqlite3* db_;
  bool done_ = false;
};

// Candidate folders still under their temporary name (".<id>.tmp.<pid>") whose writer is dead:
// what a killed process left half-written. Nothing indexes them; they only take space.
void remove_abandoned_folders(const fs::path& candidates) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(candidates, ec)) {
    std::string name = entry.path().filename().string();
    auto at = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + at + 5));
    if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) fs::remove_all(entry.path(), ec);
  }
}

// PASSED and not suspect (a suspect verdict's failure_kind holds its marker).
constexpr const char* kCleanPass =
    "v.status = 'PASSED' AND (v.failure_kind IS NULL OR v.failure_kind = '')";

// A database that has the tables but not the columns kharness writes (another program's, or an
// edited one) is refused when opened, naming the file, not at the first query.
// The columns of each table in the index's first format (what check_schema requires).
constexpr const char* kTables[][2] = {
    {"runs", "id, started_at, finished_at, state, command, operator, info"},
    {"candidates",
     "id, run_id, seq, step, parent_id, name, operator, origin, created_at, cache_key, "
     "cached_from, dir"},
    {"verdicts",
     "candidate_id, status, failure_kind, failure_message, mean_speedup, geomean_speedup, "
     "mean_sol_fraction, seconds, gpu"},
    {"workload_results",
     "candidate_id, uuid, axes, status, failure_kind, latency, baseline_latency, speedup, "
     "sol_fraction"}};

// Columns added since the first format, with what an index written before them means in their
// place: an older index gets them (filled so) when opened for writing (upgrade_index), and a
// merge reads an older source with these values (read_source). An older index's mean_speedup
// was already over the operator's baseline, a run's candidates (but its seed c0000) estimated
// through the incumbent.
struct AddedColumn {
  std::size_t table;  // index into kTables
  const char* name;
  const char* type;
  const char* older_value;  // an SQL expression over the table's own row
};
constexpr AddedColumn kAddedColumns[] = {
    {2, "operator_speedup", "REAL", "mean_speedup"},
    {2, "operator_speedup_estimated", "INTEGER",
     "EXISTS (SELECT 1 FROM candidates c JOIN runs r ON r.id = c.run_id WHERE c.id = "
     "verdicts.candidate_id AND r.command = 'run' AND c.name <> 'c0000')"}};

bool has_column(sqlite3* db, const char* table, const char* column) {
  sqlite3_stmt* stmt = nullptr;
  std::string sql = fmt::format("SELECT {} FROM {} LIMIT 0", column, table);
  int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
  sqlite3_finalize(stmt);
  return rc == SQLITE_OK;
}

// The columns kharness writes to table `t` now (the first format's and those added since), and
// the expressions that read them from `db`'s table (an added column's older value where `db`
// predates it).
std::string table_columns(std::size_t t) {
  std::string out = kTables[t][1];
  for (const auto& a : kAddedColumns)
    if (a.table == t) out += fmt::format(", {}", a.name);
  return out;
}
std::string select_columns(sqlite3* db, std::size_t t) {
  std::string out = kTables[t][1];
  for (const auto& a : kAddedColumns) {
    if (a.table != t) continue;
    out += has_column(db, kTables[t][0], a.name) ? fmt::format(", {}", a.name)
                                                 : fmt::format(", ({})", a.older_value);
  }
  return out;
}

void check_schema(sqlite3* db) {
  for (const auto& [table, columns] : kTables) {
    sqlite3_stmt* stmt = nullptr;
    std::string sql = fmt::format("SELECT {} FROM {} LIMIT 0", columns, table);
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
    sqlite3_finalize(stmt);
    if (rc != SQLITE_OK)
      throw input_error(index_name(db),
                        fmt::format("not a kharness archive index: table '{}' has another schema "
                                    "({})",
                                    table, sqlite3_errmsg(db)));
  }
}

// An index of an older format gets the columns added since, filled with what its rows meant.
void upgrade_index(sqlite3* db) {
  for (const auto& a : kAddedColumns) {
    const char* table = kTables[a.table][0];
    if (has_column(db, table, a.name)) continue;
    exec(db, fmt::format("ALTER TABLE {0} ADD COLUMN {1} {2}; UPDATE {0} SET {1} = ({3})", table,
                         a.name, a.type, a.older_value)
                 .c_str());
  }
}

// An index may come from elsewhere (a shard's archive, a CI artifact): it is data, never code.
// Defensive mode (no writes to the schema or shadow tables through SQL), an untrusted schema (no
// function with side effects called from a view or trigger), and nothing but tables and indexes:
// a view named like a table (a recursive one hangs `runs` and `archive merge`), a trigger that
// rewrites rows on insert, or a virtual table is refused as an input error naming the file.
void harden_connection(sqlite3* db) {
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_exec(db, "PRAGMA trusted_schema=OFF", nullptr, nullptr, nullptr);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT type, name FROM sqlite_master WHERE type NOT IN "
                              "('table', 'index') OR (type = 'table' AND sql LIKE 'CREATE "
                              "VIRTUAL%') LIMIT 1",
                              -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    throw input_error(index_name(db),
                      fmt::format("not a readable archive index ({})",
                                  printable_line(bounded(sqlite3_errmsg(db), 120))));
  }
  std::string found;
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    auto text = [&](int i) {
      const unsigned char* t = sqlite3_column_text(stmt, i);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    found = fmt::format("{} '{}'", text(0), printable_line(bounded(text(1), 80)));
  }
  sqlite3_finalize(stmt);
  if (!found.empty())
    throw input_error(index_name(db),
                      fmt::format("not a kharness archive index: it holds a {} (an index holds "
                                  "tables and indexes only)",
                                  found));
}

// A candidate's folder as the index names it must be one of the archive's candidates/ folders:
// an edited index must not send a load to another folder of the machine.
void check_candidate_dir(const fs::path& archive_dir, const fs::path& dir) {
  fs::path rel = dir.lexically_normal().lexically_relative(archive_dir.lexically_normal());
  auto parts = std::distance(rel.begin(), rel.end());
  if (parts != 2 || *rel.begin() != "candidates" || rel.filename() == ".." || rel.filename() == ".")
    throw input_error((archive_dir / "index.sqlite").string(),
                      fmt::format("candidate folder '{}' is not under candidates/",
                                  printable_line(bounded(dir.string(), 120))));
}

json operator_speedup_json(const std::optional<OperatorSpeedup>& s) {
  if (!s) return nullptr;
  return {{"mean", s->mean}, {"geomean", s->geomean}, {"estimated", s->estimated}};
}

OperatorSpeedup operator_speedup_from_json(const json& j, const std::string& file) {
  json_util::require_object(j, file, "operator_speedup");
  OperatorSpeedup s;
  s.mean = json_util::as_number(j.value("mean", json(0.0)), file, "operator_speedup.mean");
  s.geomean = json_util::as_number(j.value("geomean", json(0.0)), file, "operator_speedup.geomean");
  const json estimated = j.value("estimated", json(false));
  json_util::expect_type(estimated, estimated.is_boolean(), "a boolean", file,
                         "operator_speedup.estimated");
  s.estimated = estimated.get<bool>();
  return s;
}

constexpr const char* kCandidateColumns =
    "c.id, c.run_id, c.seq, c.step, c.parent_id, c.name, c.operator, c.origin, c.created_at, "
    "v.status, v.failure_kind, v.failure_message, v.mean_speedup, v.geomean_speedup, "
    "v.mean_sol_fraction, v.seconds, v.gpu, c.cache_key, c.cached_from, c.dir, "
    "v.operator_speedup, v.operator_speedup_estimated "
    "FROM candidates c LEFT JOIN verdicts v ON v.candidate_id = c.id";

}  // namespace

struct Archive::Impl {
  fs::path dir;
  sqlite3* db = nullptr;

  ~Impl() {
    if (db) sqlite3_close(db);
  }

  CandidateSummary summary(const Statement& s) const {
    CandidateSummary c;
    c.id = s.text(0);
    c.run_id = s.text(1);
    c.seq = static_cast<int>(s.integer(2));
    c.step = static_cast<int>(s.integer(3));
    c.parent_id = s.text(4);
    c.name = s.text(5);
    c.operator_name = s.text(6);
    c.origin = s.text(7);
    c.created_at = s.text(8);
    c.status = s.text(9);
    c.failure_kind = s.text(10);
    c.failure_message = s.text(11);
    c.mean_speedup = s.real(12);
    c.geomean_speedup = s.real(13);
    c.mean_sol_fraction = s.real(14);
    c.seconds = s.real(15);
    c.gpu = s.text(16);
    c.cache_key = s.text(17);
    c.cached_from = s.text(18);
    c.dir = dir / s.text(19);
    c.operator_speedup = s.real(20);
    c.operator_speedup_estimated = s.integer(21) != 0;
    return c;
  }

  std::vector<CandidateSummary> query(const std::string& where,
                                      const std::vector<std::string>& args) const {
    Statement s(db, fmt::format("SELECT {} {} ORDER BY c.rowid", kCandidateColumns, where));
    for (std::size_t i = 0; i < args.size(); ++i) s.bind(static_cast<int>(i + 1), args[i]);
    std::vector<CandidateSummary> out;
    while (s.step()) out.push_back(summary(s));
    return out;
  }
};

fs::path Archive::default_dir() {
  if (const char* env = std::getenv("KHARNESS_ARCHIVE"); env && *env) return env;
  return ".kharness";
}

Archive::Archive(const fs::path& dir) : impl_(std::make_unique<Impl>()) {
  impl_->dir = dir;
  std::error_code ec;
  fs::create_directories(dir / "candidates", ec);
  if (ec)
    throw environment_error(
        fmt::format("{}: cannot create the archive folder: {}", dir.string(), ec.message()));
  remove_abandoned_folders(dir / "candidates");
  fs::path index = dir / "index.sqlite";
  {
    // A FIFO or a device as index.sqlite would block SQLite's first read.
    struct stat st {};
    if (::stat(index.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw input_error(index.string(), "not a regular file");
  }
  int rc =
      sqlite3_open_v2(index.c_str(), &impl_->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = impl_->db ? sqlite3_errmsg(impl_->db) : sqlite3_errstr(rc);
    throw environment_error(
        fmt::format("{}: cannot open the archive index: {}", index.string(), message));
  }
  // Concurrent writers wait for each other instead of failing with SQLITE_BUSY.
  sqlite3_busy_timeout(impl_->db, 30000);
  harden_connection(impl_->db);
  // WAL: readers never block the writer, and a killed writer leaves a database that opens (the
  // uncommitted tail of the log is ignored). NORMAL sync is durable against process crashes.
  set_wal(impl_->db);
  exec(impl_->db, "PRAGMA synchronous=NORMAL");
  Transaction t(impl_->db);
  try {
    exec(impl_->db, kSchema);
  } catch (const Error&) {
    check_schema(impl_->db);  // a table of another schema fails CREATE INDEX: say that instead
    throw;
  }
  check_schema(impl_->db);
  upgrade_index(impl_->db);
  t.commit();
}

Archive::~Archive() = default;
Archive::Archive(Archive&&) noexcept = default;
Archive& Archive::operator=(Archive&&) noexcept = default;

const fs::path& Archive::dir() const { return impl_->dir; }

std::string Archive::begin_run(const json& info) {
  json clean = scrub_json_secrets(info.is_null() ? json::object() : info);
  std::string id = run_id_now();
  Statement s(impl_->db,
              "INSERT INTO runs (id, started_at, state, command, operator, info) "
              "VALUES (?, ?, 'running', ?, ?, ?)");
  s.bind(1, id).bind(2, report::utc_now_iso8601());
  s.bind_or_null(3, clean.is_object() ? clean.value("command", "") : "");
  s.bind_or_null(4, clean.is_object() ? clean.value("operator", "") : "");
  s.bind(5, json_util::dump(clean));
  s.step();
  return id;
}

void Archive::set_run_state(const std::string& run_id, const std::string& state) {
  Statement s(impl_->db, "UPDATE runs SET state = ? WHERE id = ?");
  s.bind(1, state).bind(2, run_id);
  s.step();
}

void Archive::finish_run(const std::string& run_id, const std::string& state) {
  Statement s(impl_->db, "UPDATE runs SET state = ?, finished_at = ? WHERE id = ?");
  s.bind(1, state).bind(2, report::utc_now_iso8601()).bind(3, run_id);
  s.step();
}

std::string Archive::add_candidate(const std::string& run_id, const CandidateRecord& record) {
  {
    Statement s(impl_->db, "SELECT 1 FROM runs WHERE id = ?");
    s.bind(1, run_id);
    if (!s.step()) throw input_error("archive", fmt::format("no run '{}'", run_id));
  }
  std::string id = random_hex(12);
  std::string created = report::utc_now_iso8601();
  fs::path rel = fs::path("candidates") / id;
  fs::path final_dir = impl_->dir / rel;
  fs::path tmp_dir = impl_->dir / "candidates" / fmt::format(".{}.tmp.{}", id, ::getpid());

  // 1. Files, each durable, in a folder that appears under its final name only when complete.
  std::error_code ec;
  fs::create_directories(tmp_dir, ec);
  if (ec) io_error(tmp_dir, "cannot create");
  auto put = [&](const std::string& name, std::string_view content) {
    fs::path p = tmp_dir / name;
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    write_durable(p, content);
  };
  auto put_text = [&](const std::string& name, const std::string& text) {
    if (!text.empty()) put(name, scrub_secrets(text));
  };
  auto put_json = [&](const std::string& name, const json& j) {
    if (!j.is_null()) put(name, json_util::dump(scrub_json_secrets(j), 2) + "\n");
  };
  json sources = json::array();
  for (std::size_t i = 0; i < record.sources.size(); ++i) {
    std::string rel_path = safe_relative(record.sources[i].path, i);
    sources.push_back(rel_path);
    put_text("sources/" + rel_path, record.sources[i].content);
    if (i == record.entry) put_text("source.cu", record.sources[i].content);
  }
  put_json("plan.json", record.plan);
  put_json("compile.json", record.compile);
  put_text("compile.log", record.compile_log);
  put_text("kernel.ptx", record.ptx);
  if (!record.cubin.empty()) put("kernel.cubin", record.cubin);  // bytes: never scrubbed
  json timing = json::array();
  if (record.verdict) {
    put_json("verdict.json", to_json(*record.verdict));
    for (const auto& w : record.verdict->workloads) {
      if (json t = to_json(w.timing); !t.empty())
        timing.push_back({{"uuid", w.uuid}, {"axes", w.axes}, {"timing", std::move(t)}});
    }
    if (!timing.empty()) put_json("timing.json", timing);
  }
  put_text("prompt.md", record.prompt);
  put_text("response.md", record.response);
  put_json("usage.json", record.usage);
  put_json("record.json", {{"schema", "kharness.candidate/1"},
                           {"id", id},
                           {"run_id", run_id},
                           {"name", record.name},
                           {"operator", record.operator_name},
                           {"origin", record.origin},
                           {"sources", sources},
                           {"entry", record.entry},
                           {"parent_id", record.parent_id},
                           {"step", record.step},
                           {"cache_key", record.cache_key},
                           {"cached_from", record.cached_from},
                           {"operator_speedup", operator_speedup_json(record.operator_speedup)},
                           {"created_at", created},
                           {"extra", record.extra}});
  fsync_path(tmp_dir, O_RDONLY | O_DIRECTORY);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) io_error(final_dir, "cannot move the candidate into place");
  fsync_path(impl_->dir / "candidates", O_RDONLY | O_DIRECTORY);

  // 2. The index rows, in one transaction.
  Transaction t(impl_->db);
  std::int64_t seq = 1;
  {
    Statement s(impl_->db, "SELECT COALESCE(MAX(seq), 0) + 1 FROM candidates WHERE run_id = ?");
    s.bind(1, run_id);
    if (s.step()) seq = s.integer(0);
  }
  {
    Statement s(impl_->db,
                "INSERT INTO candidates (id, run_id, seq, step, parent_id, name, operator, origin, "
                "created_at, cache_key, cached_from, dir) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
    s.bind(1, id).bind(2, run_id).bind(3, seq).bind(4, static_cast<std::int64_t>(record.step));
    s.bind_or_null(5, record.parent_id).bind(6, record.name).bind(7, record.operator_name);
    s.bind(8, scrub_secrets(record.origin)).bind(9, created);
    s.bind_or_null(10, record.cache_key).bind_or_null(11, record.cached_from);
    s.bind(12, rel.string());
    s.step();
  }
  if (record.verdict) {
    const Verdict& v = *record.verdict;
    Statement s(impl_->db,
                "INSERT INTO verdicts (candidate_id, status, failure_kind, failure_message, "
                "mean_speedup, geomean_speedup, mean_sol_fraction, seconds, gpu, "
                "operator_speedup, operator_speedup_estimated) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    s.bind(1, id).bind(2, std::string(status_name(v.status)));
    // A suspect PASSED verdict keeps its status; its marker goes where a failure's kind would.
    const WorkloadVerdict* suspect = v.first_suspect();
    s.bind_or_null(3, v.failure ? v.failure->kind : v.suspect);
    s.bind_or_null(4, v.failure ? scrub_secrets(v.failure->message)
                      : suspect ? scrub_secrets(suspect->suspect->message)
                                : "");
    // A figure of the index: 0 where the verdict has none (or it is not finite: unknown).
    auto figure = [](bool known, double x) { return known && std::isfinite(x) ? x : 0.0; };
    const Score& score = v.score;
    s.bind(5, figure(score.mean_speedup.has_value(), score.mean_speedup.value_or(0.0)));
    s.bind(6, figure(score.geomean_speedup.has_value(), score.geomean_speedup.value_or(0.0)));
    s.bind(7, figure(score.mean_sol_fraction.has_value(), score.mean_sol_fraction.value_or(0.0)));
    s.bind(8, v.seconds);
    s.bind_or_null(9, v.environment.is_object() ? v.environment.value("gpu", "") : "");
    const auto& op = record.operator_speedup;
    s.bind(10, figure(op.has_value(), op ? op->mean : 0.0));
    s.bind(11, static_cast<std::int64_t>(op && op->estimated));
    s.step();
    for (const auto& w : v.workloads) {
      Statement r(impl_->db,
                  "INSERT OR REPLACE INTO workload_results (candidate_id, uuid, axes, status, "
                  "failure_kind, latency, baseline_latency, speedup, sol_fraction) "
                  "VALUES (?,?,?,?,?,?,?,?,?)");
      r.bind(1, id).bind(2, w.uuid).bind(3, json_util::dump(w.axes));
      r.bind(4, std::string(status_name(w.status)));
      r.bind_or_null(5, w.failure ? w.failure->kind : w.suspect ? w.suspect->kind : "");
      const TimingResult& t = w.timing;
      r.bind(6, figure(t.candidate.has_value(), t.candidate ? t.candidate->latency : 0.0));
      r.bind(7, figure(t.baseline.has_value(), t.baseline ? t.baseline->latency : 0.0));
      r.bind(8, figure(t.speedup.has_value(), t.speedup.value_or(0.0)));
      r.bind(9, figure(t.sol.has_value(), t.sol ? t.sol->fraction : 0.0));
      r.step();
    }
  }
  t.commit();
  return id;
}

std::vector<RunSummary> Archive::runs() const {
  Statement s(impl_->db,
              fmt::format("SELECT r.id, r.started_at, r.finished_at, r.state, r.command, "
                          "r.operator, r.info, COUNT(c.id), SUM(CASE WHEN {0} THEN 1 ELSE 0 END), "
                          "MAX(CASE WHEN {0} THEN v.operator_speedup END) "
                          "FROM runs r LEFT JOIN candidates c ON c.run_id = r.id "
                          "LEFT JOIN verdicts v ON v.candidate_id = c.id "
                          "GROUP BY r.id ORDER BY r.started_at DESC, r.id DESC",
                          kCleanPass));
  std::vector<RunSummary> out;
  while (s.step()) {
    RunSummary r;
    r.id = s.text(0);
    r.started_at = s.text(1);
    r.finished_at = s.text(2);
    r.state = s.text(3);
    r.command = s.text(4);
    r.operator_name = s.text(5);
    r.info = json_util::parse_or_discarded(s.text(6));
    if (r.info.is_discarded()) r.info = json::object();
    r.candidates = static_cast<int>(s.integer(7));
    r.passed = static_cast<int>(s.integer(8));
    r.best_speedup = s.real(9);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<RunSummary> Archive::find_run(const std::string& id_or_prefix) const {
  std::vector<RunSummary> matches;
  for (auto& r : runs()) {
    if (r.id == id_or_prefix) return r;
    if (r.id.rfind(id_or_prefix, 0) == 0) matches.push_back(r);
  }
  if (matches.size() > 1)
    throw input_error(id_or_prefix, fmt::format("{} runs start with this prefix", matches.size()));
  if (matches.empty()) return std::nullopt;
  return matches[0];
}

std::vector<CandidateSummary> Archive::candidates(const std::string& run_id,
                                                  const std::string& operator_name) const {
  std::string where = "WHERE 1=1";
  std::vector<std::string> args;
  if (!run_id.empty()) {
    where += " AND c.run_id = ?";
    args.push_back(run_id);
  }
  if (!operator_name.empty()) {
    where += " AND c.operator = ?";
    args.push_back(operator_name);
  }
  return impl_->query(where, args);
}

std::optional<CandidateSummary> Archive::best(const std::string& operator_name) const {
  std::optional<CandidateSummary> best;
  for (auto& c :
       impl_->query(fmt::format("WHERE c.operator = ? AND {}", kCleanPass), {operator_name})) {
    if (!best || c.operator_speedup >= best->operator_speedup) best = c;
  }
  return best;
}

std::vector<CandidateSummary> Archive::best_per_operator() const {
  std::vector<std::string> names;
  {
    Statement s(impl_->db, "SELECT DISTINCT operator FROM candidates ORDER BY operator");
    while (s.step()) names.push_back(s.text(0));
  }
  std::vector<CandidateSummary> out;
  for (const auto& n : names) {
    if (auto b = best(n)) out.push_back(*b);
  }
  return out;
}

StoredCandidate Archive::load(const std::string& id_or_prefix) const {
  if (id_or_prefix.empty()) throw input_error("candidate", "empty id");
  std::string pattern;
  for (char c : id_or_prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      throw input_error(id_or_prefix, "a candidate id is hexadecimal (see `kharness report`)");
    pattern += c;
  }
  auto found = impl_->query("WHERE c.id LIKE ?", {pattern + "%"});
  if (found.empty())
    throw input_error(id_or_prefix, fmt::format("no candidate in {}", impl_->dir.string()));
  if (found.size() > 1)
    throw input_error(id_or_prefix,
                      fmt::format("{} candidates start with this prefix", found.size()));
  StoredCandidate out;
  out.summary = found[0];
  const fs::path& d = out.summary.dir;
  check_candidate_dir(impl_->dir, d);
  CandidateRecord& r = out.record;
  const std::string record_file = (d / "record.json").string();
  json meta = read_json(impl_->dir, d / "record.json");
  if (meta.is_null()) meta = json::object();
  json_util::require_object(meta, record_file, "");
  r.name = out.summary.name;
  r.operator_name = out.summary.operator_name;
  r.origin = out.summary.origin;
  r.parent_id = out.summary.parent_id;
  r.step = out.summary.step;
  r.cache_key = out.summary.cache_key;
  r.cached_from = out.summary.cached_from;
  if (auto it = meta.find("entry"); it != meta.end() && !it->is_null()) {
    std::int64_t entry = json_util::as_int(*it, record_file, "entry");
    if (entry < 0) throw input_error(json_util::field(record_file, "entry"), "negative");
    r.entry = static_cast<std::size_t>(entry);
  }
  if (auto it = meta.find("extra"); it != meta.end() && !it->is_null()) r.extra = *it;
  if (auto it = meta.find("operator_speedup"); it != meta.end() && !it->is_null())
    r.operator_speedup = operator_speedup_from_json(*it, record_file);
  if (auto it = meta.find("sources"); it != meta.end() && !it->is_null()) {
    json_util::expect_type(*it, it->is_array(), "an array of file names", record_file, "sources");
    for (std::size_t i = 0; i < it->size(); ++i) {
      std::string field = json_util::index_path("sources", i);
      std::string p = json_util::as_string((*it)[i], record_file, field);
      if (safe_relative(p, i) != fs::path(p).lexically_normal().string())
        throw input_error(json_util::field(record_file, field),
                          fmt::format("'{}' leaves the candidate's sources/ folder",
                                      printable_line(bounded(p, 80))));
      r.sources.push_back(SourceFile{p, read_all(impl_->dir, d / "sources" / p)});
    }
  }
  std::error_code absent;
  if (r.sources.empty() && fs::exists(fs::symlink_status(d / "source.cu", absent)))
    r.sources.push_back(SourceFile{"source.cu", read_all(impl_->dir, d / "source.cu")});
  r.plan = read_json(impl_->dir, d / "plan.json");
  r.compile = read_json(impl_->dir, d / "compile.json");
  r.compile_log = read_all(impl_->dir, d / "compile.log");
  r.ptx = read_all(impl_->dir, d / "kernel.ptx");
  r.cubin = read_all(impl_->dir, d / "kernel.cubin");
  json verdict = read_json(impl_->dir, d / "verdict.json");
  if (!verdict.is_null()) r.verdict = verdict_from_json(verdict, (d / "verdict.json").string());
  r.prompt = read_all(impl_->dir, d / "prompt.md");
  r.response = read_all(impl_->dir, d / "response.md");
  r.usage = read_json(impl_->dir, d / "usage.json");
  return out;
}

std::optional<CandidateSummary> Archive::find_cached(const std::string& cache_key) const {
  if (cache_key.empty()) return std::nullopt;
  auto found = impl_->query(
      "WHERE c.cache_key = ? AND (c.cached_from IS NULL OR c.cached_from = '') AND v.status IS "
      "NOT NULL",
      {cache_key});
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    check_candidate_dir(impl_->dir, it->dir);
    if (fs::exists(it->dir / "verdict.json")) return *it;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Merge (docs/archive.md#merge)

namespace {

using Value = Statement::Value;
using Row = std::vector<Value>;

std::string text_of(const Value& v) {
  const auto* t = std::get_if<std::string>(&v);
  return t ? *t : std::string();
}

// Column positions (kTables order).
constexpr std::size_t kRunFinishedAt = 2, kRunState = 3;
constexpr std::size_t kCandidateCacheKey = 9, kCandidateCachedFrom = 10, kCandidateDir = 11;

std::size_t column_count(const std::string& columns) {
  return static_cast<std::size_t>(std::count(columns.begin(), columns.end(), ',')) + 1;
}

// A source archive, read and checked whole before the destination is touched.
struct SourceArchive {
  fs::path dir;
  fs::path index;
  std::vector<Row> runs, candidates;
  std::map<std::string, std::vector<Row>> verdicts, workloads;  // by candidate id
  std::map<std::string, std::vector<fs::path>> files;           // relative to the candidate dir
};

// A read-only look at another archive's index: opened without creating anything, refused as an
// input error naming the file when it is not an SQLite database, fails quick_check, or lacks
// kharness's tables.
class SourceIndex {
 public:
  explicit SourceIndex(const fs::path& index) {
    int rc =
        sqlite3_open_v2(index.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {  // a read-only folder: a read-only connection still reads it
      sqlite3_close(db_);
      db_ = nullptr;
      rc =
          sqlite3_open_v2(index.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
    }
    if (rc != SQLITE_OK) {
      std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      throw input_error(index.string(), fmt::format("cannot open the archive index: {}", message));
    }
    sqlite3_busy_timeout(db_, 30000);
    harden_connection(db_);
    Statement check(db_, "PRAGMA quick_check");
    std::string verdict = check.step() ? check.text(0) : std::string();
    if (verdict != "ok")
      throw input_error(index.string(), fmt::format("a damaged archive index (quick_check: {})",
                                                    printable_line(bounded(verdict, 120))));
    check_schema(db_);
  }
  ~SourceIndex() { sqlite3_close(db_); }
  SourceIndex(const SourceIndex&) = delete;  // owns the connection
  SourceIndex& operator=(const SourceIndex&) = delete;

  // The rows of kTables[t], as this kharness writes them (an older index's added columns as it
  // meant them).
  std::vector<Row> rows(std::size_t t) const {
    Statement s(db_, fmt::format("SELECT {} FROM {} ORDER BY rowid", select_columns(db_, t),
                                 kTables[t][0]));
    std::vector<Row> out;
    std::size_t n = column_count(table_columns(t));
    while (s.step()) {
      Row row;
      for (std::size_t i = 0; i < n; ++i) row.push_back(s.value(static_cast<int>(i)));
      out.push_back(std::move(row));
    }
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

SourceArchive read_source(const fs::path& path) {
  SourceArchive src;
  std::error_code ec;
  src.dir = fs::is_directory(path, ec) ? path : path.parent_path();
  src.index = src.dir / "index.sqlite";
  if (!fs::exists(path, ec)) throw input_error(path.string(), "no such archive folder");
  if (!fs::exists(src.index, ec))
    throw input_error(path.string(), "not a kharness archive (no index.sqlite in this folder)");
  struct stat st {};
  if (::stat(src.index.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw input_error(src.index.string(), "not a regular file");
  SourceIndex index(src.index);
  src.runs = index.rows(0);
  src.candidates = index.rows(1);
  for (auto& row : index.rows(2)) src.verdicts[text_of(row[0])].push_back(std::move(row));
  for (auto& row : index.rows(3)) src.workloads[text_of(row[0])].push_back(std::move(row));
  // Every candidate's folder: under candidates/, regular files and folders only, and the JSON
  // files kharness reads back parse.
  for (const auto& row : src.candidates) {
    std::string id = text_of(row[0]);
    fs::path dir = src.dir / text_of(row[kCandidateDir]);
    check_candidate_dir(src.dir, dir);
    if (!fs::is_directory(dir, ec))
      throw input_error(src.index.string(),
                        fmt::format("candidate {} has no folder {}", id, dir.string()));
    std::vector<fs::path>& files = src.files[id];
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      fs::file_status status = it->symlink_status(ec);
      if (fs::is_directory(status)) continue;
      if (!fs::is_regular_file(status))
        throw input_error(it->path().string(),
                          "not a regular file (a link, a FIFO or a device in an archive)");
      files.push_back(it->path().lexically_relative(dir));
    }
    if (ec) throw input_error(dir.string(), fmt::format("cannot list: {}", ec.message()));
    for (const char* name : {"record.json", "verdict.json"}) read_json(src.dir, dir / name);
  }
  return src;
}

bool exists_in(sqlite3* db, const char* sql, const std::string& id) {
  Statement s(db, sql);
  s.bind(1, id);
  return s.step();
}

// A row of kTables[t] (table_columns order) into `db`.
void insert_row(sqlite3* db, std::size_t t, const Row& row) {
  std::string marks;
  for (std::size_t i = 0; i < row.size(); ++i) marks += i ? ",?" : "?";
  Statement s(
      db, fmt::format("INSERT INTO {} ({}) VALUES ({})", kTables[t][0], table_columns(t), marks));
  for (std::size_t i = 0; i < row.size(); ++i) s.bind(static_cast<int>(i + 1), row[i]);
  s.step();
}

}  // namespace

MergeStats Archive::merge(const fs::path& dest, const std::vector<fs::path>& sources) {
  // 1. Read and check every source: nothing is written before all of them pass.
  std::vector<SourceArchive> srcs;
  for (const auto& p : sources) srcs.push_back(read_source(p));
  // 2. The destination, in one transaction; the folders copied are removed again on failure.
  Archive archive(dest);
  sqlite3* db = archive.impl_->db;
  const fs::path candidates_dir = archive.impl_->dir / "candidates";
  std::error_code ec;
  const fs::path dest_real = fs::weakly_canonical(archive.impl_->dir, ec);
  MergeStats stats;
  std::vector<fs::path> created;
  fs::path in_progress;
  try {
    Transaction t(db);
    for (const auto& src : srcs) {
      ++stats.sources;
      if (fs::weakly_canonical(src.dir, ec) == dest_real) continue;  // itself: nothing to add
      for (const auto& run : src.runs) {
        std::string id = text_of(run[0]);
        Statement q(db, "SELECT finished_at FROM runs WHERE id = ?");
        q.bind(1, id);
        if (!q.step()) {
          insert_row(db, 0, run);
          ++stats.runs_added;
        } else if (q.text(0).empty() && !text_of(run[kRunFinishedAt]).empty()) {
          // The same run, copied while it was still going: the source knows how it ended.
          Statement u(db, "UPDATE runs SET state = ?, finished_at = ? WHERE id = ?");
          u.bind(1, run[kRunState]).bind(2, run[kRunFinishedAt]).bind(3, id);
          u.step();
        }
      }
      for (const auto& source_row : src.candidates) {
        std::string id = text_of(source_row[0]);
        if (exists_in(db, "SELECT 1 FROM candidates WHERE id = ?", id)) {
          ++stats.candidates_present;
          continue;
        }
        Row row = source_row;
        std::string reused;
        auto verdicts = src.verdicts.find(id);
        std::string key = text_of(row[kCandidateCacheKey]);
        if (text_of(row[kCandidateCachedFrom]).empty() && !key.empty() &&
            verdicts != src.verdicts.end()) {
          Statement q(db,
                      "SELECT c.id FROM candidates c JOIN verdicts v ON v.candidate_id = c.id "
                      "WHERE c.cache_key = ? AND (c.cached_from IS NULL OR c.cached_from = '') "
                      "ORDER BY c.rowid LIMIT 1");
          q.bind(1, key);
          if (q.step()) reused = q.text(0);
        }
        fs::path from = src.dir / text_of(source_row[kCandidateDir]);
        fs::path rel = fs::path("candidates") / id;
        fs::path final_dir = archive.impl_->dir / rel;
        in_progress = candidates_dir / fmt::format(".{}.tmp.{}", id, ::getpid());
        fs::remove_all(in_progress, ec);
        fs::create_directories(in_progress, ec);
        if (ec) io_error(in_progress, "cannot create");
        for (const auto& file : src.files.at(id)) {
          std::string content = read_all(src.dir, from / file);
          if (file == "record.json" && !reused.empty()) {
            json meta = json_util::parse_text<json>(content, (from / file).string());
            meta["cached_from"] = reused;
            content = json_util::dump(meta, 2) + "\n";
          }
          fs::path to = in_progress / file;
          fs::create_directories(to.parent_path(), ec);
          write_durable(to, content);
        }
        fsync_path(in_progress, O_RDONLY | O_DIRECTORY);
        fs::remove_all(final_dir, ec);  // an unindexed leftover of a killed writer
        fs::rename(in_progress, final_dir, ec);
        if (ec) io_error(final_dir, "cannot move the candidate into place");
        in_progress.clear();
        created.push_back(final_dir);
        row[kCandidateDir] = rel.string();
        if (!reused.empty()) {
          row[kCandidateCachedFrom] = reused;
          ++stats.verdicts_reused;
        }
        insert_row(db, 1, row);
        if (verdicts != src.verdicts.end())
          for (const auto& v : verdicts->second) insert_row(db, 2, v);
        if (auto w = src.workloads.find(id); w != src.workloads.end())
          for (const auto& r : w->second) insert_row(db, 3, r);
        ++stats.candidates_added;
      }
    }
    fsync_path(candidates_dir, O_RDONLY | O_DIRECTORY);
    t.commit();
  } catch (...) {
    if (!in_progress.empty()) fs::remove_all(in_progress, ec);
    for (const auto& d : created) fs::remove_all(d, ec);
    throw;
  }
  return stats;
}

}  // namespace kharness::archive
