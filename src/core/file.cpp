#include "kharness/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

#include "kharness/error.hpp"

namespace kharness {
namespace fs = std::filesystem;

namespace {

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

std::string mib(std::size_t bytes) {
  return fmt::format("{:.3g} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;  // one owner closes it
  Fd& operator=(const Fd&) = delete;
};

std::optional<std::string> fail_with(std::string* why, std::string reason) {
  if (why != nullptr) *why = std::move(reason);
  return std::nullopt;
}

// The contents of the open descriptor `fd`: a regular file of at most `max_bytes`.
std::optional<std::string> read_open_file(int fd, std::size_t max_bytes, std::string* why) {
  auto fail = [&](std::string reason) { return fail_with(why, std::move(reason)); };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    std::string kind = file_kind(st.st_mode);
    return fail(kind == "not a regular file" ? kind : "is " + kind + ", not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return fail(fmt::format("{} bytes; at most {} are read", st.st_size, mib(max_bytes)));
  }
  // Back to blocking reads (a regular file never blocks; O_NONBLOCK only guarded the open).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t have = 0;
  while (true) {
    if (have == out.size()) {
      if (out.size() >= max_bytes + 1) break;
      out.resize(std::min(max_bytes + 1, out.size() + 65536));  // the file may have grown
    }
    ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(fmt::format("read failed: {}", std::strerror(errno)));
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  if (have > max_bytes) return fail(fmt::format("over {}; at most that is read", mib(max_bytes)));
  out.resize(have);
  return out;
}

std::string open_error(int err) {
  if (err == ENOENT) return "no such file";
  if (err == ENXIO) return "is a FIFO or socket, not a regular file";
  if (err == ELOOP) return "is a symlink (links are not followed here)";
  if (err == EXDEV) return "leads out of its folder";
  if (err == ENOTDIR) return "a part of the path is not a folder";
  return fmt::format("cannot open: {}", std::strerror(err));
}

constexpr int kReadFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

// openat2(2) (Linux 5.6): the kernel resolves the whole path beneath `dir` and refuses any
// symlink (magic links of /proc included) on the way. -1 with errno ENOSYS where the kernel (or a
// seccomp filter, which answers EPERM) does not offer it.
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
struct OpenHow {  // struct open_how of <linux/openat2.h>, which older headers lack
  std::uint64_t flags;
  std::uint64_t mode;
  std::uint64_t resolve;
};
constexpr std::uint64_t kResolveNoMagiclinks = 0x02;
constexpr std::uint64_t kResolveNoSymlinks = 0x04;
constexpr std::uint64_t kResolveBeneath = 0x08;

std::atomic<bool> force_component_walk{false};
std::atomic<bool> openat2_missing{false};

int openat2_beneath(int dir, const std::string& relative) {
  if (force_component_walk.load() || openat2_missing.load()) {
    errno = ENOSYS;
    return -1;
  }
  OpenHow how{static_cast<std::uint64_t>(kReadFlags), 0,
              kResolveBeneath | kResolveNoSymlinks | kResolveNoMagiclinks};
  long fd = ::syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
    openat2_missing.store(true);
    errno = ENOSYS;
  }
  return static_cast<int>(fd);
}

// Without openat2: one openat per component, each with O_NOFOLLOW (a symlink anywhere fails
// with ELOOP), from `dir` down; ".." was refused before, so nothing resolves above `dir`.
int component_walk(int dir, const std::vector<std::string>& parts) {
  int current = dir;
  std::optional<Fd> held;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    int next = ::openat(current, parts[i].c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (next < 0) {
      // A symlink to a folder fails O_DIRECTORY|O_NOFOLLOW with ENOTDIR or ELOOP; say it is a link.
      int err = errno;
      struct stat st {};
      if (::fstatat(current, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode))
        err = ELOOP;
      errno = err;
      return -1;
    }
    held.reset();
    held.emplace(next);
    current = next;
  }
  return ::openat(current, parts.back().c_str(), kReadFlags | O_NOFOLLOW);
}

}  // namespace

std::optional<std::string> try_read_regular_file(const fs::path& path, std::size_t max_bytes,
                                                 std::string* why) {
  int fd = ::open(path.c_str(), kReadFlags);
  if (fd < 0) return fail_with(why, open_error(errno));
  Fd close_fd{fd};
  return read_open_file(fd, max_bytes, why);
}

std::optional<std::string> try_read_file_beneath(const fs::path& root, const fs::path& relative,
                                                 std::size_t max_bytes, std::string* why) {
  std::vector<std::string> parts;
  for (const auto& part : relative) {
    const std::string p = part.string();
    if (p.empty() || p == ".") continue;  // "a//b", "./a", a trailing "/"
    if (p == "..") return fail_with(why, "leads out of its folder ('..')");
    parts.push_back(p);
  }
  if (relative.is_absolute() || relative.has_root_name())
    return fail_with(why, "an absolute path where a path inside a folder was expected");
  if (parts.empty()) return fail_with(why, "an empty path");
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return fail_with(why, fmt::format("its folder: {}", open_error(errno)));
  Fd close_dir{dir};
  std::string joined;
  for (const auto& p : parts) joined += (joined.empty() ? "" : "/") + p;
  int fd = openat2_beneath(dir, joined);
  if (fd < 0 && errno == ENOSYS) fd = component_walk(dir, parts);
  if (fd < 0) return fail_with(why, open_error(errno));
  Fd close_fd{fd};
  return read_open_file(fd, max_bytes, why);
}

std::string read_file_beneath(const fs::path& root, const fs::path& relative,
                              std::size_t max_bytes) {
  std::string why;
  std::optional<std::string> text = try_read_file_beneath(root, relative, max_bytes, &why);
  if (!text) throw input_error((root / relative).string(), why);
  return std::move(*text);
}

std::optional<std::string> try_read_file_nofollow(const fs::path& path, std::size_t max_bytes,
                                                  std::string* why) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return try_read_file_beneath(dir, path.filename(), max_bytes, why);
}

namespace file_testing {
void use_component_walk(bool on) { force_component_walk.store(on); }
bool kernel_has_openat2() {
  int dir = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  Fd close_dir{dir};
  OpenHow how{static_cast<std::uint64_t>(O_RDONLY | O_DIRECTORY | O_CLOEXEC), 0, kResolveBeneath};
  long fd = ::syscall(SYS_openat2, dir, ".", &how, sizeof how);
  if (fd >= 0) ::close(static_cast<int>(fd));
  return fd >= 0;
}
}  // namespace file_testing

std::string read_regular_file(const fs::path& path, std::size_t max_bytes) {
  std::string why;
  std::optional<std::string> text = try_read_regular_file(path, max_bytes, &why);
  if (!text) throw input_error(path.string(), why);
  return std::move(*text);
}

}  // namespace kharness
