// Landlock through its raw system calls (glibc has no wrappers), resource limits and the
// scrubbed environment. See include/kharness/sandbox.hpp.
//
// Landlock ABI versions and what each adds (Documentation/userspace-api/landlock.rst):
//   1 (5.13)  file-system rights EXECUTE .. MAKE_SYM      4 (6.7)  TCP bind/connect rights
//   2 (5.19)  REFER (link/rename across folders)          5 (6.10) IOCTL_DEV
//   3 (6.2)   TRUNCATE                                    6 (6.12) scoped signals and abstract
//                                                                  UNIX sockets
// The ruleset handles every right the kernel knows, so whatever is not granted is refused; the
// attribute struct is passed in the size the ABI knows.
#include "kharness/sandbox.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>
#include <system_error>

extern char** environ;  // NOLINT: POSIX

namespace kharness::sandbox {
namespace {

namespace fs = std::filesystem;

// Rights by number, so that an older <linux/landlock.h> still builds; the kernel decides.
constexpr std::uint64_t kExecute = 1ULL << 0;
constexpr std::uint64_t kWriteFile = 1ULL << 1;
constexpr std::uint64_t kReadFile = 1ULL << 2;
constexpr std::uint64_t kReadDir = 1ULL << 3;
constexpr std::uint64_t kRefer = 1ULL << 13;
constexpr std::uint64_t kTruncate = 1ULL << 14;
constexpr std::uint64_t kIoctlDev = 1ULL << 15;
constexpr std::uint64_t kAbi1Fs = (1ULL << 13) - 1;  // EXECUTE .. MAKE_SYM
constexpr std::uint64_t kNetBindTcp = 1ULL << 0;
constexpr std::uint64_t kNetConnectTcp = 1ULL << 1;
constexpr std::uint64_t kScopeAbstractUnixSocket = 1ULL << 0;
constexpr std::uint64_t kScopeSignal = 1ULL << 1;
constexpr std::uint32_t kCreateRulesetVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;

struct RulesetAttr {  // struct landlock_ruleset_attr, all versions
  std::uint64_t handled_access_fs = 0;
  std::uint64_t handled_access_net = 0;
  std::uint64_t scoped = 0;
};

struct __attribute__((packed)) PathBeneathAttr {  // struct landlock_path_beneath_attr
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::uint64_t handled_fs(int abi) {
  std::uint64_t rights = kAbi1Fs;
  if (abi >= 2) rights |= kRefer;
  if (abi >= 3) rights |= kTruncate;
  if (abi >= 5) rights |= kIoctlDev;
  return rights;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// "" or why the rule could not be added; a missing path is skipped.
std::string add_rule(int ruleset, const fs::path& path, std::uint64_t dir_rights,
                     std::uint64_t file_rights) {
  Fd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (fd.get() < 0)
    return errno == ENOENT || errno == ENOTDIR ? "" : path.string() + ": " + errno_text(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return path.string() + ": " + errno_text(errno);
  PathBeneathAttr attr{S_ISDIR(st.st_mode) ? dir_rights : file_rights, fd.get()};
  if (::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &attr, 0) != 0) {
    return fmt::format("landlock_add_rule {}: {}", path.string(), errno_text(errno));
  }
  return "";
}

bool looks_secret(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  for (std::string_view word : {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                                "AUTH", "COOKIE", "SESSION"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

LandlockSupport landlock_support() {
  static const LandlockSupport support = [] {
    LandlockSupport s;
    long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
    if (abi > 0) {
      s.abi = static_cast<int>(abi);
      return s;
    }
    int err = errno;
    if (err == ENOSYS) {
      s.reason = "the kernel has no Landlock (Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK)";
    } else if (err == EOPNOTSUPP) {
      s.reason = "Landlock is built in but not enabled (add landlock to the lsm= boot parameter)";
    } else if (err == EPERM) {
      s.reason = "a seccomp filter (container runtime) refuses the Landlock system calls";
    } else {
      s.reason = "landlock_create_ruleset: " + errno_text(err);
    }
    return s;
  }();
  return support;
}

std::string restrict_self(const FsRules& rules) {
  const LandlockSupport support = landlock_support();
  if (!support.available()) return support.reason;
  const int abi = support.abi;
  RulesetAttr attr;
  attr.handled_access_fs = handled_fs(abi);
  std::size_t size = sizeof(std::uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;  // no rule: no TCP at all
    size = 2 * sizeof(std::uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    size = sizeof(RulesetAttr);
  }
  Fd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, size, 0)));
  if (ruleset.get() < 0) return "landlock_create_ruleset: " + errno_text(errno);

  const std::uint64_t read_dir = kExecute | kReadFile | kReadDir;
  const std::uint64_t read_file = kExecute | kReadFile;
  const std::uint64_t write_dir = handled_fs(abi);
  const std::uint64_t write_file = (kWriteFile | kReadFile | (abi >= 3 ? kTruncate : 0));
  for (const auto& p : rules.read) {
    if (std::string why = add_rule(ruleset.get(), p, read_dir, read_file); !why.empty()) return why;
  }
  for (const auto& p : rules.write) {
    if (std::string why = add_rule(ruleset.get(), p, write_dir, write_file); !why.empty())
      return why;
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return "prctl(PR_SET_NO_NEW_PRIVS): " + errno_text(errno);
  }
  if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0) {
    return "landlock_restrict_self: " + errno_text(errno);
  }
  return "";
}

std::vector<fs::path> mapped_files() {
  std::set<std::string> seen;
  std::vector<fs::path> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0) continue;
    if (seen.insert(path).second) out.emplace_back(path);
  }
  return out;
}

std::string apply_limits(const Limits& limits) {
  auto set = [](int resource, rlim_t soft, rlim_t hard, const char* name) -> std::string {
    rlimit current{};
    if (::getrlimit(resource, &current) == 0) {
      // Never above what the process already has (an unprivileged process cannot raise it).
      if (current.rlim_max != RLIM_INFINITY) {
        hard = std::min(hard, current.rlim_max);
        soft = std::min(soft, hard);
      }
    }
    rlimit r{soft, hard};
    if (::setrlimit(resource, &r) != 0)
      return fmt::format("setrlimit({}): {}", name, errno_text(errno));
    return "";
  };
  std::string why;
  if (limits.cpu_seconds > 0) {
    auto soft = static_cast<rlim_t>(std::ceil(limits.cpu_seconds));
    why = set(RLIMIT_CPU, soft, soft + 2, "RLIMIT_CPU");
    if (!why.empty()) return why;
  }
  if (limits.address_space_bytes > 0) {
    why = set(RLIMIT_AS, limits.address_space_bytes, limits.address_space_bytes, "RLIMIT_AS");
    if (!why.empty()) return why;
  }
  why = set(RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes, "RLIMIT_FSIZE");
  if (!why.empty()) return why;
  if (limits.no_core) why = set(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  return why;
}

bool passes_scrub(const std::string& name) {
  static const std::set<std::string, std::less<>> exact = {
      "PATH",     "HOME", "TMPDIR",          "LANG",          "LC_ALL",
      "LC_CTYPE", "TZ",   "LD_LIBRARY_PATH", "XDG_CACHE_HOME"};
  if (looks_secret(name)) return false;
  if (exact.count(name) != 0) return true;
  for (std::string_view prefix : {"CUDA_", "NVIDIA_", "KHARNESS_"}) {
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> scrubbed_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(entry.substr(0, eq));
    if (passes_scrub(name)) out.emplace_back(name, std::string(entry.substr(eq + 1)));
  }
  return out;
}

}  // namespace kharness::sandbox
